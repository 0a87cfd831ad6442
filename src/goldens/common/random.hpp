// Deterministic random data, identical on every platform and compiler (no std:: distributions),
// so that golden files regenerate to the same bytes everywhere.
#pragma once

#include <cstdint>
#include <vector>

#include "goldens/common/tensor.hpp"

namespace mlakit::goldens {

class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  std::uint64_t next();                               // xoshiro256**
  double uniform();                                   // [0, 1)
  double uniform(double lo, double hi);
  std::int64_t integer(std::int64_t lo, std::int64_t hi);  // inclusive
  double normal();                                    // Box–Muller of two draws: u1 = 1 - uniform(), u2
  static double box_muller(double u1, double u2);     // the transform normal() applies
  template <class T> void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<std::size_t>(integer(0, std::int64_t(i) - 1))]);
  }

 private:
  std::uint64_t s_[4];
};

// Float tensors (f32, f64, bf16, f16): normal(0, sigma), rounded to the dtype.
void fill_normal(Tensor& t, Rng& rng, double sigma);
// Float tensors: uniform in [lo, hi), rounded to the dtype.
void fill_uniform(Tensor& t, Rng& rng, double lo, double hi);
// Integer tensors (i32, u32, u8): uniform in [lo, hi].
void fill_integers(Tensor& t, Rng& rng, std::int64_t lo, std::int64_t hi);
// f8e4m3: codes of normal(0, sigma) values; with `all_codes`, 256 distinct random positions
// then receive every code 0x00..0xFF (NaN 0x7F/0xFF and subnormals included). Needs numel >= 256.
void fill_fp8(Tensor& t, Rng& rng, double sigma, bool all_codes);

// Paged cache builder (docs/README.md §4): pages of every sequence drawn from a shuffled pool with
// spare blocks; unused lookup-table columns hold the sentinel num_blocks.
struct CacheLayout {
  std::int64_t page_size = 64;
  std::int64_t kv_dim = 1;
  std::int64_t num_layers = 1;
  std::int64_t num_kv_heads = 1;
  std::int64_t head_size = 128;
  DType dtype = DType::bf16;
  std::int64_t quant_granularity = 0;  // > 0: f32 scales are created (filled with 1.0)
  std::int64_t spare_blocks = 2;       // blocks no sequence owns
  std::int64_t extra_columns = 1;      // sentinel columns past the longest sequence
};

// Creates <prefix>.blocks (zero), .scales (if quantized), .lookup_table, .cache_lengths.
// positions_needed[b] = how many positions sequence b must have pages for.
void make_paged_cache(Bundle& b, const std::string& prefix, const CacheLayout& layout,
                      const std::vector<std::int64_t>& cache_lengths,
                      const std::vector<std::int64_t>& positions_needed, Rng& rng);

// u32 [B+1] offsets from per-sequence lengths.
void make_row_offsets(Bundle& b, const std::string& name, const std::vector<std::int64_t>& lengths);

}  // namespace mlakit::goldens
