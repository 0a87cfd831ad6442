#include "goldens/common/random.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace mlakit::goldens {
namespace {

std::uint64_t splitmix(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void store_float(Tensor& t, std::int64_t i, double v) {
  switch (t.dtype()) {
    case DType::f32: t.data<float>()[i] = static_cast<float>(v); break;
    case DType::f64: t.data<double>()[i] = v; break;
    case DType::bf16: t.data<std::uint16_t>()[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::f16: t.data<std::uint16_t>()[i] = f32_to_f16(static_cast<float>(v)); break;
    case DType::f8e4m3: t.data<std::uint8_t>()[i] = f32_to_f8e4m3(static_cast<float>(v)); break;
    default: throw std::invalid_argument("store_float: not a float tensor");
  }
}

}  // namespace

Rng::Rng(std::uint64_t seed) {
  for (auto& s : s_) s = splitmix(seed);
}

std::uint64_t Rng::next() {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

std::int64_t Rng::integer(std::int64_t lo, std::int64_t hi) {
  const std::uint64_t span = static_cast<std::uint64_t>(hi - lo) + 1;
  return lo + static_cast<std::int64_t>(span == 0 ? next() : next() % span);
}

double Rng::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]
  const double u2 = uniform();
  return box_muller(u1, u2);
}

double Rng::box_muller(double u1, double u2) { return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2); }

void fill_normal(Tensor& t, Rng& rng, double sigma) {
  // Benchmark-sized tensors (a 512 MiB cache took 25 s one element at a time, most of it in log and
  // cos): the draws are taken in order, a chunk at a time, and the transform to the dtype runs on
  // every core. An element's value depends on its two draws alone, so the bytes are those of the
  // serial loop.
  constexpr std::int64_t kChunk = std::int64_t{1} << 20;
  const std::int64_t n = t.numel();
  if (n < 2 * kChunk) {
    for (std::int64_t i = 0; i < n; ++i) store_float(t, i, sigma * rng.normal());
    return;
  }
  std::vector<double> draws(2 * static_cast<std::size_t>(kChunk));
  for (std::int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const std::int64_t m = std::min(kChunk, n - c0);
    for (std::int64_t i = 0; i < m; ++i) {
      draws[2 * i] = 1.0 - rng.uniform();  // as Rng::normal draws them
      draws[2 * i + 1] = rng.uniform();
    }
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, m, 16384), [&](const tbb::blocked_range<std::int64_t>& r) {
      for (std::int64_t i = r.begin(); i < r.end(); ++i)
        store_float(t, c0 + i, sigma * Rng::box_muller(draws[2 * i], draws[2 * i + 1]));
    });
  }
}

void fill_uniform(Tensor& t, Rng& rng, double lo, double hi) {
  for (std::int64_t i = 0; i < t.numel(); ++i) store_float(t, i, rng.uniform(lo, hi));
}

void fill_integers(Tensor& t, Rng& rng, std::int64_t lo, std::int64_t hi) {
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const std::int64_t v = rng.integer(lo, hi);
    switch (t.dtype()) {
      case DType::i32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v); break;
      case DType::u32: t.data<std::uint32_t>()[i] = static_cast<std::uint32_t>(v); break;
      case DType::u8: case DType::f8e4m3: case DType::e8m0: t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v); break;
      default: throw std::invalid_argument("fill_integers: not an integer tensor");
    }
  }
}

void fill_fp8(Tensor& t, Rng& rng, double sigma, bool all_codes) {
  if (t.dtype() != DType::f8e4m3) throw std::invalid_argument("fill_fp8: not an f8e4m3 tensor");
  fill_normal(t, rng, sigma);
  if (!all_codes) return;
  const std::int64_t n = t.numel();
  if (n < 256) throw std::invalid_argument("fill_fp8: all 256 codes need at least 256 elements");
  // 256 distinct positions: a partial Fisher–Yates over the index space, kept sparse.
  std::vector<std::int64_t> picked;
  picked.reserve(256);
  while (picked.size() < 256) {
    const std::int64_t p = rng.integer(0, n - 1);
    bool dup = false;
    for (std::int64_t q : picked) dup |= (q == p);
    if (!dup) picked.push_back(p);
  }
  for (int c = 0; c < 256; ++c) t.data<std::uint8_t>()[picked[c]] = static_cast<std::uint8_t>(c);
}

void make_row_offsets(Bundle& b, const std::string& name, const std::vector<std::int64_t>& lengths) {
  Tensor& t = b.add(name, DType::u32, {static_cast<std::int64_t>(lengths.size()) + 1});
  std::uint32_t acc = 0;
  t.data<std::uint32_t>()[0] = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    acc += static_cast<std::uint32_t>(lengths[i]);
    t.data<std::uint32_t>()[i + 1] = acc;
  }
}

void make_paged_cache(Bundle& b, const std::string& prefix, const CacheLayout& L,
                      const std::vector<std::int64_t>& cache_lengths,
                      const std::vector<std::int64_t>& positions_needed, Rng& rng) {
  const std::int64_t B = static_cast<std::int64_t>(positions_needed.size());
  std::int64_t pages_total = 0, max_pages = 0;
  std::vector<std::int64_t> pages(B);
  for (std::int64_t s = 0; s < B; ++s) {
    pages[s] = (positions_needed[s] + L.page_size - 1) / L.page_size;
    pages_total += pages[s];
    if (pages[s] > max_pages) max_pages = pages[s];
  }
  const std::int64_t num_blocks = pages_total + L.spare_blocks > 0 ? pages_total + L.spare_blocks : 1;
  std::vector<std::uint32_t> pool(num_blocks);
  for (std::int64_t i = 0; i < num_blocks; ++i) pool[i] = static_cast<std::uint32_t>(i);
  rng.shuffle(pool);

  b.add(prefix + ".blocks", L.dtype, {num_blocks, L.kv_dim, L.num_layers, L.page_size, L.num_kv_heads, L.head_size});
  if (L.quant_granularity > 0) {
    const std::int64_t per_row = (L.head_size + L.quant_granularity - 1) / L.quant_granularity;
    Tensor& sc = b.add(prefix + ".scales", DType::f32, {num_blocks, L.kv_dim, L.num_layers, L.page_size, L.num_kv_heads, per_row});
    for (std::int64_t i = 0; i < sc.numel(); ++i) sc.data<float>()[i] = 1.0f;
  }
  const std::int64_t cols = max_pages + L.extra_columns;
  Tensor& lut = b.add(prefix + ".lookup_table", DType::u32, {B, cols});
  std::size_t next = 0;
  for (std::int64_t s = 0; s < B; ++s)
    for (std::int64_t c = 0; c < cols; ++c)
      lut.data<std::uint32_t>()[s * cols + c] = c < pages[s] ? pool[next++] : static_cast<std::uint32_t>(num_blocks);
  Tensor& lens = b.add(prefix + ".cache_lengths", DType::u32, {B});
  for (std::int64_t s = 0; s < B; ++s) lens.data<std::uint32_t>()[s] = static_cast<std::uint32_t>(cache_lengths[s]);
}

}  // namespace mlakit::goldens
