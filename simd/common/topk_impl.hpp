// Top-k selection, written once; compiled per level by simd/<level>/topk.cpp. See simd/topk.hpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "simd/common/level.hpp"
#include "simd/common/scratch.hpp"
#include "simd/topk.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

constexpr std::int32_t kNanKey = static_cast<std::int32_t>(0x80000000u);  // below every number's key

// Signed key whose integer order is the score order: +0 and -0 both give 0, NaN gives kNanKey,
// -inf gives kNanKey + 0x7FFFFF.
inline std::int32_t key_of(float f) {
  f = f + 0.0f;  // -0 -> +0
  if (f != f) return kNanKey;
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  const std::uint32_t flip = (b >> 31) ? 0x7FFFFFFFu : 0u;
  return static_cast<std::int32_t>(b ^ flip);
}

inline I keys_of(F f) {
  f = f + fzero();
  const I b = bits(f);
  return select(is_nan(f), isplat(kNanKey), b ^ shr<1>(sar<31>(b)));
}

inline std::uint32_t ukey(std::int32_t key) { return static_cast<std::uint32_t>(key) ^ 0x80000000u; }

struct Entry {
  std::uint32_t key;  // unsigned order key
  std::int32_t idx;
};

// Appends {key, index} for every score whose key is >= lo (every score when lo is kNanKey), in
// index order. Returns the count.
std::size_t scan(const float* s, std::size_t n, std::int32_t lo, Entry* out) {
  const bool all = lo == kNanKey;
  const I below = isplat(all ? kNanKey : lo - 1);
  constexpr std::uint32_t kFull = kLanes >= 32 ? ~0u : (1u << kLanes) - 1u;
  std::size_t count = 0;
  std::int32_t tmp[kLanes];
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const I key = keys_of(fload(s + i));
    std::uint32_t mask = all ? kFull : movemask(cmpgt(key, below));
    if (!mask) continue;
    istore(tmp, key);
    while (mask) {
      const unsigned l = static_cast<unsigned>(__builtin_ctz(mask));
      mask &= mask - 1;
      out[count++] = {ukey(tmp[l]), static_cast<std::int32_t>(i + l)};
    }
  }
  for (; i < n; ++i) {
    const std::int32_t key = key_of(s[i]);
    if (all || key >= lo) out[count++] = {ukey(key), static_cast<std::int32_t>(i)};
  }
  return count;
}

struct KeyGreater {
  bool operator()(std::int32_t a, std::int32_t b) const { return a > b; }
};

// A key that about 1.25 k + margin of the n scores reach, from a strided sample; kNanKey when a
// sample cannot help (the threshold would let (nearly) everything through).
std::int32_t sample_threshold(const float* s, std::size_t n, std::size_t k) {
  // n/16 samples, 64 .. 2048: selecting within the sample must stay cheap next to the scan.
  constexpr std::size_t kMaxSample = 2048;
  std::size_t samples = n / 16 < kMaxSample ? n / 16 : kMaxSample;
  if (samples < 64) samples = 64;
  const std::size_t want = k * samples / n;
  const std::size_t r = want + want / 4 + 16;
  if (r >= samples / 2) return kNanKey;
  std::int32_t sample[kMaxSample];
  const std::size_t stride = n / samples;
  for (std::size_t j = 0; j < samples; ++j) sample[j] = key_of(s[(j * n) / samples + (j * 7) % stride]);
  std::nth_element(sample, sample + (r - 1), sample + samples, KeyGreater{});
  return sample[r - 1];
}

// Stable sort by key, descending (equal keys keep their order, which is index order).
void sort_desc(Entry* e, Entry* tmp, std::size_t m) {
  if (m < 64) {
    for (std::size_t i = 1; i < m; ++i) {
      const Entry x = e[i];
      std::size_t j = i;
      for (; j > 0 && e[j - 1].key < x.key; --j) e[j] = e[j - 1];
      e[j] = x;
    }
    return;
  }
  std::uint32_t count[256];
  Entry* src = e;
  Entry* dst = tmp;
  for (unsigned sh = 0; sh < 32; sh += 8) {
    std::memset(count, 0, sizeof count);
    for (std::size_t i = 0; i < m; ++i) ++count[(~src[i].key >> sh) & 0xFF];
    bool single = false;
    for (std::uint32_t d = 0; d < 256; ++d) single = single || count[d] == m;
    if (single) continue;  // every element has the same digit: the pass would not move anything
    std::uint32_t sum = 0;
    for (std::uint32_t d = 0; d < 256; ++d) {
      const std::uint32_t c = count[d];
      count[d] = sum;
      sum += c;
    }
    for (std::size_t i = 0; i < m; ++i) dst[count[(~src[i].key >> sh) & 0xFF]++] = src[i];
    std::swap(src, dst);
  }
  if (src != e) std::memcpy(e, src, m * sizeof(Entry));
}

// Keeps the m best of the `count` candidates (in index order) at the front of e, in index order:
// every key above the m-th best key, and the first (smallest-index) ones equal to it.
struct EntryBetter {  // the spec order on candidates: higher key, then smaller index
  bool operator()(const Entry& a, const Entry& b) const { return a.key > b.key || (a.key == b.key && a.idx < b.idx); }
};

void keep_best(Entry* e, std::size_t count, std::size_t m) {
  if (count <= m) return;
  std::uint32_t hist[257];
  std::uint32_t prefix = 0, prefix_mask = 0;
  std::size_t need = m;
  for (int sh = 24; sh >= 0; sh -= 8) {
    std::memset(hist, 0, sizeof hist);
    for (std::size_t i = 0; i < count; ++i) {  // branch-free: non-matching keys count in bucket 256
      const bool match = (e[i].key & prefix_mask) == prefix;
      ++hist[match ? (e[i].key >> sh) & 0xFF : 256];
    }
    std::uint32_t b = 256;
    while (b > 0) {
      --b;
      if (hist[b] >= need) break;
      need -= hist[b];
    }
    prefix |= b << sh;
    prefix_mask |= 0xFFu << sh;
  }
  const std::uint32_t threshold = prefix;  // the m-th best key; `need` of its equals are taken
  std::size_t w = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (e[i].key > threshold) {
      e[w++] = e[i];
    } else if (e[i].key == threshold && need) {
      --need;
      e[w++] = e[i];
    }
  }
}

constexpr std::size_t kSmallM = 512;

std::size_t topk_select(const float* scores, std::size_t n, std::size_t k, TopkNan nan_policy, std::int32_t* out,
                        void* scratch) {
  if (n == 0 || k == 0) return 0;
  auto* base = reinterpret_cast<Entry*>(cache_line_start(scratch));
  Entry* cand = base;      // n entries
  Entry* tmp = base + n;   // min(n, k) entries
  const std::int32_t lo_all = nan_policy == TopkNan::exclude ? kNanKey + 1 : kNanKey;

  std::size_t count = 0;
  bool done = false;
  if (n >= 1024 && 2 * k < n) {
    const std::int32_t t0 = sample_threshold(scores, n, k);
    if (t0 > lo_all) {
      count = scan(scores, n, t0, cand);
      done = count >= k;  // then the k best are all at or above t0
    }
  }
  if (!done) count = scan(scores, n, lo_all, cand);
  const std::size_t m = k < count ? k : count;
  if (m <= kSmallM) {
    // Few winners: comparison selection and sort on (key, index) beat the radix passes.
    if (count > m) std::nth_element(cand, cand + (m - 1), cand + count, EntryBetter{});
    std::sort(cand, cand + m, EntryBetter{});
  } else {
    keep_best(cand, count, m);  // keeps index order, which the stable radix sort relies on
    sort_desc(cand, tmp, m);
  }
  for (std::size_t t = 0; t < m; ++t) out[t] = cand[t].idx;
  return m;
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
