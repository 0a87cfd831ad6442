// Top-k selection, written once; compiled per level by simd/<level>/topk.cpp. See simd/topk.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "simd/common/level.hpp"
#include "simd/topk.hpp"

namespace mlakit::simd::MLAKIT_SIMD_NS {
namespace {

constexpr std::int32_t kNanKey = static_cast<std::int32_t>(0x80000000u);  // below every number's key

inline std::uint32_t popcount32(std::uint32_t x) {
  std::uint32_t c = 0;
  for (; x; x &= x - 1) ++c;
  return c;
}

// Signed keys whose integer order is the score order: +0 and -0 both give 0, NaN gives kNanKey,
// -inf gives kNanKey + 0x7FFFFF. Returns the number of NaNs.
std::size_t make_keys(const float* s, std::size_t n, std::int32_t* keys) {
  std::size_t nans = 0;
  const F zero = fzero();
  const I nan_key = isplat(kNanKey);
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const F f = fload(s + i) + zero;  // -0 + +0 = +0
    const I b = bits(f);
    const M nan = is_nan(f);
    istore(keys + i, select(nan, nan_key, b ^ shr<1>(sar<31>(b))));
    nans += popcount32(movemask(nan));
  }
  if (i < n) {
    const std::size_t rest = n - i;
    const F f = fload_n(s + i, rest) + zero;
    const I b = bits(f);
    const M nan = is_nan(f);
    istore_n(keys + i, select(nan, nan_key, b ^ shr<1>(sar<31>(b))), rest);
    nans += popcount32(movemask(nan) & ((1u << rest) - 1u));
  }
  return nans;
}

inline std::uint32_t ukey(std::int32_t key) { return static_cast<std::uint32_t>(key) ^ 0x80000000u; }

struct Entry {
  std::uint32_t key;  // unsigned order key
  std::int32_t idx;
};

// Stable sort by key, descending (equal keys keep their order, which is index order).
void sort_desc(Entry* e, Entry* tmp, std::size_t m) {
  if (m < 48) {
    for (std::size_t i = 1; i < m; ++i) {
      const Entry x = e[i];
      std::size_t j = i;
      for (; j > 0 && e[j - 1].key < x.key; --j) e[j] = e[j - 1];
      e[j] = x;
    }
    return;
  }
  static constexpr unsigned kShift[3] = {0, 11, 22};
  static constexpr std::uint32_t kMask[3] = {0x7FF, 0x7FF, 0x3FF};
  std::uint32_t count[2048];
  Entry* src = e;
  Entry* dst = tmp;
  for (int pass = 0; pass < 3; ++pass) {
    const unsigned sh = kShift[pass];
    const std::uint32_t mask = kMask[pass];
    std::memset(count, 0, (mask + 1) * sizeof(std::uint32_t));
    for (std::size_t i = 0; i < m; ++i) ++count[(~src[i].key >> sh) & mask];
    bool single = false;
    for (std::uint32_t d = 0; d <= mask; ++d)
      if (count[d] == m) single = true;
    if (single) continue;  // every element has the same digit: the pass would not move anything
    std::uint32_t sum = 0;
    for (std::uint32_t d = 0; d <= mask; ++d) {
      const std::uint32_t c = count[d];
      count[d] = sum;
      sum += c;
    }
    for (std::size_t i = 0; i < m; ++i) dst[count[(~src[i].key >> sh) & mask]++] = src[i];
    Entry* t = src;
    src = dst;
    dst = t;
  }
  if (src != e) std::memcpy(e, src, m * sizeof(Entry));
}

// Walks a histogram from the top bucket down: the bucket holding the `need`-th largest element.
// On return *need is the rank inside that bucket (1-based).
inline std::uint32_t find_bucket(const std::uint32_t* hist, std::uint32_t buckets, std::size_t* need) {
  std::uint32_t b = buckets;
  while (b > 0) {
    --b;
    if (hist[b] >= *need) return b;
    *need -= hist[b];
  }
  return 0;  // unreachable when need <= total
}

std::size_t topk_select(const float* scores, std::size_t n, std::size_t k, TopkNan nan_policy, std::int32_t* out,
                        void* scratch) {
  if (n == 0 || k == 0) return 0;
  auto* base = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(scratch) + 63) & ~std::uintptr_t(63));
  std::int32_t* keys = reinterpret_cast<std::int32_t*>(base);
  std::uint32_t* list = reinterpret_cast<std::uint32_t*>(keys + n);
  const std::size_t kcap = k < n ? k : n;
  Entry* sel = reinterpret_cast<Entry*>(list + n);
  Entry* tmp = sel + kcap;

  const std::size_t nans = make_keys(scores, n, keys);
  const std::size_t eligible = nan_policy == TopkNan::exclude ? n - nans : n;
  const std::size_t m = k < eligible ? k : eligible;
  if (m == 0) return 0;

  std::size_t count = 0;
  if (m == eligible) {
    if (nan_policy == TopkNan::exclude) {
      for (std::size_t i = 0; i < n; ++i)
        if (keys[i] != kNanKey) sel[count++] = {ukey(keys[i]), static_cast<std::int32_t>(i)};
    } else {
      for (std::size_t i = 0; i < n; ++i) sel[count++] = {ukey(keys[i]), static_cast<std::int32_t>(i)};
    }
  } else {
    // Exact key of the m-th best, three radix digits: bits 31..21, 20..10, 9..0.
    std::uint32_t hist[2048];
    std::memset(hist, 0, sizeof hist);
    for (std::size_t i = 0; i < n; ++i) ++hist[ukey(keys[i]) >> 21];
    std::size_t need = m;
    const std::uint32_t b1 = find_bucket(hist, 2048, &need);
    std::size_t len = 0;
    for (std::size_t i = 0; i < n; ++i)
      if ((ukey(keys[i]) >> 21) == b1) list[len++] = static_cast<std::uint32_t>(i);
    std::memset(hist, 0, sizeof hist);
    for (std::size_t t = 0; t < len; ++t) ++hist[(ukey(keys[list[t]]) >> 10) & 0x7FF];
    const std::uint32_t b2 = find_bucket(hist, 2048, &need);
    std::size_t len2 = 0;
    for (std::size_t t = 0; t < len; ++t)
      if (((ukey(keys[list[t]]) >> 10) & 0x7FF) == b2) list[len2++] = list[t];
    std::memset(hist, 0, 1024 * sizeof(std::uint32_t));
    for (std::size_t t = 0; t < len2; ++t) ++hist[ukey(keys[list[t]]) & 0x3FF];
    const std::uint32_t b3 = find_bucket(hist, 1024, &need);
    const std::uint32_t threshold = (b1 << 21) | (b2 << 10) | b3;
    // Collect in index order: every key above the threshold, and the first `need` equal to it.
    const std::int32_t ts = static_cast<std::int32_t>(threshold ^ 0x80000000u);
    std::size_t eq_left = need;
    const I below = isplat(ts == kNanKey ? kNanKey : ts - 1);
    const bool all_lanes = ts == kNanKey;
    std::size_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      std::uint32_t mask = all_lanes ? (kLanes == 32 ? ~0u : (1u << kLanes) - 1u) : movemask(cmpgt(iload(keys + i), below));
      while (mask) {
        const unsigned l = static_cast<unsigned>(__builtin_ctz(mask));
        mask &= mask - 1;
        const std::int32_t key = keys[i + l];
        if (key > ts) {
          sel[count++] = {ukey(key), static_cast<std::int32_t>(i + l)};
        } else if (eq_left) {
          --eq_left;
          sel[count++] = {ukey(key), static_cast<std::int32_t>(i + l)};
        }
      }
    }
    for (; i < n; ++i) {
      const std::int32_t key = keys[i];
      if (key > ts) {
        sel[count++] = {ukey(key), static_cast<std::int32_t>(i)};
      } else if (key == ts && eq_left) {
        --eq_left;
        sel[count++] = {ukey(key), static_cast<std::int32_t>(i)};
      }
    }
  }
  sort_desc(sel, tmp, count);
  for (std::size_t t = 0; t < count; ++t) out[t] = sel[t].idx;
  return count;
}

}  // namespace
}  // namespace mlakit::simd::MLAKIT_SIMD_NS
