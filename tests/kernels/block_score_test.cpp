// Block-max score kernels at every level: bitwise against a scalar model of the contract
// (sequential f32 multiply-adds over d, fused on levels with FMA; on the bf16 pair-dot levels one
// vdpbf16ps per pair as the instruction is specified: second product then first, each addition
// rounded, subnormal inputs and results flushed; then the scale, then a max with sticky NaN over
// the keys each row sees), within the derived bound of exact f64 sums, against simd/generic within
// that bound, for every group / key / dim edge of the register tile and the key chunk, unaligned
// operands, padded key strides, per-row limits (the causal cut), NaN keys and every fp8 code; and
// the tiling invariance the operator relies on: a row's maximum does not depend on the other
// groups of the call, nor on splitting the keys between calls, nor (pair-dot levels) on whether
// the call took the two-keys-per-vector path of a decode token or the full-lane path.
// The amx level's kernel also runs every check over emulated tiles (amx_emulated), wherever the
// avx512bf16 level runs. Its calls, of any number of rows, are held to a scalar model of a chain of
// TDPBF16PS instructions in the order the hardware adds (tile_dot_model.hpp: per 32 dims the even
// and the odd products summed apart, then added to the accumulator; DAZ/FTZ).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/amx_emulation/emulated_tables.hpp"
#include "kernels/amx_emulation/tile_dot_model.hpp"
#include "kernels/kernel_list.hpp"
#include "mlakit/dtype.hpp"

namespace mlakit::kernel_tests {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

template <class TK>
float key_value(TK x) {
  if constexpr (std::is_same_v<TK, std::uint16_t>) return bf16_to_f32(x);
  else return f8e4m3_to_f32(x);
}

template <class TK>
TK random_key(Rng& rng) {
  if constexpr (std::is_same_v<TK, std::uint16_t>) {
    return f32_to_bf16(rng.uniform(-2.0f, 2.0f));
  } else {
    std::uint8_t c;
    do c = static_cast<std::uint8_t>(rng.below(256));
    while ((c & 0x7F) == 0x7F);  // NaN codes are placed on purpose
    return c;
  }
}

struct Problem {
  std::size_t rows, dim, n, ldk;
  std::vector<std::uint16_t> q;  // rows x dim
  std::vector<std::int32_t> limit;  // groups * lanes (empty: nullptr)
  float scale;
};

// bf16_pair_dot: vdpbf16ps (second product of a pair, then the first); amx_tiles: a TDPBF16PS
// chain (tile_dot_model.hpp), with the same flushes.
enum class Arith { f32_separate, f32_fused, bf16_pair_dot, amx_tiles };

// vdpbf16ps reads bf16 subnormals as zero and flushes subnormal results (DAZ/FTZ, RNE), as the
// tiles do.
constexpr auto flush = tile_flush;

// The contract's arithmetic, scalar.
template <class TK>
std::vector<float> model(const Problem& p, const TK* k, Arith arith) {
  std::vector<float> out(p.rows);
  for (std::size_t r = 0; r < p.rows; ++r) {
    std::int64_t lim = p.limit.empty() ? static_cast<std::int64_t>(p.n) : p.limit[r];
    lim = std::clamp<std::int64_t>(lim, 0, static_cast<std::int64_t>(p.n));
    float best = -kInf;
    bool nan = false;
    for (std::int64_t j = 0; j < lim; ++j) {
      float acc = 0.0f;
      const auto qv = [&](std::size_t d) { return d < p.dim ? bf16_to_f32(p.q[r * p.dim + d]) : 0.0f; };
      const auto kv = [&](std::size_t d) { return d < p.dim ? key_value(k[j * p.ldk + d]) : 0.0f; };
      if (arith == Arith::bf16_pair_dot) {
        for (std::size_t d = 0; d < p.dim; d += 2) {  // exact product, one rounding of the sum
          acc = flush(std::fma(flush(qv(d + 1)), flush(kv(d + 1)), acc));
          acc = flush(std::fma(flush(qv(d)), flush(kv(d)), acc));
        }
      } else if (arith == Arith::amx_tiles) {
        acc = tile_dot(p.dim, qv, kv);
      } else {
        for (std::size_t d = 0; d < p.dim; ++d) {
          if (arith == Arith::f32_fused) {
            acc = std::fma(qv(d), kv(d), acc);
          } else {
            const volatile float prod = qv(d) * kv(d);  // rounded on its own
            acc = prod + acc;
          }
        }
      }
      const float s = acc * p.scale;
      if (std::isnan(s)) nan = true;
      else best = std::max(best, s);
    }
    out[r] = nan ? std::numeric_limits<float>::quiet_NaN() : best;
  }
  return out;
}

// Runs the level's kernel with unaligned packed queries / keys / scratch and guards around the
// packed queries, out and scratch; returns the values of the call's rows.
template <class TK>
std::vector<float> run(const simd::BlockScoreKernels& t, const Problem& p, const std::vector<TK>& keys,
                       std::size_t key_off) {
  const std::size_t lanes = t.lanes, groups = (p.rows + lanes - 1) / lanes;
  const std::size_t qbytes = t.packed_q_bytes(p.rows, p.dim);
  std::vector<unsigned char> qt(qbytes + 8, 0x5A);
  t.pack_q(p.q.data(), p.rows, p.dim, p.dim, qt.data() + 4);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(qt[i], 0x5A) << "pack_q wrote before the packed queries";
  for (std::size_t i = qbytes + 4; i < qt.size(); ++i) EXPECT_EQ(qt[i], 0x5A) << "pack_q wrote past packed_q_bytes";
  const float guard = 12345.0f;
  std::vector<float> out(groups * lanes + 2, guard);
  const std::size_t sbytes = t.scratch_bytes(p.rows, p.dim);
  // 0xFF bytes read as NaN in bf16 and f32: a kernel that reads scratch it has not written (the
  // zero padding of a key row past dim, say) turns scores into NaN.
  constexpr unsigned char kPoison = 0xFF;
  std::vector<unsigned char> scratch(sbytes + 8, kPoison);
  const TK* k = keys.data() + key_off;
  if constexpr (std::is_same_v<TK, std::uint16_t>)
    t.block_max_bf16(p.rows, p.dim, qt.data() + 4, k, p.ldk, p.n, p.limit.empty() ? nullptr : p.limit.data(), p.scale,
                     out.data() + 1, scratch.data() + 3, nullptr, 0);
  else
    t.block_max_f8(p.rows, p.dim, qt.data() + 4, k, p.ldk, p.n, p.limit.empty() ? nullptr : p.limit.data(), p.scale,
                   out.data() + 1, scratch.data() + 3, k, p.n);
  EXPECT_EQ(out.front(), guard) << "wrote before out";
  EXPECT_EQ(out.back(), guard) << "wrote past out";
  for (std::size_t i = sbytes + 3; i < scratch.size(); ++i) EXPECT_EQ(scratch[i], kPoison) << "wrote past the scratch";
  return std::vector<float>(out.begin() + 1, out.begin() + 1 + static_cast<std::ptrdiff_t>(p.rows));
}

bool pair_dot_level(Isa level) { return level == Isa::avx512bf16 || level == Isa::amx; }

bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

using BlockScoreSubject = Subject<simd::BlockScoreKernels>;

class BlockScore : public ::testing::TestWithParam<BlockScoreSubject> {
 public:
  const simd::BlockScoreKernels& table() { return *GetParam().table; }
  Isa level() const { return GetParam().level; }
  Isa runs_on() const { return GetParam().runs_on; }
  // The amx level's tiles take every call.
  bool tiles_for(std::size_t) { return level() == Isa::amx; }
  Arith arith(std::size_t rows) {
    if (tiles_for(rows)) return Arith::amx_tiles;
    if (pair_dot_level(level())) return Arith::bf16_pair_dot;
    return level() == Isa::generic ? Arith::f32_separate : Arith::f32_fused;
  }

  template <class TK>
  void check(const Problem& p, const std::vector<TK>& keys, std::size_t key_off, const std::string& what) {
    const auto got = run<TK>(table(), p, keys, key_off);
    const auto want = model<TK>(p, keys.data() + key_off, arith(p.rows));
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t r = 0; r < got.size(); ++r) {
      ASSERT_TRUE(same(got[r], want[r])) << what << " rows=" << p.rows << " dim=" << p.dim << " n=" << p.n
                                         << " row " << r << ": got " << got[r] << " model " << want[r];
    }
    // The exact value, within the derived bound, and simd/generic within twice it.
    const auto gen = run<TK>(simd::block_score_generic, p, keys, key_off);
    for (std::size_t r = 0; r < p.rows; ++r) {
      std::int64_t lim = p.limit.empty() ? static_cast<std::int64_t>(p.n) : p.limit[r];
      lim = std::clamp<std::int64_t>(lim, 0, static_cast<std::int64_t>(p.n));
      double best = -std::numeric_limits<double>::infinity(), bound = 0;
      bool nan = false;
      for (std::int64_t j = 0; j < lim; ++j) {
        double dot = 0, mag = 0;
        for (std::size_t d = 0; d < p.dim; ++d) {
          const double prod = static_cast<double>(bf16_to_f32(p.q[r * p.dim + d])) *
                              key_value(keys[key_off + j * p.ldk + d]);
          dot += prod;
          mag += std::fabs(prod);
        }
        const double s = static_cast<double>(p.scale) * dot;
        if (std::isnan(s)) nan = true;
        else best = std::max(best, s);
        bound = std::max(bound, (static_cast<double>(p.dim) + 1) * 0x1p-24 * std::fabs(p.scale) * mag);
      }
      if (nan) {
        EXPECT_TRUE(std::isnan(got[r])) << what << " row " << r;
        continue;
      }
      if (lim == 0) {
        EXPECT_EQ(got[r], -kInf) << what << " row " << r << " sees no key";
        EXPECT_EQ(gen[r], -kInf) << what << " row " << r << " sees no key (generic)";
        continue;
      }
      EXPECT_LE(std::fabs(got[r] - best), bound) << what << " row " << r << " vs exact";
      EXPECT_LE(std::fabs(got[r] - gen[r]), 2 * bound) << what << " row " << r << " vs generic";
    }
  }
};

template <class TK>
std::vector<TK> make_keys(std::size_t count, Rng& rng) {
  std::vector<TK> k(count);
  for (auto& x : k) x = random_key<TK>(rng);
  return k;
}

Problem make_problem(std::size_t rows, std::size_t dim, std::size_t n, std::size_t ldk, Rng& rng) {
  Problem p;
  p.rows = rows;
  p.dim = dim;
  p.n = n;
  p.ldk = ldk;
  p.scale = 0.125f;
  p.q.resize(rows * dim);
  for (auto& x : p.q) x = f32_to_bf16(rng.uniform(-2.0f, 2.0f));
  return p;
}

template <class TK>
void sweep_shapes(BlockScore& t, const char* name) {
  Rng rng(11);
  const std::size_t lanes = t.table().lanes;
  // Group counts around the tile (1 .. 2 tiles + rest), keys around the tile widths and the chunk.
  // Half the lanes and one more: the last call of the two-keys-per-vector path and the first of
  // the full-lane one on the pair-dot levels.
  const std::size_t rows_list[] = {1,         lanes / 2,     lanes / 2 + 1, lanes - 1, lanes,
                                   lanes + 1, 2 * lanes,     3 * lanes - 1, 5 * lanes, 7 * lanes + 3};
  const std::size_t n_list[] = {0, 1, 2, 5, 6, 7, 8, 11, 12, 13, 23, 24, 25, 48, 97, 128, 130};
  const std::size_t dim_list[] = {1, 3, 8, 17, 64, 128, 130};
  for (std::size_t dim : dim_list)
    for (std::size_t rows : rows_list)
      for (std::size_t n : n_list) {
        if (rows == 0) continue;
        if (dim >= 64 && n % 3 != 0 && n != 128 && n != 97) continue;  // keep the sweep short at large dims
        const std::size_t ldk = dim + (n % 4);
        Problem p = make_problem(rows, dim, n, ldk, rng);
        p.scale = (n % 2) ? 0.125f : -0.75f;
        const auto keys = make_keys<TK>(n * ldk + 5, rng);
        t.check<TK>(p, keys, 1 + n % 3, name);
        if (::testing::Test::HasFatalFailure()) return;
      }
}

TEST_P(BlockScore, Bf16MatchesModelAcrossShapes) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(runs_on());
  sweep_shapes<std::uint16_t>(*this, "bf16");
}

TEST_P(BlockScore, F8MatchesModelAcrossShapes) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(runs_on());
  sweep_shapes<std::uint8_t>(*this, "f8");
}

// Per-row limits: the causal staircase of a prefill tile (row r sees r/heads + offset keys),
// negative and oversized limits, and rows that see nothing (-inf).
TEST_P(BlockScore, LimitsCutPerRow) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(runs_on());
  Rng rng(5);
  const std::size_t lanes = table().lanes;
  for (std::size_t n : {1u, 7u, 40u, 128u}) {
    for (std::size_t rows : {lanes, 3 * lanes + 2, 9 * lanes}) {
      Problem p = make_problem(rows, 32, n, 32, rng);
      const std::size_t groups = (rows + lanes - 1) / lanes;
      p.limit.resize(groups * lanes);
      for (std::size_t r = 0; r < p.limit.size(); ++r) {
        const std::int64_t stair = static_cast<std::int64_t>(r / 4) - 3;  // 4 heads per token
        p.limit[r] = static_cast<std::int32_t>(r % 11 == 5 ? -1 : (r % 13 == 7 ? 100000 : stair));
      }
      const auto keys = make_keys<std::uint16_t>(n * 32 + 1, rng);
      check<std::uint16_t>(p, keys, 1, "limits");
      const auto got = run<std::uint16_t>(table(), p, keys, 1);
      for (std::size_t r = 0; r < rows; ++r)
        if (p.limit[r] <= 0) {
          EXPECT_EQ(got[r], -kInf) << "row " << r << " sees no key";
        }
    }
  }
}

// A NaN key element makes the maximum of exactly the rows that see that key NaN, whatever the
// other keys; a key past a row's limit does not. Few rows (a decode token: the two-keys-per-vector
// path on the vector levels), one full group and many, either sign of the scale.
TEST_P(BlockScore, NanKeysAreStickyOnlyWhereSeen) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(runs_on());
  Rng rng(8);
  const std::size_t lanes = table().lanes, n = 50, dim = 24;
  for (std::size_t rows : {lanes / 2, lanes, 4 * lanes})
  for (float scale : {0.125f, -0.5f})
  for (std::size_t nan_at : {0u, 13u, 29u, 49u}) {
    Problem p = make_problem(rows, dim, n, dim, rng);
    p.scale = scale;
    p.limit.resize((rows + lanes - 1) / lanes * lanes);
    for (std::size_t r = 0; r < p.limit.size(); ++r) p.limit[r] = static_cast<std::int32_t>(rows <= lanes ? r * 7 : r * 2);
    auto kb = make_keys<std::uint16_t>(n * dim, rng);
    kb[nan_at * dim + 5] = 0xFFC0;  // a negative quiet NaN
    auto k8 = make_keys<std::uint8_t>(n * dim, rng);
    k8[nan_at * dim + 5] = nan_at % 2 ? 0xFF : 0x7F;  // both NaN codes
    const auto gb = run<std::uint16_t>(table(), p, kb, 0);
    const auto g8 = run<std::uint8_t>(table(), p, k8, 0);
    for (std::size_t r = 0; r < rows; ++r) {
      const bool sees = static_cast<std::size_t>(p.limit[r]) > nan_at;
      EXPECT_EQ(std::isnan(gb[r]), sees) << "bf16 row " << r << " NaN key " << nan_at;
      EXPECT_EQ(std::isnan(g8[r]), sees) << "f8 row " << r << " NaN key " << nan_at;
    }
    check<std::uint16_t>(p, kb, 0, "nan bf16");
    check<std::uint8_t>(p, k8, 0, "nan f8");
  }
}

// inf * 0 is NaN; +inf keys win; -inf everywhere stays -inf (not "no key").
TEST_P(BlockScore, Infinities) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(runs_on());
  const std::size_t lanes = table().lanes, dim = 4, n = 3;
  Problem p;
  p.rows = lanes;
  p.dim = dim;
  p.n = n;
  p.ldk = dim;
  p.scale = 1.0f;
  p.q.assign(lanes * dim, 0);
  for (std::size_t r = 0; r < lanes; ++r) p.q[r * dim] = f32_to_bf16(r % 2 ? 1.0f : 0.0f);
  std::vector<std::uint16_t> k(n * dim, 0);
  k[0] = f32_to_bf16(-kInf);  // key 0: -inf * 1 = -inf, -inf * 0 = NaN
  k[dim] = f32_to_bf16(-kInf);
  k[2 * dim] = f32_to_bf16(-kInf);
  const auto got = run<std::uint16_t>(table(), p, k, 0);
  for (std::size_t r = 0; r < lanes; ++r) {
    if (r % 2) EXPECT_EQ(got[r], -kInf) << r;
    else EXPECT_TRUE(std::isnan(got[r])) << r;
  }
}

// Every kind of scale (either sign, zero, infinite, NaN, one that overflows the scores) and keys
// whose scores are infinite of both signs or NaN (an exact zero dot under an infinite scale),
// bitwise against the model. A decode token's rows on the vector levels fold unscaled maxima
// (minima for a negative scale) and watch a running sum for NaN, and the amx level folds unscaled
// maxima under a positive finite scale: these are the cases that send such a call back to the
// order-key fold, and those whose results the shortcuts must not change.
TEST_P(BlockScore, ScalesAndInfiniteScores) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(runs_on());
  Rng rng(41);
  const std::size_t lanes = table().lanes, dim = 40, n = 70;
  const float scales[] = {0.125f, -0.75f, 0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), 1e38f};
  for (std::size_t rows : {std::size_t{1}, lanes / 2, lanes, lanes + 1}) {
    for (int keyset = 0; keyset < 4; ++keyset) {
      Problem p = make_problem(rows, dim, n, dim, rng);
      auto k = make_keys<std::uint16_t>(n * dim, rng);
      auto k8 = make_keys<std::uint8_t>(n * dim, rng);
      if (keyset == 3) {  // key 7 all zeros: its dots are exactly 0, so an infinite scale makes them NaN
        std::fill(k.begin() + 7 * dim, k.begin() + 8 * dim, std::uint16_t{0});
        std::fill(k8.begin() + 7 * dim, k8.begin() + 8 * dim, std::uint8_t{0});
      }
      if (keyset >= 1) {  // key 5 scores +-inf, key 40 the other sign (where the query element is not 0)
        k[5 * dim + 3] = f32_to_bf16(kInf);
        k[40 * dim + 3] = f32_to_bf16(-kInf);
      }
      if (keyset == 2) {  // odd rows see keys 0..19 only: one infinity, no NaN in their watch
        p.limit.resize((rows + lanes - 1) / lanes * lanes);
        for (std::size_t r = 0; r < p.limit.size(); ++r) p.limit[r] = r % 2 ? 20 : static_cast<std::int32_t>(n);
      }
      for (float scale : scales) {
        p.scale = scale;
        const auto got = run<std::uint16_t>(table(), p, k, 0);
        const auto want = model<std::uint16_t>(p, k.data(), arith(rows));
        const auto got8 = run<std::uint8_t>(table(), p, k8, 0);
        const auto want8 = model<std::uint8_t>(p, k8.data(), arith(rows));
        for (std::size_t r = 0; r < rows; ++r) {
          ASSERT_TRUE(same(got[r], want[r])) << rows << " rows, keys " << keyset << ", scale " << scale << ", row "
                                             << r << ": got " << got[r] << " model " << want[r];
          ASSERT_TRUE(same(got8[r], want8[r])) << rows << " rows, f8, scale " << scale << ", row " << r << ": got "
                                               << got8[r] << " model " << want8[r];
        }
      }
    }
  }
}

// Every fp8 code, at a position that moves with the code, read through a one-hot query row: the
// maximum of the single key reproduces each finite code exactly (subnormals included; -0 as a
// zero), the NaN codes give NaN.
TEST_P(BlockScore, F8EveryCodeExact) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(runs_on());
  const std::size_t lanes = table().lanes, dim = 19;
  for (unsigned code = 0; code < 256; ++code) {
    const std::size_t at = code % dim;
    Problem p;
    p.rows = lanes;
    p.dim = dim;
    p.n = 1;
    p.ldk = dim;
    p.scale = 1.0f;
    p.q.assign(lanes * dim, 0);
    for (std::size_t r = 0; r < lanes; ++r) p.q[r * dim + at] = 0x3F80;  // 1.0
    std::vector<std::uint8_t> k(dim, 0x00);
    k[at] = static_cast<std::uint8_t>(code);
    const auto got = run<std::uint8_t>(table(), p, k, 0);
    const float want = f8e4m3_to_f32(static_cast<std::uint8_t>(code));
    for (std::size_t r = 0; r < lanes; ++r) {
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(got[r])) << "code " << code;
      else EXPECT_EQ(got[r], want) << "code " << code;
    }
  }
}

// The tiling the operator relies on: a row's maximum is the same whether its group is alone or
// among many, and a block split into two calls combines to the same maximum.
TEST_P(BlockScore, TilingInvariance) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(runs_on());
  Rng rng(21);
  const auto& t = table();
  const std::size_t lanes = t.lanes, dim = 128, n = 128, rows = 11 * lanes;
  Problem all = make_problem(rows, dim, n, dim, rng);
  all.scale = 0.088388f;
  const auto keys = make_keys<std::uint16_t>(n * dim, rng);
  const auto together = run<std::uint16_t>(t, all, keys, 0);
  for (std::size_t g = 0; g < rows / lanes; ++g) {
    Problem one = all;
    one.rows = lanes;
    one.q.assign(all.q.begin() + static_cast<std::ptrdiff_t>(g * lanes * dim),
                 all.q.begin() + static_cast<std::ptrdiff_t>((g + 1) * lanes * dim));
    const auto alone = run<std::uint16_t>(t, one, keys, 0);
    for (std::size_t l = 0; l < lanes; ++l)
      ASSERT_EQ(bits_of(alone[l]), bits_of(together[g * lanes + l])) << "group " << g << " lane " << l;
    // Keys [0, 37) and [37, 128) in two calls.
    Problem head = one, tail = one;
    head.n = 37;
    tail.n = n - 37;
    const auto a = run<std::uint16_t>(t, head, keys, 0);
    const auto b = run<std::uint16_t>(t, tail, keys, 37 * dim);
    for (std::size_t l = 0; l < lanes; ++l)
      ASSERT_EQ(std::max(a[l], b[l]), together[g * lanes + l]) << "split, group " << g << " lane " << l;
  }
}

// The packed layout the header documents: per group, steps of 4 bytes per lane (an f32 element,
// or a bf16 pair on the pair-dot levels, odd dim padded with 0); on the vector levels but amx a
// call of at most pair_rows rows holds row h in lanes 2h and 2h + 1.
TEST_P(BlockScore, PackLayout) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(runs_on());
  const auto& t = table();
  const bool pairs = pair_dot_level(level());
  EXPECT_EQ(t.bf16_dot, pairs);  // what `mlakit info` reports
  // generic: its 4 lanes hold a decode token whole; amx: tiles for every call.
  EXPECT_EQ(t.pair_rows, level() == Isa::generic || level() == Isa::amx ? 0u : t.lanes / 2);
  const std::size_t lanes = t.lanes, dim = 5, ldq = 7, steps = pairs ? 3 : 5;
  for (std::size_t rows : {2 * lanes + 1, lanes / 2, lanes / 2 - 1}) {
    std::vector<std::uint16_t> q(rows * ldq);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = f32_to_bf16(static_cast<float>(i) + 0.5f);
    const std::size_t groups = (rows + lanes - 1) / lanes;
    // The amx tiles read a group's steps 16 at a time: pack_q pads each group to whole tiles.
    const std::size_t gsteps = tiles_for(rows) ? (steps + 15) / 16 * 16 : steps;
    const std::size_t bytes = t.packed_q_bytes(rows, dim);
    ASSERT_EQ(bytes, groups * gsteps * lanes * 4) << rows << " rows";
    std::vector<unsigned char> qt(bytes + 1, 0xEE);
    t.pack_q(q.data(), rows, dim, ldq, qt.data());
    EXPECT_EQ(qt.back(), 0xEE) << "wrote past the packed groups";
    const bool twice = rows <= t.pair_rows;
    for (std::size_t g = 0; g < groups; ++g)
      for (std::size_t d = 0; d < steps * (pairs ? 2 : 1); ++d)
        for (std::size_t l = 0; l < lanes; ++l) {
          const std::size_t r = twice ? l / 2 : g * lanes + l;
          const std::uint16_t src = r < rows && d < dim ? q[r * ldq + d] : 0;
          if (pairs) {
            std::uint16_t got;
            std::memcpy(&got, qt.data() + (((g * gsteps + d / 2) * lanes + l) * 2 + d % 2) * 2, 2);
            EXPECT_EQ(got, src) << rows << " rows: " << g << "," << d << "," << l;
          } else {
            float got;
            std::memcpy(&got, qt.data() + ((g * dim + d) * lanes + l) * 4, 4);
            EXPECT_EQ(got, bf16_to_f32(src)) << rows << " rows: " << g << "," << d << "," << l;
          }
        }
  }
}

// A call of few rows (a decode token) must give its rows bitwise the maxima a many-row call (a
// prefill tile) gives them, for both key types, odd key counts, odd dims, per-row limits and
// several seeds: on the vector levels through the two-keys-per-vector path (calls of at most
// pair_rows rows), one full group and generic and amx through the same sweep or tiles as any
// call.
TEST_P(BlockScore, FewRowsMatchManyRows) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(runs_on());
  const auto& t = table();
  const std::size_t lanes = t.lanes, most = t.pair_rows ? t.pair_rows : lanes / 2;
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    Rng rng(seed);
    for (std::size_t dim : {128u, 130u, 127u, 9u}) {
      for (std::size_t n : {128u, 97u, 33u, 1u}) {
        for (std::size_t few : {lanes, most + 1, most, most / 2, std::size_t{1}}) {
          Problem full = make_problem(lanes + 3, dim, n, dim + (seed % 2), rng);  // full-lane path
          Problem part = full;
          part.rows = few;
          part.q.resize(few * dim);
          const bool cut = seed != 1;
          if (cut) {  // a causal staircase, one row seeing nothing
            full.limit.resize(2 * lanes);
            for (std::size_t r = 0; r < full.limit.size(); ++r)
              full.limit[r] = static_cast<std::int32_t>(r == 0 ? 0 : (n * (r + 2)) / (few + 2));
            part.limit.assign(full.limit.begin(), full.limit.begin() + static_cast<std::ptrdiff_t>(lanes));
          }
          const auto kb = make_keys<std::uint16_t>(n * full.ldk + 1, rng);
          const auto k8 = make_keys<std::uint8_t>(n * full.ldk + 1, rng);
          const auto fb = run<std::uint16_t>(t, full, kb, 1), pb = run<std::uint16_t>(t, part, kb, 1);
          const auto f8 = run<std::uint8_t>(t, full, k8, 1), p8 = run<std::uint8_t>(t, part, k8, 1);
          for (std::size_t r = 0; r < few; ++r) {
            ASSERT_EQ(bits_of(pb[r]), bits_of(fb[r])) << "bf16 seed " << seed << " dim " << dim << " n " << n
                                                      << " rows " << few << " row " << r;
            ASSERT_EQ(bits_of(p8[r]), bits_of(f8[r])) << "f8 seed " << seed << " dim " << dim << " n " << n
                                                      << " rows " << few << " row " << r;
          }
          check<std::uint16_t>(full, kb, 1, "many rows bf16");
          check<std::uint8_t>(full, k8, 1, "many rows f8");
          check<std::uint16_t>(part, kb, 1, "few rows bf16");
          check<std::uint8_t>(part, k8, 1, "few rows f8");
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// Subnormal query and key elements and tiny running sums, bitwise against the model: the f32
// levels count them, the pair-dot levels read subnormal inputs as zero and flush subnormal sums
// (the header's warning). Half the rows see only keys 0..3, whose products are all near 2^-126,
// so their maxima come from such sums; the other rows see every key.
TEST_P(BlockScore, SubnormalsAsSpecified) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(runs_on());
  Rng rng(31);
  const std::size_t lanes = table().lanes, dim = 16, n = 20;
  for (std::size_t rows : {lanes / 2, 2 * lanes}) {
    Problem p = make_problem(rows, dim, n, dim, rng);
    p.scale = 1.0f;
    for (std::size_t i = 0; i < p.q.size(); i += 3) p.q[i] = static_cast<std::uint16_t>(0x0001 + (i % 0x7F));
    for (std::size_t i = 1; i < p.q.size(); i += 5) p.q[i] = static_cast<std::uint16_t>(0x8070 - (i % 0x60));
    auto k = make_keys<std::uint16_t>(n * dim, rng);
    for (std::size_t i = 0; i < k.size(); i += 7) k[i] = static_cast<std::uint16_t>(0x0040 + (i % 0x3F));
    for (std::size_t i = 0; i < 4 * dim; ++i)  // +-(1 .. 2) * 2^-126
      k[i] = static_cast<std::uint16_t>((i % 3 ? 0x0080 : 0x8080) + (i * 37) % 0x80);
    p.limit.resize((rows + lanes - 1) / lanes * lanes);
    for (std::size_t r = 0; r < p.limit.size(); ++r) p.limit[r] = r % 2 ? 4 : static_cast<std::int32_t>(n);
    const auto got = run<std::uint16_t>(table(), p, k, 0);
    const auto want = model<std::uint16_t>(p, k.data(), arith(rows));
    for (std::size_t r = 0; r < rows; ++r)
      EXPECT_TRUE(same(got[r], want[r])) << rows << " rows, row " << r << ": got " << got[r] << " model " << want[r];
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, BlockScore,
                         ::testing::ValuesIn(subjects_with_emulated_amx("block_score", &cpu::block_score_kernels_at,
                                                                        simd::block_score_amx_emulated)),
                         subject_name<simd::BlockScoreKernels>);

}  // namespace
}  // namespace mlakit::kernel_tests
