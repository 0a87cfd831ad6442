// Top-k selection, written once; compiled per level by simd/<level>/topk.cpp. See simd/topk.hpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "simd/vec/level.hpp"
#include "simd/vec/scratch.hpp"
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
#if defined(MLAKIT_SIMD_HAS_COMPRESS)
    static_assert(sizeof(Entry) == 8 && offsetof(Entry, key) == 0 && offsetof(Entry, idx) == 4,
                  "an entry is the pair (key, index)");
    if (__builtin_popcount(mask) > 2) {  // one or two lanes: the scalar stores below cost less
      count += store_lane_pairs(key ^ isplat(static_cast<std::int32_t>(0x80000000u)), static_cast<std::int32_t>(i),
                                mask, out + count);
      continue;
    }
#endif
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
  // Sample j reads s[(j * n) / samples + (j * 7) % stride], stepped without a division (two
  // divisions per sample were a tenth of a prefill row's selection).
  const std::size_t stride = n / samples, r_step = n % samples;
  std::size_t q = 0, rem = 0, o = 0;
  for (std::size_t j = 0; j < samples; ++j) {
    sample[j] = key_of(s[q + o]);
    q += stride;
    rem += r_step;
    if (rem >= samples) ++q, rem -= samples;
    o += 7;
    while (o >= stride) o -= stride;
  }
  std::nth_element(sample, sample + (r - 1), sample + samples, KeyGreater{});
  return sample[r - 1];
}

// ---- radix passes over the candidates' keys ----------------------------------------------------------
// Digits are cut from (key - lo) or (hi - key) over the keys' own span, at most 11 bits (2048
// buckets, 8 KiB of counts): scores of one row mostly share their sign and exponent bits, so fixed
// 8-bit digits of the whole key spend passes on bytes every candidate has in common.
constexpr unsigned kMaxDigitBits = 11;

inline unsigned bit_width(std::uint64_t x) { return x == 0 ? 0u : 64u - static_cast<unsigned>(__builtin_clzll(x)); }

// The shift that maps a span of keys to at most 2^bits buckets, bits sized to `count` elements
// (a bucket select over a few keys should not clear 2048 counts).
inline unsigned digit_shift(std::uint32_t span, std::size_t count) {
  unsigned bits = bit_width(count);
  bits = bits < 4 ? 4 : (bits > kMaxDigitBits ? kMaxDigitBits : bits);
  const unsigned w = bit_width(span);
  return w > bits ? w - bits : 0u;
}

template <class Key>
inline void key_span(std::size_t count, Key&& key, std::uint32_t& lo, std::uint32_t& hi) {
  lo = ~0u;
  hi = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t k = key(i);
    lo = k < lo ? k : lo;
    hi = k > hi ? k : hi;
  }
}

// Stable sort of e[0..m), every key in [lo, hi], by key, descending (equal keys keep their order,
// which is index order): a least-significant-digit radix sort of hi - key, all digit counts taken
// in one pass, then one stable scatter per digit (2 of 11 bits for a span of 22 bits, 3 for 32).
// Fixed work per element: scores bunch near the k-th best, so buckets of a leading digit come out
// uneven and sorting inside them costs what the scatter saved.
constexpr unsigned kMaxPasses = (32 + kMaxDigitBits - 1) / kMaxDigitBits;

void sort_desc(Entry* e, Entry* tmp, std::size_t m, std::uint32_t lo, std::uint32_t hi) {
  const unsigned w = bit_width(hi - lo);
  if (w == 0) return;  // equal keys: index order is already the order
  // As few passes as digits of up to 11 bits allow: a pass scatters every entry, which costs
  // more than summing 2048 counts (8-bit digits measured slower).
  const unsigned passes = (w + kMaxDigitBits - 1) / kMaxDigitBits, bits = (w + passes - 1) / passes;
  const std::uint32_t mask = (1u << bits) - 1u;
  std::uint32_t at[kMaxPasses][std::size_t{1} << kMaxDigitBits];
  for (unsigned p = 0; p < passes; ++p) std::memset(at[p], 0, sizeof at[p][0] << bits);
  for (std::size_t i = 0; i < m; ++i) {
    const std::uint32_t d = hi - e[i].key;
    for (unsigned p = 0; p < passes; ++p) ++at[p][(d >> (p * bits)) & mask];
  }
  Entry* src = e;
  Entry* dst = tmp;
  for (unsigned p = 0; p < passes; ++p) {
    std::uint32_t* a = at[p];
    for (std::uint32_t b = 0, sum = 0; b <= mask; ++b) {
      const std::uint32_t c = a[b];
      a[b] = sum;
      sum += c;
    }
    const unsigned sh = p * bits;
    for (std::size_t i = 0; i < m; ++i) dst[a[((hi - src[i].key) >> sh) & mask]++] = src[i];
    std::swap(src, dst);
  }
  if (src != e) std::memcpy(e, src, m * sizeof(Entry));
}

struct EntryBetter {  // the spec order on candidates: higher key, then smaller index
  bool operator()(const Entry& a, const Entry& b) const { return a.key > b.key || (a.key == b.key && a.idx < b.idx); }
};

// Keeps the m best of the `count` candidates (in index order) at the front of e, in index order:
// every key above the m-th best key, and the first (smallest-index) ones equal to it. The m-th best
// key is found by bucket counts over the keys' span, narrowed to the bucket that holds it (whose
// keys are copied to `keys`, at most count of them) until a bucket is one key. Sets [kept_lo,
// kept_hi] to the span of the keys kept, for the sort.
void keep_best(Entry* e, std::size_t count, std::size_t m, std::uint32_t* keys, std::uint32_t& kept_lo,
               std::uint32_t& kept_hi) {
  std::uint32_t lo, hi;
  key_span(count, [e](std::size_t i) { return e[i].key; }, lo, hi);
  kept_lo = lo;
  kept_hi = hi;  // the best key is always kept
  if (count <= m) return;
  std::uint32_t hist[std::size_t{1} << kMaxDigitBits];
  std::size_t need = m, live = count;
  bool in_keys = false;  // the live keys: e[0..count) first, then keys[0..live)
  std::uint32_t threshold;  // the m-th best key; `need` of its `ties` equals are taken
  std::size_t ties;
  for (;;) {
    const unsigned sh = digit_shift(hi - lo, live);
    const std::size_t nb = static_cast<std::size_t>((hi - lo) >> sh) + 1;
    std::memset(hist, 0, nb * sizeof hist[0]);
    if (in_keys)
      for (std::size_t i = 0; i < live; ++i) ++hist[(keys[i] - lo) >> sh];
    else
      for (std::size_t i = 0; i < live; ++i) ++hist[(e[i].key - lo) >> sh];
    std::size_t b = nb;
    for (;;) {
      --b;
      if (hist[b] >= need) break;
      need -= hist[b];
    }
    const std::uint32_t blo = lo + static_cast<std::uint32_t>(b << sh);
    if (sh == 0) {
      threshold = kept_lo = blo;
      ties = hist[b];  // every key equal to it is live here
      break;
    }
    const std::uint64_t bhi64 = std::uint64_t{blo} + ((std::uint64_t{1} << sh) - 1);
    const std::uint32_t bhi = bhi64 < hi ? static_cast<std::uint32_t>(bhi64) : hi;
    std::size_t w = 0;  // in place when the keys come from `keys`: w never passes i
    if (in_keys)
      for (std::size_t i = 0; i < live; ++i) {
        keys[w] = keys[i];
        w += keys[i] - blo <= bhi - blo;
      }
    else
      for (std::size_t i = 0; i < live; ++i) {
        keys[w] = e[i].key;
        w += e[i].key - blo <= bhi - blo;
      }
    live = w;
    in_keys = true;
    key_span(live, [keys](std::size_t i) { return keys[i]; }, lo, hi);
  }
  // Every key above the threshold, and the first `need` equal to it: all of them, unless some of
  // the threshold's equals fall past the m-th place (then the count runs in index order).
  std::size_t w = 0;
  if (need == ties)
    for (std::size_t i = 0; i < count; ++i) {
      e[w] = e[i];
      w += e[i].key >= threshold;
    }
  else
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint32_t k = e[i].key;
      const bool tie = k == threshold && need > 0;
      need -= tie;
      e[w] = e[i];
      w += (k > threshold) | tie;
    }
}

constexpr std::size_t kSmallM = 512;

std::size_t topk_select(const float* scores, std::size_t n, std::size_t k, TopkNan nan_policy, std::int32_t* out,
                        void* scratch) {
  if (n == 0 || k == 0) return 0;
  auto* base = reinterpret_cast<Entry*>(cache_line_start(scratch));
  Entry* cand = base;      // n entries
  Entry* tmp = base + n;   // min(n, k) entries
  auto* keys = reinterpret_cast<std::uint32_t*>(tmp + (k < n ? k : n));  // n keys
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
    std::uint32_t lo, hi;
    keep_best(cand, count, m, keys, lo, hi);  // keeps index order, which the stable radix sort relies on
    sort_desc(cand, tmp, m, lo, hi);
  }
  for (std::size_t t = 0; t < m; ++t) out[t] = cand[t].idx;
  return m;
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
