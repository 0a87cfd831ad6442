// Dot-product tile kernels at every level, for every operand-type pair: against exact sums (f64
// over exactly decoded operands) within the derived bound, against simd/generic, at tile and
// vector edges, with unaligned operands and padded strides, writing nothing outside the m x n
// tile. fp8 operands are decoded exactly (one-hot products reproduce every code).
#include <gtest/gtest.h>

#include <random>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kernel_list.hpp"
#include "mlakit/dtype.hpp"

namespace mlakit::kernel_tests {
namespace {

template <class T>
double value(T x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return bf16_to_f32(x);
  else return f8e4m3_to_f32(x);
}

template <class T>
T random_element(Rng& rng) {
  if constexpr (std::is_same_v<T, float>) {
    return rng.uniform(-2.0f, 2.0f);
  } else if constexpr (std::is_same_v<T, std::uint16_t>) {
    return f32_to_bf16(rng.uniform(-2.0f, 2.0f));
  } else {
    std::uint8_t c;
    do c = static_cast<std::uint8_t>(rng.below(256));
    while ((c & 0x7F) == 0x7F);  // NaN codes are tested on their own
    return c;
  }
}

struct Problem {
  std::size_t m, n, k;
};

template <class TA, class TB>
struct Case {
  std::vector<TA> a;
  std::vector<TB> b;
  std::size_t a_off, b_off, lda, ldb, ldc;
};

// Runs fn on one problem and checks every output against the exact sum; returns the outputs.
template <class TA, class TB>
std::vector<float> run_and_check(simd::GemmFn<TA, TB> fn, const Case<TA, TB>& cs, const Problem& p, bool accumulate,
                                 const std::string& what) {
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;  // a NaN pattern nobody writes by accident
  const std::size_t c_off = 1;
  std::vector<float> c(c_off + p.m * cs.ldc + 8, float_of(kGuard));
  std::vector<float> c0(p.m * p.n);
  Rng rng(p.m * 131 + p.n * 17 + p.k);
  for (std::size_t i = 0; i < p.m; ++i)
    for (std::size_t j = 0; j < p.n; ++j) {
      c0[i * p.n + j] = accumulate ? rng.uniform(-4.0f, 4.0f) : float_of(kGuard);
      c[c_off + i * cs.ldc + j] = c0[i * p.n + j];
    }
  fn(p.m, p.n, p.k, cs.a.data() + cs.a_off, cs.lda, cs.b.data() + cs.b_off, cs.ldb, c.data() + c_off, cs.ldc,
     accumulate);
  std::vector<float> out(p.m * p.n);
  for (std::size_t i = 0; i < c.size(); ++i) {
    const bool inside = i >= c_off && (i - c_off) / cs.ldc < p.m && (i - c_off) % cs.ldc < p.n;
    if (!inside) {
      EXPECT_EQ(bits_of(c[i]), kGuard) << what << ": wrote outside the tile at " << i;
      continue;
    }
    const std::size_t r = (i - c_off) / cs.ldc, col = (i - c_off) % cs.ldc;
    double exact = accumulate ? c0[r * p.n + col] : 0.0, mag = accumulate ? std::fabs(exact) : 0.0;
    for (std::size_t q = 0; q < p.k; ++q) {
      const double prod = value(cs.a[cs.a_off + r * cs.lda + q]) * value(cs.b[cs.b_off + col * cs.ldb + q]);
      exact += prod;
      mag += std::fabs(prod);
    }
    // Derived bound: f32 accumulation over k products plus the lane reduction and the final add.
    const double bound = 2.0 * (static_cast<double>(p.k) + 8.0) * 0x1p-24 * mag;
    const double got = c[i];
    EXPECT_LE(std::fabs(got - exact), bound)
        << what << " m=" << p.m << " n=" << p.n << " k=" << p.k << " at (" << r << "," << col << ") got " << got
        << " exact " << exact << (accumulate ? " accumulate" : "");
    out[r * p.n + col] = c[i];
  }
  return out;
}

template <class TA, class TB>
Case<TA, TB> make_case(const Problem& p, std::size_t seed) {
  Rng rng(seed);
  Case<TA, TB> cs;
  cs.a_off = 1 + seed % 3;
  cs.b_off = 1 + (seed / 3) % 3;
  cs.lda = p.k + seed % 4;
  cs.ldb = p.k + (seed / 2) % 4;
  cs.ldc = p.n + seed % 3;
  cs.a.resize(cs.a_off + p.m * cs.lda + 64);
  cs.b.resize(cs.b_off + p.n * cs.ldb + 64);
  for (auto& x : cs.a) x = random_element<TA>(rng);
  for (auto& x : cs.b) x = random_element<TB>(rng);
  return cs;
}

std::vector<Problem> problems() {
  std::vector<Problem> v;
  const std::size_t ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 19};
  const std::size_t ns[] = {1, 2, 3, 4, 5, 7, 8, 9};
  const std::size_t ks[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 127, 128, 129, 200};
  for (std::size_t m : ms)
    for (std::size_t n : ns)
      for (std::size_t k : ks) v.push_back({m, n, k});
  return v;
}

template <class TA, class TB>
void check_pair(simd::GemmFn<TA, TB> fn, simd::GemmFn<TA, TB> generic_fn, const char* name) {
  std::size_t seed = 1;
  for (const Problem& p : problems()) {
    const auto cs = make_case<TA, TB>(p, seed++);
    for (bool acc : {false, true}) {
      const std::string what = std::string(name) + (acc ? " +=" : " =");
      const auto got = run_and_check(fn, cs, p, acc, what);
      const auto ref = run_and_check(generic_fn, cs, p, acc, what + " (generic)");
      if (::testing::Test::HasFailure()) return;  // one bad shape is enough output
      // Against simd/generic: both lie within the bound of the exact value; they must also agree
      // within twice that bound (checked implicitly) — and exactly when k fits one product.
      if (p.k <= 1) {
        for (std::size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(bits_of(got[i]), bits_of(ref[i])) << name << " k=" << p.k << " vs generic";
        }
      }
    }
  }
}

// C for the tile tests: guard words around an m x n tile at `off` (row stride ldc) that holds
// random sums when accumulating (guards too otherwise: C is not read then); in_tile says whether
// element e lies in the tile.
std::vector<float> guarded_c(Rng& rng, std::size_t off, std::size_t m, std::size_t n, std::size_t ldc, bool acc,
                             std::uint32_t guard) {
  std::vector<float> c(off + m * ldc + 4, float_of(guard));
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) c[off + i * ldc + j] = acc ? rng.uniform(-4.0f, 4.0f) : float_of(guard);
  return c;
}
bool in_tile(std::size_t e, std::size_t off, std::size_t m, std::size_t n, std::size_t ldc) {
  return e >= off && (e - off) / ldc < m && (e - off) % ldc < n;
}

class Gemm : public ::testing::TestWithParam<Isa> {
 protected:
  const simd::GemmKernels& table() { return *cpu::gemm_kernels_at(GetParam()); }
};

TEST_P(Gemm, F32F32) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  check_pair<float, float>(table().f32_f32, simd::gemm_generic.f32_f32, "f32_f32");
}
TEST_P(Gemm, Bf16Bf16) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  check_pair<std::uint16_t, std::uint16_t>(table().bf16_bf16, simd::gemm_generic.bf16_bf16, "bf16_bf16");
}
TEST_P(Gemm, F8F8) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  check_pair<std::uint8_t, std::uint8_t>(table().f8_f8, simd::gemm_generic.f8_f8, "f8_f8");
}
TEST_P(Gemm, F32F8) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  check_pair<float, std::uint8_t>(table().f32_f8, simd::gemm_generic.f32_f8, "f32_f8");
}
TEST_P(Gemm, Bf16F8) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  check_pair<std::uint16_t, std::uint8_t>(table().bf16_f8, simd::gemm_generic.bf16_f8, "bf16_f8");
}

// One-hot rows of A (code 0x38 = 1.0) pick single elements of B: every finite code of B must come
// back exactly, subnormals and -0 included, at every position k.
TEST_P(Gemm, F8OneHotReproducesEveryCode) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const std::size_t k = 256, m = 256, n = 9;
  std::vector<std::uint8_t> a(m * k, 0x00), b(n * k);
  for (std::size_t i = 0; i < m; ++i) a[i * k + i] = 0x38;
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t q = 0; q < k; ++q) {
      std::uint8_t c = static_cast<std::uint8_t>((q * 7 + j * 29) & 0xFF);
      if ((c & 0x7F) == 0x7F) c = static_cast<std::uint8_t>(c ^ 0x01);  // NaN codes pollute whole rows
      b[j * k + q] = c;
    }
  std::vector<float> c(m * n);
  table().f8_f8(m, n, k, a.data(), k, b.data(), k, c.data(), n, false);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      const float want = f8e4m3_to_f32(b[j * k + i]);
      // +0 * -x sums give +0 for a -0 element: compare values, and signs where nonzero.
      ASSERT_EQ(c[i * n + j], want) << "code 0x" << std::hex << int(b[j * k + i]) << std::dec << " at k=" << i;
    }
  // bf16 A against f8 B: the same with A = 1.0 in bf16.
  std::vector<std::uint16_t> a16(m * k, 0);
  for (std::size_t i = 0; i < m; ++i) a16[i * k + i] = 0x3F80;
  std::fill(c.begin(), c.end(), 0.0f);
  table().bf16_f8(m, n, k, a16.data(), k, b.data(), k, c.data(), n, false);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) ASSERT_EQ(c[i * n + j], f8e4m3_to_f32(b[j * k + i])) << i << "," << j;
}

// NaN codes (and NaN f32/bf16) propagate to exactly the outputs whose dot product reads them.
TEST_P(Gemm, NanPropagates) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const std::size_t m = 7, n = 6, k = 70;
  Rng rng(99);
  std::vector<std::uint8_t> a(m * k), b(n * k);
  for (auto& x : a) x = random_element<std::uint8_t>(rng);
  for (auto& x : b) x = random_element<std::uint8_t>(rng);
  a[2 * k + 5] = 0x7F;   // row 2 of A
  b[4 * k + 69] = 0xFF;  // row 4 of B, last element (vector tail)
  std::vector<float> c(m * n);
  table().f8_f8(m, n, k, a.data(), k, b.data(), k, c.data(), n, false);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j)
      EXPECT_EQ(std::isnan(c[i * n + j]), i == 2 || j == 4) << i << "," << j;
  std::vector<float> af(m * k), bf(n * k);
  for (std::size_t i = 0; i < a.size(); ++i) af[i] = f8e4m3_to_f32(a[i]);
  for (std::size_t i = 0; i < b.size(); ++i) bf[i] = f8e4m3_to_f32(b[i]);
  table().f32_f32(m, n, k, af.data(), k, bf.data(), k, c.data(), n, false);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) EXPECT_EQ(std::isnan(c[i * n + j]), i == 2 || j == 4) << i << "," << j;
}

// A taller than the driver's largest block of A rows (1 MiB, whatever this CPU's L2): several
// blocks, each converting B's panels again where B is not in the compute type. Every element
// against the exact sum, and each row alone (m = 1) bitwise the same as in the batch: which rows
// share a block changes no result.
template <class TA, class TB>
void check_row_blocks(simd::GemmFn<TA, TB> fn, const char* name) {
  const Problem p{140, 5, 4100};  // 140 rows of 4100 (8 KiB in bf16, 16 KiB in f32) exceed 1 MiB
  const auto cs = make_case<TA, TB>(p, 77);
  const auto batch = run_and_check(fn, cs, p, false, std::string(name) + " tall");
  for (std::size_t i = 0; i < p.m; i += 23) {
    std::vector<float> row(p.n);
    fn(1, p.n, p.k, cs.a.data() + cs.a_off + i * cs.lda, cs.lda, cs.b.data() + cs.b_off, cs.ldb, row.data(), p.n, false);
    for (std::size_t j = 0; j < p.n; ++j) ASSERT_EQ(bits_of(row[j]), bits_of(batch[i * p.n + j])) << name << " row " << i;
  }
}

TEST_P(Gemm, RowsBeyondOneBlockGiveTheSameBitsAsAlone) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  check_row_blocks<std::uint16_t, std::uint16_t>(table().bf16_bf16, "bf16_bf16");
  check_row_blocks<float, std::uint8_t>(table().f32_f8, "f32_f8");
  check_row_blocks<std::uint16_t, std::uint8_t>(table().bf16_f8, "bf16_f8");
}

// Calls of at most one register tile of rows (mr; bf16 rows on avx2 up to 64) read B in its
// stored type, widened in the tiles' registers; taller calls convert panels of B first. Rows
// 0 .. 63 of a call of 70, as calls of 64, 3 mr, mr, mr - 1 rows and alone, give the taller
// call's bits: k with and without a partial last vector, n with partial register tiles, B's fp8
// codes all 256 (the two NaN codes in the last column only, so that the other columns stay finite).
template <class TA, class TB>
void check_few_rows(simd::GemmFn<TA, TB> fn, std::size_t mr, const char* name) {
  std::size_t seed = 90;
  for (std::size_t k : {5, 8, 77, 300})
    for (std::size_t n : {1, 4, 6, 9}) {
      const Problem p{70, n, k};
      auto cs = make_case<TA, TB>(p, seed++);
      if constexpr (std::is_same_v<TB, std::uint8_t>)
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t q = 0; q < k; ++q) {
            std::uint8_t code = static_cast<std::uint8_t>((j * k + q) % 256);
            if ((code & 0x7F) == 0x7F && j + 1 < n) code = static_cast<std::uint8_t>(code - 1);
            cs.b[cs.b_off + j * cs.ldb + q] = code;
          }
      // (Against the exact sums in check_pair; here bitwise against the taller call.)
      std::vector<float> batch(p.m * n);
      fn(p.m, n, k, cs.a.data() + cs.a_off, cs.lda, cs.b.data() + cs.b_off, cs.ldb, batch.data(), n, false);
      for (std::size_t rows : {std::size_t{64}, 3 * mr, mr, mr - 1, std::size_t{1}}) {
        if (rows == 0) continue;
        for (std::size_t i0 = 0; i0 + rows <= 64; i0 += rows) {
          std::vector<float> c(rows * n + 1, float_of(0x7FA5A5A5u));
          fn(rows, n, k, cs.a.data() + cs.a_off + i0 * cs.lda, cs.lda, cs.b.data() + cs.b_off, cs.ldb, c.data(), n, false);
          for (std::size_t e = 0; e < rows * n; ++e) {
            const float want = batch[(i0 + e / n) * n + e % n];
            ASSERT_TRUE(bits_of(c[e]) == bits_of(want) || (std::isnan(c[e]) && std::isnan(want)))
                << name << " k=" << k << " n=" << n << " rows " << i0 << ".." << i0 + rows << " at " << e;
          }
          ASSERT_EQ(bits_of(c[rows * n]), 0x7FA5A5A5u) << name << ": wrote past the tile";
        }
      }
    }
}

TEST_P(Gemm, FewRowsGiveTheBitsOfATallerCall) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const std::size_t mr = table().mr;
  check_few_rows<std::uint16_t, std::uint16_t>(table().bf16_bf16, mr, "bf16_bf16");
  check_few_rows<float, std::uint8_t>(table().f32_f8, mr, "f32_f8");
  check_few_rows<std::uint16_t, std::uint8_t>(table().bf16_f8, mr, "bf16_f8");
  check_few_rows<std::uint8_t, std::uint8_t>(table().f8_f8, mr, "f8_f8");
}

// A call of a few f32 rows against fp8 rows may carry the decode's 2^8 on its activations (exact
// only while no |a| reaches 2^120): activations at that edge and past it (2^120, 2^121, the
// largest float, infinities, NaN) beside ordinary ones, against codes of every magnitude (the
// subnormal ones give finite products 2^8 times a would overflow), still give one row the bits of
// the taller call, which decodes the codes themselves; so do ones just under the edge.
TEST_P(Gemm, FewRowsFoldTheFp8ScaleOnlyWhereItIsExact) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& t = table();
  constexpr std::uint32_t kEdges[] = {0x7B7FFFFFu, 0x7B800000u, 0xFC000000u, 0x7F7FFFFFu, 0x7F800000u, 0xFF800000u,
                                      0x7FC00001u, 0x00000001u};
  constexpr std::size_t n = 9, k = 40, m = 70;
  Rng rng(71);
  for (std::uint32_t edge : kEdges) {
    std::vector<float> a(m * k);
    for (auto& x : a) x = rng.uniform(-2.0f, 2.0f);
    for (std::size_t i = 0; i < m; i += 3) a[i * k + (i % k)] = float_of(edge);
    std::vector<std::uint8_t> b(n * k);
    for (std::size_t e = 0; e < b.size(); ++e) b[e] = static_cast<std::uint8_t>((e * 37) % 256);
    std::vector<float> tall(m * n);
    t.f32_f8(m, n, k, a.data(), k, b.data(), k, tall.data(), n, false);
    for (std::size_t i = 0; i < m; ++i) {
      std::vector<float> c(n + 1, float_of(0x7FA5A5A5u));
      t.f32_f8(1, n, k, a.data() + i * k, k, b.data(), k, c.data(), n, false);
      for (std::size_t j = 0; j < n; ++j)
        ASSERT_TRUE(bits_of(c[j]) == bits_of(tall[i * n + j]) || (std::isnan(c[j]) && std::isnan(tall[i * n + j])))
            << "edge 0x" << std::hex << edge << std::dec << " row " << i << " column " << j << ": " << c[j]
            << " against " << tall[i * n + j];
      ASSERT_EQ(bits_of(c[n]), 0x7FA5A5A5u) << "wrote past the row";
    }
  }
}

// k = 0: C = 0 without accumulate, untouched with it.
TEST_P(Gemm, EmptyReduction) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  float c[6] = {1, -2, 3, -0.0f, 5, 6};
  table().f32_f32(2, 3, 0, nullptr, 0, nullptr, 0, c, 3, true);
  EXPECT_EQ(c[1], -2.0f);
  EXPECT_EQ(bits_of(c[3]), 0x80000000u);
  table().f32_f32(2, 3, 0, nullptr, 0, nullptr, 0, c, 3, false);
  for (float x : c) EXPECT_EQ(bits_of(x), 0u);
}

// Same inputs, same level: bitwise the same result (no hidden state, no alignment dependence
// beyond what the layout fixes).
TEST_P(Gemm, Repeatable) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const Problem p{13, 9, 131};
  const auto cs = make_case<std::uint16_t, std::uint8_t>(p, 5);
  std::vector<float> c1(p.m * cs.ldc), c2(p.m * cs.ldc);
  table().bf16_f8(p.m, p.n, p.k, cs.a.data() + cs.a_off, cs.lda, cs.b.data() + cs.b_off, cs.ldb, c1.data(), cs.ldc,
                  false);
  table().bf16_f8(p.m, p.n, p.k, cs.a.data() + cs.a_off, cs.lda, cs.b.data() + cs.b_off, cs.ldb, c2.data(), cs.ldc,
                  false);
  for (std::size_t i = 0; i < c1.size(); ++i) ASSERT_EQ(bits_of(c1[i]), bits_of(c2[i]));
}

// Int4 columns: the kernels against bf16_bf16 / f32_f32 of the same level over W expanded by hand
// (every code of every word looked up in its group's table), bitwise, since they promise the same
// tiles and chains. Shapes around the register tile and the 4-row word step (k = 8 .. 264), every
// group size, padded word rows (ldw > n), unaligned words and tables, NaN and infinite table values;
// nothing written outside the tile.
TEST_P(Gemm, Int4ColumnsMatchTheTilesOverExpandedWeights) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
  Rng rng(17);
  std::size_t seed = 0;
  for (std::size_t gs : {32, 64, 128})
    for (std::size_t m : {1, 2, 5, 6, 7, 13})
      for (std::size_t n : {1, 2, 3, 4, 5, 8, 9, 16, 17, 35})
        for (std::size_t k : {8, 16, 24, 32, 40, 56, 64, 96, 128, 136, 264}) {
          ++seed;
          const std::size_t groups = (k + gs - 1) / gs, ldw = n + seed % 3, off = seed % 2;
          const std::size_t lda = k + seed % 5, ldc = n + seed % 2;
          std::vector<std::uint32_t> words(off + (k / 8) * ldw + 4);
          for (auto& w : words) w = static_cast<std::uint32_t>(rng.below(1u << 16)) << 16 | static_cast<std::uint32_t>(rng.below(1u << 16));
          std::vector<float> tables(off + n * groups * 16);
          for (auto& t : tables) t = round_to_bf16(rng.uniform(-3.0f, 3.0f));
          if (seed % 7 == 0) tables[off + rng.below(tables.size() - off)] = std::numeric_limits<float>::quiet_NaN();
          if (seed % 11 == 0) tables[off + rng.below(tables.size() - off)] = -std::numeric_limits<float>::infinity();
          const simd::Int4Columns cols{words.data() + off, ldw, tables.data() + off, gs};
          // W expanded by hand: row j holds column j's k values.
          std::vector<std::uint16_t> w16(n * k);
          std::vector<float> w32(n * k);
          for (std::size_t j = 0; j < n; ++j)
            for (std::size_t p = 0; p < k; ++p) {
              const std::uint32_t q = (words[off + (p / 8) * ldw + j] >> (4 * (p % 8))) & 0xFu;
              w32[j * k + p] = tables[off + (j * groups + p / gs) * 16 + q];
              w16[j * k + p] = static_cast<std::uint16_t>(bits_of(w32[j * k + p]) >> 16);
            }
          std::vector<std::uint16_t> a16(m * lda);
          std::vector<float> a32(m * lda);
          for (std::size_t i = 0; i < a16.size(); ++i) {
            a16[i] = random_element<std::uint16_t>(rng);
            a32[i] = rng.uniform(-2.0f, 2.0f);
          }
          for (bool acc : {false, true}) {
            SCOPED_TRACE("gs=" + std::to_string(gs) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                         " k=" + std::to_string(k) + (acc ? " +=" : " ="));
            std::vector<float> start(m * ldc + 4, float_of(kGuard));
            for (std::size_t i = 0; i < m; ++i)
              for (std::size_t j = 0; j < n; ++j) start[i * ldc + j] = acc ? rng.uniform(-4.0f, 4.0f) : float_of(kGuard);
            auto got16 = start, want16 = start, got32 = start, want32 = start;
            table().int4_bf16(m, n, k, a16.data(), lda, cols, got16.data(), ldc, acc);
            table().bf16_bf16(m, n, k, a16.data(), lda, w16.data(), k, want16.data(), ldc, acc);
            table().int4_f32(m, n, k, a32.data(), lda, cols, got32.data(), ldc, acc);
            table().f32_f32(m, n, k, a32.data(), lda, w32.data(), k, want32.data(), ldc, acc);
            // NaN matches NaN: where a table's NaN meets the default NaN of inf - inf in a chain,
            // which one an FMA passes on depends on the operand order the compiler encoded.
            const auto same = [](float x, float y) { return bits_of(x) == bits_of(y) || (std::isnan(x) && std::isnan(y)); };
            for (std::size_t e = 0; e < start.size(); ++e) {
              ASSERT_TRUE(same(got16[e], want16[e])) << "int4_bf16 at " << e << ": " << got16[e] << " against " << want16[e];
              ASSERT_TRUE(same(got32[e], want32[e])) << "int4_f32 at " << e << ": " << got32[e] << " against " << want32[e];
            }
          }
        }
}

// One-hot rows of A pick single weights: every code of every column comes back as its table value,
// so a wrong nibble order, column or group cannot hide in a sum.
TEST_P(Gemm, Int4OneHotRowsReturnEveryTableValue) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const std::size_t k = 256, n = 7, gs = 64, groups = k / gs;
  Rng rng(29);
  std::vector<std::uint32_t> words((k / 8) * n);
  for (auto& w : words) w = static_cast<std::uint32_t>(rng.below(1u << 16)) << 16 | static_cast<std::uint32_t>(rng.below(1u << 16));
  std::vector<float> tables(n * groups * 16);
  for (std::size_t i = 0; i < tables.size(); ++i) tables[i] = bf16_to_f32(static_cast<std::uint16_t>(0xBF80 + 3 * i));  // distinct bf16 values
  std::vector<std::uint16_t> a16(k * k, 0);
  std::vector<float> a32(k * k, 0.0f);
  for (std::size_t i = 0; i < k; ++i) {
    a16[i * k + i] = 0x3F80;
    a32[i * k + i] = 1.0f;
  }
  const simd::Int4Columns cols{words.data(), n, tables.data(), gs};
  std::vector<float> c16(k * n), c32(k * n);
  table().int4_bf16(k, n, k, a16.data(), k, cols, c16.data(), n, false);
  table().int4_f32(k, n, k, a32.data(), k, cols, c32.data(), n, false);
  for (std::size_t p = 0; p < k; ++p)
    for (std::size_t j = 0; j < n; ++j) {
      const float want = tables[(j * groups + p / gs) * 16 + ((words[(p / 8) * n + j] >> (4 * (p % 8))) & 0xFu)];
      ASSERT_EQ(c16[p * n + j], want) << "int4_bf16, column " << j << " k " << p;
      ASSERT_EQ(c32[p * n + j], want) << "int4_f32, column " << j << " k " << p;
    }
}

// Value tables: every f16 and every bf16 scale pattern (subnormals, infinities, NaN payloads) with
// every zero point as stored (v2) and as stored minus one (v1: zeros 1..16), and the default zero
// point 8, against the spec's rounding bf16((q - z) * s).
TEST_P(Gemm, Int4TablesRoundEveryScaleAsTheSpec) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const std::size_t n = 65536, stride = 19;  // a padded stride: the gaps must stay untouched
  std::vector<std::uint16_t> scales(n);
  for (std::size_t c = 0; c < n; ++c) scales[c] = static_cast<std::uint16_t>(c);
  std::vector<std::uint32_t> zeros(n / 8);
  Rng rng(31);
  for (auto& w : zeros) w = static_cast<std::uint32_t>(rng.below(1u << 16)) << 16 | static_cast<std::uint32_t>(rng.below(1u << 16));
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
  for (bool f16 : {true, false})
    for (int zp : {0, 1, 2}) {  // none, v2, v1
      SCOPED_TRACE(std::string(f16 ? "f16" : "bf16") + (zp ? " scales, zero points" : " scales, z = 8") +
                   (zp == 2 ? " (v1)" : ""));
      const int bias = zp == 2 ? 1 : 0;
      std::vector<float> tables(n * stride, float_of(kGuard));
      table().int4_tables(scales.data(), f16, zp ? zeros.data() : nullptr, bias, n, tables.data(), stride);
      for (std::size_t c = 0; c < n; ++c) {
        const float s = f16 ? f16_to_f32(scales[c]) : bf16_to_f32(scales[c]);
        const int z = zp ? static_cast<int>((zeros[c / 8] >> (4 * (c % 8))) & 0xFu) + bias : 8;
        for (std::size_t q = 0; q < 16; ++q) {
          const float want = bf16_to_f32(f32_to_bf16(static_cast<float>(static_cast<int>(q) - z) * s));
          ASSERT_EQ(bits_of(tables[c * stride + q]), bits_of(want)) << "scale 0x" << std::hex << scales[c] << std::dec << " q " << q;
        }
        for (std::size_t q = 16; q < stride; ++q) ASSERT_EQ(bits_of(tables[c * stride + q]), kGuard) << "wrote a gap";
      }
    }
}

// The decode row over group parameters (int4_row_bf16 / int4_row_f32) against int4_bf16 /
// int4_f32 with m = 1 over the tables int4_tables makes of the same parameters, bitwise. Scales
// drawn from every class (normal, f16 and bf16 subnormal, zero, infinite, NaN; a group with a
// subnormal bf16 scale rounds its tables another way than one without), zero points none / v2 /
// v1, padded scale and zero rows, full panels and a rest, k around the word step and the groups;
// outputs poisoned or accumulated into, nothing written past n.
struct RowGroups {
  std::vector<std::uint16_t> scales;
  std::vector<std::uint32_t> zeros;
  simd::Int4Groups q;
};
RowGroups row_groups(Rng& rng, std::size_t n, std::size_t groups, bool f16, int zp, std::size_t pad) {
  static constexpr std::uint16_t kF16[] = {0x3C00, 0x2E66, 0xB555, 0x0001, 0x83FF, 0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E01};
  static constexpr std::uint16_t kBf16[] = {0x3F80, 0x3C23, 0xBE11, 0x0001, 0x807F, 0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1};
  RowGroups r;
  const std::size_t lds = n + pad, ldz = (n + 7) / 8 + pad;
  r.scales.resize(groups * lds);
  for (auto& s : r.scales) {
    // Mostly ordinary scales, the special classes in a few columns.
    const std::size_t pick = rng.below(40);
    s = pick < 10 ? (f16 ? kF16 : kBf16)[pick]
                  : f16 ? static_cast<std::uint16_t>(0x2000 + rng.below(0x1800)) : f32_to_bf16(rng.uniform(-0.05f, 0.05f));
  }
  r.zeros.resize(groups * ldz);
  for (auto& w : r.zeros) w = static_cast<std::uint32_t>(rng.below(1u << 16)) << 16 | static_cast<std::uint32_t>(rng.below(1u << 16));
  r.q = simd::Int4Groups{r.scales.data(), lds, f16, zp ? r.zeros.data() : nullptr, ldz, zp == 2 ? 1 : 0};
  return r;
}

// tables[(j * groups + g) * 16 + c] for columns [0, n), as the decode row must form them.
std::vector<float> tables_of(const simd::GemmKernels& t, const simd::Int4Groups& q, std::size_t n, std::size_t groups) {
  std::vector<float> tables(n * groups * 16);
  for (std::size_t g = 0; g < groups; ++g)
    t.int4_tables(q.scales + g * q.lds, q.scales_f16, q.zero_words ? q.zero_words + g * q.ldz : nullptr, q.zero_bias, n,
                  tables.data() + g * 16, groups * 16);
  return tables;
}

TEST_P(Gemm, Int4RowFromGroupsMatchesTheTablesPath) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& t = table();
  const bool vector = GetParam() != Isa::generic;
  ASSERT_EQ(t.int4_row_bf16 != nullptr, vector);
  ASSERT_EQ(t.int4_row_f32 != nullptr, vector);
  if (!vector) GTEST_SKIP() << "no int4 decode row at this level";
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
  Rng rng(41);
  std::size_t seed = 0;
  for (std::size_t gs : {32, 64, 128})
    for (std::size_t n : {1, 8, 9, 16, 17, 24, 32, 35, 48, 80})
      for (std::size_t k : {0, 8, 24, 32, 40, 128, 136, 264, 512})
        for (int zp : {0, 1, 2}) {
          ++seed;
          const bool f16 = seed % 2 == 0;
          const std::size_t groups = (k + gs - 1) / gs, ldw = n + seed % 3;
          RowGroups rg = row_groups(rng, n, std::max<std::size_t>(groups, 1), f16, zp, seed % 3);
          std::vector<std::uint32_t> words((k / 8) * ldw + 1);
          for (auto& w : words) w = static_cast<std::uint32_t>(rng.below(1u << 16)) << 16 | static_cast<std::uint32_t>(rng.below(1u << 16));
          const std::vector<float> tables = tables_of(t, rg.q, n, groups);
          const simd::Int4Columns with_tables{words.data(), ldw, tables.data(), gs};
          const simd::Int4Columns codes_only{words.data(), ldw, nullptr, gs};
          std::vector<std::uint16_t> a16(k + 1);
          std::vector<float> a32(k + 1);
          for (std::size_t p = 0; p < k; ++p) {
            a16[p] = random_element<std::uint16_t>(rng);
            a32[p] = rng.uniform(-2.0f, 2.0f);
          }
          for (bool acc : {false, true}) {
            SCOPED_TRACE("gs=" + std::to_string(gs) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                         " zp=" + std::to_string(zp) + (f16 ? " f16" : " bf16") + (acc ? " +=" : " ="));
            std::vector<float> start(n + 4, float_of(kGuard));
            for (std::size_t j = 0; j < n; ++j) start[j] = acc ? rng.uniform(-4.0f, 4.0f) : float_of(kGuard);
            auto got16 = start, want16 = start, got32 = start, want32 = start;
            t.int4_row_bf16(n, k, a16.data(), codes_only, rg.q, got16.data(), acc);
            t.int4_bf16(1, n, k, a16.data(), k, with_tables, want16.data(), n, acc);
            t.int4_row_f32(n, k, a32.data(), codes_only, rg.q, got32.data(), acc);
            t.int4_f32(1, n, k, a32.data(), k, with_tables, want32.data(), n, acc);
            // Where two NaNs of different payloads meet in a chain, which one an FMA passes on
            // depends on the operand order the compiler encoded: NaN matches NaN.
            const auto same = [](float x, float y) { return bits_of(x) == bits_of(y) || (std::isnan(x) && std::isnan(y)); };
            for (std::size_t e = 0; e < start.size(); ++e) {
              ASSERT_TRUE(same(got16[e], want16[e])) << "int4_row_bf16 at " << e << ": " << got16[e] << " against " << want16[e];
              ASSERT_TRUE(same(got32[e], want32[e])) << "int4_row_f32 at " << e << ": " << got32[e] << " against " << want32[e];
            }
            if (t.int4_row_tables == nullptr) continue;
            // The same row over tables formed ahead (int4_row_tables, blocks 32 bytes apart past
            // their groups, nothing written there), its scales scrambled: they must not be read.
            const std::size_t cols = t.int4_row_table_cols, ldt = groups * t.int4_row_table_bytes + 32;
            constexpr std::uint8_t kByte = 0xA5;
            std::vector<std::uint8_t> ahead(n / cols * ldt + 64, kByte);
            t.int4_row_tables(rg.q, n, groups, ahead.data(), ldt);
            for (std::size_t b = 0; b <= n / cols; ++b)
              for (std::size_t i = b * ldt + groups * t.int4_row_table_bytes; i < std::min((b + 1) * ldt, ahead.size()); ++i)
                ASSERT_EQ(ahead[i], kByte) << "int4_row_tables wrote byte " << i;
            std::vector<std::uint16_t> scrambled(rg.scales.size());
            for (std::size_t i = 0; i < scrambled.size(); ++i) scrambled[i] = static_cast<std::uint16_t>(rg.scales[i] ^ 0x1234);
            simd::Int4Groups qa = rg.q;
            qa.scales = scrambled.data();
            qa.row_tables = ahead.data();
            qa.ldt = ldt;
            // Columns past the last full block read their scales (the buffered path): those as drawn.
            for (std::size_t g = 0; g < std::max<std::size_t>(groups, 1); ++g)
              for (std::size_t j = n / cols * cols; j < rg.q.lds; ++j) scrambled[g * rg.q.lds + j] = rg.scales[g * rg.q.lds + j];
            auto ahead16 = start, ahead32 = start;
            t.int4_row_bf16(n, k, a16.data(), codes_only, qa, ahead16.data(), acc);
            t.int4_row_f32(n, k, a32.data(), codes_only, qa, ahead32.data(), acc);
            for (std::size_t e = 0; e < start.size(); ++e) {
              ASSERT_TRUE(same(ahead16[e], want16[e])) << "int4_row_bf16 over tables formed ahead at " << e;
              ASSERT_TRUE(same(ahead32[e], want32[e])) << "int4_row_f32 over tables formed ahead at " << e;
            }
            // The expansion (int4_bf16 / int4_f32) over the same tables for whole blocks, its f32
            // tables of those columns made NaN: only the columns past them may read theirs.
            std::vector<float> rest_only = tables;
            for (std::size_t i = 0; i < n / cols * cols * groups * 16; ++i) rest_only[i] = std::numeric_limits<float>::quiet_NaN();
            simd::Int4Columns expand_ahead{words.data(), ldw, rest_only.data(), gs};
            expand_ahead.row_tables = ahead.data();
            expand_ahead.ldt = ldt;
            auto exp16 = start, exp32 = start;
            t.int4_bf16(1, n, k, a16.data(), k, expand_ahead, exp16.data(), n, acc);
            t.int4_f32(1, n, k, a32.data(), k, expand_ahead, exp32.data(), n, acc);
            for (std::size_t e = 0; e < start.size(); ++e) {
              ASSERT_TRUE(same(exp16[e], want16[e])) << "int4_bf16 over tables formed ahead at " << e;
              ASSERT_TRUE(same(exp32[e], want32[e])) << "int4_f32 over tables formed ahead at " << e;
            }
            if (t.int4_row_codes == nullptr) continue;
            // The row and the expansion over codes laid out ahead (int4_row_codes, blocks 64 bytes
            // apart past their steps, nothing written there), the words of those blocks scrambled:
            // they must not be read; the columns past them read their words as drawn.
            const std::size_t ldr = (k + 15) / 16 * t.int4_row_code_bytes + 64;  // 64 guard bytes per block
            std::vector<std::uint8_t> laid(n / cols * ldr + 64, kByte);
            t.int4_row_codes(codes_only, n, k, laid.data(), ldr);
            const std::size_t steps_bytes = (k + 15) / 16 * t.int4_row_code_bytes;
            for (std::size_t b = 0; b <= n / cols; ++b)
              for (std::size_t i = b * ldr + steps_bytes; i < std::min((b + 1) * ldr, laid.size()); ++i)
                ASSERT_EQ(laid[i], kByte) << "int4_row_codes wrote byte " << i;
            std::vector<std::uint32_t> scrambled_words = words;
            for (std::size_t r = 0; r < k / 8; ++r)
              for (std::size_t j = 0; j < n / cols * cols; ++j) scrambled_words[r * ldw + j] ^= 0x9E3779B9u;
            simd::Int4Columns laid_codes{scrambled_words.data(), ldw, nullptr, gs};
            laid_codes.row_codes = laid.data();
            laid_codes.ldr = ldr;
            simd::Int4Columns laid_expand = expand_ahead;
            laid_expand.words = scrambled_words.data();
            laid_expand.row_codes = laid.data();
            laid_expand.ldr = ldr;
            auto laid16 = start, laid32 = start, laidx16 = start, laidx32 = start;
            t.int4_row_bf16(n, k, a16.data(), laid_codes, rg.q, laid16.data(), acc);
            t.int4_row_f32(n, k, a32.data(), laid_codes, qa, laid32.data(), acc);
            t.int4_bf16(1, n, k, a16.data(), k, laid_expand, laidx16.data(), n, acc);
            t.int4_f32(1, n, k, a32.data(), k, laid_expand, laidx32.data(), n, acc);
            for (std::size_t e = 0; e < start.size(); ++e) {
              ASSERT_TRUE(same(laid16[e], want16[e])) << "int4_row_bf16 over laid-out codes at " << e;
              ASSERT_TRUE(same(laid32[e], want32[e])) << "int4_row_f32 over laid-out codes at " << e;
              ASSERT_TRUE(same(laidx16[e], want16[e])) << "int4_bf16 over laid-out codes at " << e;
              ASSERT_TRUE(same(laidx32[e], want32[e])) << "int4_f32 over laid-out codes at " << e;
            }
          }
        }
}

// Every scale pattern, f16 and bf16, one per column, with every zero-point mode: one-hot rows of A
// read each code of each column back alone, so every value of every table the decode row forms
// is checked: bitwise against the tables path (int4_bf16 / int4_f32 over int4_tables' tables),
// and in f32 against the table value itself (the bf16 dot reads subnormal values as zero).
TEST_P(Gemm, Int4RowFromGroupsFormsEveryTableValue) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& t = table();
  if (t.int4_row_bf16 == nullptr) GTEST_SKIP() << "no int4 decode row at this level";
  const std::size_t n = 65536, k = 32, gs = 32;
  Rng rng(43);
  std::vector<std::uint16_t> scales(n);
  for (std::size_t c = 0; c < n; ++c) scales[c] = static_cast<std::uint16_t>(c);
  std::vector<std::uint32_t> zeros(n / 8), words((k / 8) * n);
  for (auto& w : zeros) w = static_cast<std::uint32_t>(rng.below(1u << 16)) << 16 | static_cast<std::uint32_t>(rng.below(1u << 16));
  // Word row r of column c holds codes 8 (r % 2) .. + 7 in some order: each column sees all 16.
  for (std::size_t r = 0; r < k / 8; ++r)
    for (std::size_t c = 0; c < n; ++c) {
      std::uint32_t w = 0;
      for (std::uint32_t i = 0; i < 8; ++i) w |= ((8 * (r % 2) + (i + c + r) % 8) & 0xFu) << (4 * i);
      words[r * n + c] = w;
    }
  for (bool f16 : {true, false})
    for (int zp : {0, 1, 2}) {
      SCOPED_TRACE(std::string(f16 ? "f16" : "bf16") + " zero points " + std::to_string(zp));
      const simd::Int4Groups q{scales.data(), n, f16, zp ? zeros.data() : nullptr, n / 8, zp == 2 ? 1 : 0};
      const std::vector<float> tables = tables_of(t, q, n, 1);
      const simd::Int4Columns codes_only{words.data(), n, nullptr, gs}, with_tables{words.data(), n, tables.data(), gs};
      std::vector<std::uint16_t> a16(k, 0);
      std::vector<float> a32(k, 0.0f), got16(n), got32(n), want16(n), want32(n);
      for (std::size_t p = 0; p < k; ++p) {
        a16[p] = 0x3F80;
        a32[p] = 1.0f;
        t.int4_row_bf16(n, k, a16.data(), codes_only, q, got16.data(), false);
        t.int4_row_f32(n, k, a32.data(), codes_only, q, got32.data(), false);
        t.int4_bf16(1, n, k, a16.data(), k, with_tables, want16.data(), n, false);
        t.int4_f32(1, n, k, a32.data(), k, with_tables, want32.data(), n, false);
        a16[p] = 0;
        a32[p] = 0.0f;
        for (std::size_t c = 0; c < n; ++c) {
          ASSERT_EQ(bits_of(got16[c]), bits_of(want16[c])) << "bf16, scale 0x" << std::hex << c << std::dec << " k " << p;
          ASSERT_EQ(bits_of(got32[c]), bits_of(want32[c])) << "f32, scale 0x" << std::hex << c << std::dec << " k " << p;
          const std::uint32_t code = (words[(p / 8) * n + c] >> (4 * (p % 8))) & 0xFu;
          // The other products are 0 times a table value: NaN where that value is not finite.
          bool finite = true;
          for (std::size_t v = 0; v < 16; ++v) finite = finite && std::isfinite(tables[c * 16 + v]);
          const float want = 0.0f + tables[c * 16 + code];  // a -0 value sums to +0 from the chain's +0
          if (finite) ASSERT_EQ(bits_of(got32[c]), bits_of(want)) << "f32 value, scale 0x" << std::hex << c << std::dec << " k " << p;
          else ASSERT_TRUE(std::isnan(got32[c])) << "f32 value, scale 0x" << std::hex << c << std::dec << " k " << p;
        }
      }
    }
}

// ---- the attention pieces: f32_nn, scale_max, exp_sum ------------------------------------------

// C (+)= A·B with B along n: every shape around the register tile (rows, whole vectors and a
// partial one), strided and unaligned operands, against the exact sum within the one-chain bound
// (k products in order, plus the start value); nothing written outside the tile.
TEST_P(Gemm, NnMatchesExactSumsAndGeneric) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& gk = *cpu::gemm_kernels_at(Isa::generic);
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
  Rng rng(23);
  std::size_t seed = 0;
  for (std::size_t m : {1, 2, 3, 5, 6, 7, 12, 13})
    for (std::size_t n : {1, 3, 4, 8, 15, 16, 17, 33, 64, 65, 100})
      for (std::size_t k : {0, 1, 2, 7, 64, 65})
        for (bool acc : {false, true}) {
          ++seed;
          const std::size_t lda = k + seed % 3, ldb = n + seed % 5, ldc = n + 1 + seed % 2, off = 1 + seed % 3;
          std::vector<float> a(off + m * lda + 8), b(off + k * ldb + 8);
          for (auto& x : a) x = rng.uniform(-2.0f, 2.0f);
          for (auto& x : b) x = rng.uniform(-2.0f, 2.0f);
          std::vector<float> c(off + m * ldc + 8, float_of(kGuard));
          for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < n; ++j) c[off + i * ldc + j] = acc ? rng.uniform(-4.0f, 4.0f) : float_of(kGuard);
          std::vector<float> c2 = c;
          const std::vector<float> c0 = c;
          table().f32_nn(m, n, k, a.data() + off, lda, b.data() + off, ldb, c.data() + off, ldc, acc);
          gk.f32_nn(m, n, k, a.data() + off, lda, b.data() + off, ldb, c2.data() + off, ldc, acc);
          for (std::size_t e = 0; e < c.size(); ++e) {
            if (!in_tile(e, off, m, n, ldc)) {
              ASSERT_EQ(bits_of(c[e]), kGuard) << "wrote outside the tile at " << e << ", m=" << m << " n=" << n << " k=" << k;
              continue;
            }
            const std::size_t i = (e - off) / ldc, j = (e - off) % ldc;
            double exact = acc ? c0[e] : 0.0, mag = std::fabs(exact);
            for (std::size_t p = 0; p < k; ++p) {
              const double prod = static_cast<double>(a[off + i * lda + p]) * b[off + p * ldb + j];
              exact += prod;
              mag += std::fabs(prod);
            }
            // One chain of k steps, each a fused multiply-add or (generic) a product and a sum.
            const double bound = 2.0 * (static_cast<double>(k) + 1.0) * 0x1p-24 * mag;
            ASSERT_LE(std::fabs(c[e] - exact), bound)
                << "m=" << m << " n=" << n << " k=" << k << " at (" << i << "," << j << ")" << (acc ? " +=" : "");
            ASSERT_LE(std::fabs(c[e] - c2[e]), 2.0 * bound) << "vs generic, m=" << m << " n=" << n << " k=" << k;
          }
        }
}

// f32_bf16_nn reads its bf16 value rows widened exactly, so it gives f32_nn's bits over the widened
// rows: every shape around the register tile, every kind of bf16 pattern (NaN, infinities,
// subnormals among them), strided and unaligned operands, nothing written outside the tile.
TEST_P(Gemm, F32Bf16NnGivesTheBitsOfF32NnOverWidenedRows) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
  Rng rng(41);
  std::size_t seed = 0;
  for (std::size_t m : {1, 2, 3, 5, 6, 7, 13})
    for (std::size_t n : {1, 3, 8, 15, 16, 17, 64, 65, 100})
      for (std::size_t k : {0, 1, 2, 7, 64})
        for (bool acc : {false, true}) {
          ++seed;
          const std::size_t lda = k + seed % 3, ldb = n + seed % 5, ldc = n + 1 + seed % 2, off = 1 + seed % 3;
          std::vector<float> a(off + m * lda + 8);
          for (auto& x : a) x = rng.uniform(-2.0f, 2.0f);
          std::vector<std::uint16_t> b(off + k * ldb + 8);
          // Mostly ordinary values; one word in 16 any pattern at all.
          for (auto& x : b)
            x = rng.below(16) == 0 ? static_cast<std::uint16_t>(rng.below(65536)) : f32_to_bf16(rng.uniform(-2.0f, 2.0f));
          std::vector<float> wide(b.size());
          for (std::size_t e = 0; e < b.size(); ++e) wide[e] = bf16_to_f32(b[e]);
          std::vector<float> c(off + m * ldc + 8, float_of(kGuard));
          for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < n; ++j) c[off + i * ldc + j] = acc ? rng.uniform(-4.0f, 4.0f) : float_of(kGuard);
          std::vector<float> want = c;
          table().f32_bf16_nn(m, n, k, a.data() + off, lda, b.data() + off, ldb, c.data() + off, ldc, acc);
          table().f32_nn(m, n, k, a.data() + off, lda, wide.data() + off, ldb, want.data() + off, ldc, acc);
          for (std::size_t e = 0; e < c.size(); ++e)
            ASSERT_EQ(bits_of(c[e]), bits_of(want[e])) << "m=" << m << " n=" << n << " k=" << k << " at " << e;
        }
}

// round_bf16 against mlakit::f32_to_bf16, bit for bit: random patterns of every exponent, halfway
// cases of both parities, subnormals, infinities, NaN with full payloads; lengths around the
// vector width, nothing past n written.
TEST_P(Gemm, RoundBf16MatchesTheScalarRounding) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  Rng rng(43);
  std::vector<float> xs;
  for (int i = 0; i < 20000; ++i) {
    std::uint32_t u = static_cast<std::uint32_t>(rng.below(65536)) << 16 | static_cast<std::uint32_t>(rng.below(65536));
    if (i % 4 == 1) u = (u & 0xFFFF0000u) | 0x8000u;            // a tie
    if (i % 4 == 2) u = (u & 0x807FFFFFu);                      // subnormal or zero
    if (i % 8 == 3) u = (u & 0x807FFFFFu) | 0x7F800000u;        // infinity or NaN
    xs.push_back(float_of(u));
  }
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{17},
                        std::size_t{33}, xs.size()}) {
    std::vector<std::uint16_t> d(n + 2, 0xA5A5);
    table().round_bf16(xs.data(), d.data() + 1, n);
    EXPECT_EQ(d[0], 0xA5A5);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(d[1 + i], f32_to_bf16(xs[i])) << "bits " << std::hex << bits_of(xs[i]);
    EXPECT_EQ(d[n + 1], 0xA5A5) << "n=" << n;
  }
}

// split_bf16x3 against its definition through mlakit::f32_to_bf16, bit for bit, on attention
// weights (0..1, with exact zeros, ones and values near the exp flush), random f32 patterns and NaN;
// the three parts leave at most 2^-25 |x| where they stay normal; nothing past n written.
TEST_P(Gemm, SplitBf16x3IsThreeRoundingsOfWhatIsLeft) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  Rng rng(73);
  std::vector<float> xs;
  for (int i = 0; i < 20000; ++i) {
    float x = rng.uniform(0.0f, 1.0f);
    if (i % 7 == 1) x = std::ldexp(rng.uniform(1.0f, 2.0f), -100 - static_cast<int>(rng.below(24)));
    if (i % 7 == 2) x = float_of(static_cast<std::uint32_t>(rng.below(65536)) << 16 | static_cast<std::uint32_t>(rng.below(65536)));
    if (i % 97 == 3) x = std::numeric_limits<float>::quiet_NaN();
    if (i % 89 == 4) x = i % 2 ? 1.0f : 0.0f;
    xs.push_back(x);
  }
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{17}, std::size_t{33}, xs.size()}) {
    std::vector<std::uint16_t> h(n + 2, 0xA5A5), m(n + 2, 0xA5A5), l(n + 2, 0xA5A5);
    table().split_bf16x3(xs.data(), n, h.data() + 1, m.data() + 1, l.data() + 1);
    for (auto* v : {&h, &m, &l}) {
      EXPECT_EQ((*v)[0], 0xA5A5);
      EXPECT_EQ((*v)[n + 1], 0xA5A5) << "n=" << n;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const float x = xs[i];
      const std::uint16_t wh = f32_to_bf16(x);
      const float r = x - bf16_to_f32(wh);
      const std::uint16_t wm = f32_to_bf16(r);
      const std::uint16_t wl = f32_to_bf16(r - bf16_to_f32(wm));
      ASSERT_EQ(h[1 + i], wh) << "bits " << std::hex << bits_of(x);
      ASSERT_EQ(m[1 + i], wm) << "bits " << std::hex << bits_of(x);
      ASSERT_EQ(l[1 + i], wl) << "bits " << std::hex << bits_of(x);
      const double sum = static_cast<double>(bf16_to_f32(wh)) + bf16_to_f32(wm) + bf16_to_f32(wl);
      if (std::isfinite(x) && std::fabs(x) >= 0x1p-100 && std::fabs(x) < 0x1p100) {
        ASSERT_LE(std::fabs(sum - x), 0x1p-25 * std::fabs(x)) << "bits " << std::hex << bits_of(x);
      }
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(bf16_to_f32(h[1 + i])));
      }
    }
  }
}

// x * f * c in place, and the maximum: NaN when any product is NaN, -inf for none; no element
// past n touched; lengths around the vector width.
TEST_P(Gemm, ScaleMaxScalesInPlaceAndFindsTheMaximum) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  Rng rng(29);
  constexpr float kPoison = -7.25e30f;
  for (std::size_t n : {0, 1, 3, 4, 7, 8, 15, 16, 17, 31, 33, 64, 100})
    for (bool with_f : {false, true})
      for (int special = 0; special < 3; ++special) {  // none, a NaN, everything below zero
        std::vector<float> x(n + 3, kPoison), f(n + 3, kPoison);
        for (std::size_t i = 0; i < n; ++i) {
          x[i + 1] = special == 2 ? -rng.uniform(1.0f, 5.0f) : rng.uniform(-5.0f, 5.0f);
          f[i + 1] = rng.uniform(0.25f, 2.0f);
        }
        if (special == 1 && n > 0) x[1 + n / 2] = std::numeric_limits<float>::quiet_NaN();
        const std::vector<float> x0 = x;
        const float c = -0.375f * (special == 2 ? -1.0f : 1.0f);
        const float got = table().scale_max(x.data() + 1, with_f ? f.data() + 1 : nullptr, c, n);
        float want = -std::numeric_limits<float>::infinity();
        bool nan = false;
        for (std::size_t i = 0; i < n; ++i) {
          const float v = (with_f ? x0[i + 1] * f[i + 1] : x0[i + 1]) * c;
          if (std::isnan(v)) {
            nan = true;
            ASSERT_TRUE(std::isnan(x[i + 1]));
          } else {
            ASSERT_EQ(bits_of(x[i + 1]), bits_of(v)) << "n=" << n << " at " << i;
          }
          want = std::max(want, v);
        }
        EXPECT_EQ(bits_of(x[0]), bits_of(kPoison));
        EXPECT_EQ(bits_of(x[n + 1]), bits_of(kPoison)) << "n=" << n;
        if (nan) EXPECT_TRUE(std::isnan(got)) << "n=" << n;
        else EXPECT_EQ(bits_of(got), bits_of(want)) << "n=" << n << " special " << special;
      }
}

// mask_select keeps exactly the lanes whose bit is set (NaN and inf included), writes fill
// elsewhere, and nothing past n; scale_round_bf16 is f32_to_bf16 of the f32 product, NaN quieted.
TEST_P(Gemm, MaskSelectAndScaleRoundFollowTheScalarDefinitions) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  constexpr float kPoison = -7.25e30f;
  std::mt19937 gen(17);
  for (std::size_t n : {0, 1, 5, 8, 16, 31, 32, 33, 63, 64, 100, 128, 129}) {
    std::vector<float> x(n + 2, kPoison);
    std::vector<std::uint32_t> bits((n + 31) / 32 + 1);
    for (auto& w : bits) w = static_cast<std::uint32_t>(gen());
    for (std::size_t i = 0; i < n; ++i) x[i + 1] = static_cast<float>(static_cast<int>(gen() % 2001) - 1000) / 7.0f;
    if (n > 2) x[2] = std::numeric_limits<float>::quiet_NaN();
    if (n > 3) x[3] = std::numeric_limits<float>::infinity();
    const std::vector<float> x0 = x;
    for (float fill : {-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()}) {
      x = x0;
      table().mask_select(x.data() + 1, bits.data(), n, fill);
      for (std::size_t i = 0; i < n; ++i) {
        const bool keep = (bits[i / 32] >> (i % 32)) & 1u;
        ASSERT_EQ(bits_of(x[i + 1]), bits_of(keep ? x0[i + 1] : fill)) << "n=" << n << " at " << i;
      }
      EXPECT_EQ(bits_of(x[0]), bits_of(kPoison));
      EXPECT_EQ(bits_of(x[n + 1]), bits_of(kPoison)) << "n=" << n;
    }
    x = x0;
    table().scale_round_bf16(x.data() + 1, n, 0.013f);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(bits_of(x[i + 1]), bits_of(bf16_to_f32(f32_to_bf16(x0[i + 1] * 0.013f)))) << "n=" << n << " at " << i;
    EXPECT_EQ(bits_of(x[n + 1]), bits_of(kPoison)) << "n=" << n;
  }
}

// exp(x - m) within 2 ulp of the exact value over the whole range that matters ([-86.5, 0], at
// every binade and densely near 0), 0 below, NaN kept; the returned sum within the f32 bound of
// the exact sum of what was stored; nothing past n touched.
TEST_P(Gemm, ExpSumIsWithinTwoUlp) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  Rng rng(31);
  std::vector<float> xs;
  for (int e = -30; e <= 6; ++e)
    for (int i = 0; i < 64; ++i) xs.push_back(-std::ldexp(1.0f + rng.uniform(0.0f, 1.0f), e));
  for (int i = 0; i < 4000; ++i) xs.push_back(rng.uniform(-86.5f, 0.0f));
  xs.push_back(0.0f);
  xs.push_back(-0.0f);
  xs.push_back(-86.5f);
  xs.push_back(-86.6f);
  xs.push_back(-100.0f);
  xs.push_back(-std::numeric_limits<float>::infinity());
  xs.push_back(std::numeric_limits<float>::quiet_NaN());
  for (float m : {0.0f, 3.5f, -1e3f}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{16}, std::size_t{17}, xs.size()}) {
      std::vector<float> x(n + 2, 1234.5f);
      for (std::size_t i = 0; i < n; ++i) x[i + 1] = xs[(i * 7 + n) % xs.size()] + m;
      const std::vector<float> x0 = x;
      const float sum = table().exp_sum(x.data() + 1, m, n);
      double exact_sum = 0;
      bool nan = false;
      for (std::size_t i = 0; i < n; ++i) {
        const float d = x0[i + 1] - m;  // exact here: m is a small integer or -1e3 with |x| <= 86.5
        const float got = x[i + 1];
        if (std::isnan(d)) {
          ASSERT_TRUE(std::isnan(got));
          nan = true;
          continue;
        }
        if (d < -86.5f) {
          ASSERT_EQ(got, 0.0f) << "exp(" << d << ")";
          continue;
        }
        const double want = std::exp(static_cast<double>(d));
        const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
        ASSERT_LE(std::fabs(got - want), 2.0 * ulp) << "exp(" << d << ") got " << got << " want " << want;
        exact_sum += got;
      }
      EXPECT_EQ(x[0], 1234.5f);
      EXPECT_EQ(x[n + 1], 1234.5f);
      if (nan) EXPECT_TRUE(std::isnan(sum));
      else EXPECT_LE(std::fabs(sum - exact_sum), (static_cast<double>(n) + 8.0) * 0x1p-24 * exact_sum) << "n=" << n;
    }
  }
}

// The bf16 P·V pieces (levels with a bf16 dot; null elsewhere): zip_rows_bf16 word by word with a
// missing second row as zeros, to_bf16_scaled bitwise against scalar rounding of the product,
// bf16_nn against exact sums over the zipped rows, every shape around the tile, odd k included
// (the unpaired last element of A alone), nothing outside the tile written.
TEST_P(Gemm, Bf16NnPiecesMatchTheirDefinitions) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& t = table();
  if (!t.bf16_dot) {
    EXPECT_EQ(t.bf16_nn, nullptr);
    EXPECT_EQ(t.zip_rows_bf16, nullptr);
    EXPECT_EQ(t.to_bf16_scaled, nullptr);
    EXPECT_EQ(t.bf16_nn_scaled, nullptr);
    EXPECT_EQ(t.pack_pairs_bf16, nullptr);
    return;
  }
  Rng rng(37);
  for (std::size_t n : {1, 5, 16, 31, 32, 33, 63, 64, 65, 100}) {
    std::vector<std::uint16_t> r0(n + 1), r1(n + 1);
    for (auto& x : r0) x = static_cast<std::uint16_t>(rng.below(65536));
    for (auto& x : r1) x = static_cast<std::uint16_t>(rng.below(65536));
    for (bool second : {false, true}) {
      std::vector<std::uint16_t> z(2 * n + 3, 0xA5A5);
      t.zip_rows_bf16(r0.data() + 1, second ? r1.data() + 1 : nullptr, n, z.data() + 1);
      EXPECT_EQ(z[0], 0xA5A5);
      for (std::size_t j = 0; j < n; ++j) {
        ASSERT_EQ(z[1 + 2 * j], r0[1 + j]) << "n=" << n << " j=" << j;
        ASSERT_EQ(z[2 + 2 * j], second ? r1[1 + j] : 0) << "n=" << n << " j=" << j;
      }
      EXPECT_EQ(z[2 * n + 1], 0xA5A5) << "n=" << n;
      EXPECT_EQ(z[2 * n + 2], 0xA5A5) << "n=" << n;
    }
    std::vector<float> x(n + 1), f(n + 1);
    for (auto& v : x) v = rng.uniform(-3.0f, 3.0f);
    for (auto& v : f) v = rng.uniform(0.001f, 500.0f);
    for (bool with_f : {false, true}) {
      std::vector<std::uint16_t> d(n + 2, 0xA5A5);
      t.to_bf16_scaled(x.data() + 1, with_f ? f.data() + 1 : nullptr, d.data() + 1, n);
      EXPECT_EQ(d[0], 0xA5A5);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(d[1 + i], f32_to_bf16(with_f ? x[1 + i] * f[1 + i] : x[1 + i])) << "n=" << n << " i=" << i;
      EXPECT_EQ(d[n + 1], 0xA5A5) << "n=" << n;
    }
  }
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
  std::size_t seed = 0;
  for (std::size_t m : {1, 5, 6, 7, 13})
    for (std::size_t n : {1, 15, 16, 17, 64, 65, 100})
      for (std::size_t k : {0, 1, 2, 3, 63, 64})
        for (bool acc : {false, true}) {
          ++seed;
          const std::size_t lda = k + 1 + seed % 3, kp = (k + 1) / 2, ldz = 2 * n + 2 * (seed % 3), ldc = n + 1;
          std::vector<std::uint16_t> a(m * lda + 2), b(k * n + 1), z(kp * ldz + 64, 0);
          for (auto& v : a) v = f32_to_bf16(rng.uniform(-2.0f, 2.0f));
          for (auto& v : b) v = f32_to_bf16(rng.uniform(-2.0f, 2.0f));
          for (std::size_t i = 0; i < m; ++i)
            if (k % 2) a[1 + i * lda + k] = 0x7FC0;  // past k: a NaN that must not count
          for (std::size_t q = 0; q < kp; ++q)
            t.zip_rows_bf16(b.data() + 2 * q * n, 2 * q + 1 < k ? b.data() + (2 * q + 1) * n : nullptr, n, z.data() + q * ldz);
          std::vector<float> c(m * ldc + 4, float_of(kGuard));
          for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < n; ++j) c[1 + i * ldc + j] = acc ? rng.uniform(-4.0f, 4.0f) : float_of(kGuard);
          const std::vector<float> c0 = c;
          t.bf16_nn(m, n, k, a.data() + 1, lda, z.data(), ldz, c.data() + 1, ldc, acc);
          for (std::size_t e = 0; e < c.size(); ++e) {
            const bool inside = e >= 1 && (e - 1) / ldc < m && (e - 1) % ldc < n;
            if (!inside) {
              ASSERT_EQ(bits_of(c[e]), kGuard) << "wrote outside the tile at " << e << ", m=" << m << " n=" << n << " k=" << k;
              continue;
            }
            const std::size_t i = (e - 1) / ldc, j = (e - 1) % ldc;
            double exact = acc ? c0[e] : 0.0, mag = std::fabs(exact);
            for (std::size_t p = 0; p < k; ++p) {
              const double prod = static_cast<double>(bf16_to_f32(a[1 + i * lda + p])) * bf16_to_f32(b[p * n + j]);
              exact += prod;
              mag += std::fabs(prod);
            }
            ASSERT_LE(std::fabs(c[e] - exact), 2.0 * (static_cast<double>(k) + 1.0) * 0x1p-24 * mag)
                << "m=" << m << " n=" << n << " k=" << k << " at (" << i << "," << j << ")" << (acc ? " +=" : "");
          }
        }
}

// f32_nn_scaled (every level) and bf16_nn_scaled (pair dot levels): the plain tile's sums (its
// bits, from zero) times rs[i]·cs[j], then added to C with one fused multiply-add (generic: a
// product and a sum): bit for bit,
// every shape around the tile, scales of every magnitude, NaN in a scale reaching only its row or
// column, nothing written outside the tile.
TEST_P(Gemm, NnScaledAppliesRowAndColumnScalesToEachSum) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& t = table();
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
  Rng rng(47);
  std::size_t seed = 0;
  const bool fused = GetParam() != Isa::generic;
  for (bool pairs : {false, true}) {
    if (pairs && !t.bf16_dot) continue;  // null there (checked with the other pair pieces)
    for (std::size_t m : {1, 5, 6, 7, 13})
      for (std::size_t n : {1, 15, 16, 17, 64, 65, 100})
        for (std::size_t k : {0, 1, 2, 63, 128})
          for (bool acc : {false, true}) {
            ++seed;
            const std::size_t lda = k + 1 + seed % 3, kp = pairs ? (k + 1) / 2 : k;
            const std::size_t ldb = (pairs ? 2 : 1) * n + 2 * (seed % 3), ldc = n + 1;
            std::vector<std::uint16_t> a16(m * lda + 2), b16(kp * ldb + 64);
            std::vector<float> a32(a16.size()), b32(b16.size());
            for (std::size_t e = 0; e < a16.size(); ++e) a32[e] = bf16_to_f32(a16[e] = f32_to_bf16(rng.uniform(-2.0f, 2.0f)));
            for (std::size_t e = 0; e < b16.size(); ++e) b32[e] = bf16_to_f32(b16[e] = f32_to_bf16(rng.uniform(-2.0f, 2.0f)));
            std::vector<float> rs(m + 1), cs(n + 1);
            for (auto& v : rs) v = std::ldexp(rng.uniform(1.0f, 2.0f), static_cast<int>(rng.below(40)) - 20);
            for (auto& v : cs) v = std::ldexp(rng.uniform(1.0f, 2.0f), static_cast<int>(rng.below(40)) - 20);
            if (seed % 5 == 0) rs[1 + (seed / 5) % m] = std::numeric_limits<float>::quiet_NaN();
            if (seed % 7 == 0) cs[1 + (seed / 7) % n] = std::numeric_limits<float>::quiet_NaN();
            std::vector<float> c(m * ldc + 4, float_of(kGuard));
            for (std::size_t i = 0; i < m; ++i)
              for (std::size_t j = 0; j < n; ++j) c[1 + i * ldc + j] = acc ? rng.uniform(-4.0f, 4.0f) : float_of(kGuard);
            const std::vector<float> c0 = c;
            std::vector<float> sums(m * ldc + 4, float_of(kGuard));
            if (pairs) {
              t.bf16_nn(m, n, k, a16.data() + 1, lda, b16.data(), ldb, sums.data() + 1, ldc, false);
              t.bf16_nn_scaled(m, n, k, a16.data() + 1, lda, b16.data(), ldb, rs.data() + 1, cs.data() + 1,
                               c.data() + 1, ldc, acc);
            } else {
              t.f32_nn(m, n, k, a32.data() + 1, lda, b32.data(), ldb, sums.data() + 1, ldc, false);
              t.f32_nn_scaled(m, n, k, a32.data() + 1, lda, b32.data(), ldb, rs.data() + 1, cs.data() + 1, c.data() + 1,
                              ldc, acc);
            }
            for (std::size_t e = 0; e < c.size(); ++e) {
              const bool inside = e >= 1 && (e - 1) / ldc < m && (e - 1) % ldc < n;
              if (!inside) {
                ASSERT_EQ(bits_of(c[e]), kGuard) << "wrote outside the tile at " << e << ", m=" << m << " n=" << n;
                continue;
              }
              const std::size_t i = (e - 1) / ldc, j = (e - 1) % ldc;
              const float f = rs[1 + i] * cs[1 + j];
              // generic has no fused multiply-add: a product and a sum.
              const float want = !acc ? f * sums[e] : fused ? std::fma(f, sums[e], c0[e]) : f * sums[e] + c0[e];
              if (std::isnan(want)) ASSERT_TRUE(std::isnan(c[e])) << "m=" << m << " n=" << n << " at (" << i << "," << j << ")";
              else
                ASSERT_EQ(bits_of(c[e]), bits_of(want))
                    << (pairs ? "bf16" : "f32") << " m=" << m << " n=" << n << " k=" << k << " at (" << i << "," << j << ")";
            }
          }
  }
}

// transpose_bf16 (every level) and pack_pairs_bf16 (pair dot levels) element by element against
// mlakit::f32_to_bf16 of the source: rows around the vector width, odd and even widths (a pair's
// missing last element 0), padded strides, values of every kind (ties, subnormals, NaN payloads);
// nothing of dst written outside the columns (pairs) x rows.
TEST_P(Gemm, TransposeAndPackRoundEveryElementIntoItsRow) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& t = table();
  Rng rng(53);
  for (std::size_t width : {1, 2}) {
    if (width == 2 && !t.bf16_dot) continue;  // null there (checked with the other pair pieces)
    for (std::size_t rows : {1, 7, 15, 16, 17, 33, 64})
      for (std::size_t n : {1, 2, 3, 32, 33, 128}) {
        const std::size_t ldx = n + rows % 3, slots = (n + width - 1) / width, ldd = rows + 1 + rows % 2;
        std::vector<float> x(rows * ldx + 1);
        for (std::size_t e = 0; e < x.size(); ++e) {
          std::uint32_t u = static_cast<std::uint32_t>(rng.below(65536)) << 16 | static_cast<std::uint32_t>(rng.below(65536));
          if (e % 3 == 1) u = (u & 0xFFFF0000u) | 0x8000u;
          if (e % 11 == 2) u &= 0x807FFFFFu;
          if (e % 13 == 3) u = (u & 0x807FFFFFu) | 0x7F800000u;
          x[e] = float_of(u);
        }
        std::vector<std::uint16_t> d(width * (slots * ldd + 2), 0xA5A5);
        if (width == 2) t.pack_pairs_bf16(x.data() + 1, ldx, rows, n, d.data() + 2, ldd);
        else t.transpose_bf16(x.data() + 1, ldx, rows, n, d.data() + 1, ldd);
        for (std::size_t w = 0; w < d.size(); ++w) {
          const std::size_t slot = w / width, e = w % width;
          if (slot == 0 || slot > slots * ldd || (slot - 1) % ldd >= rows) {
            ASSERT_EQ(d[w], 0xA5A5) << "wrote outside at " << w << ", width " << width << " rows=" << rows << " n=" << n;
            continue;
          }
          const std::size_t j = (slot - 1) / ldd, i = (slot - 1) % ldd, col = width * j + e;
          const std::uint16_t want = col < n ? f32_to_bf16(x[1 + i * ldx + col]) : 0;
          ASSERT_EQ(d[w], want) << "width " << width << " rows=" << rows << " n=" << n << " column " << j << " row " << i;
        }
      }
  }
}

// transpose_f32 and widen_bf16 (every level): each element's bits moved or widened, NaN payloads
// and signed zeros, infinities and subnormals included; rows around the vector width, padded
// strides, unaligned operands; nothing of dst written outside rows x n (columns of the transpose).
TEST_P(Gemm, TransposeF32AndWidenBf16MoveEveryElementsBits) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& t = table();
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
  Rng rng(59);
  auto any_bits = [&](std::size_t e) {
    std::uint32_t u = static_cast<std::uint32_t>(rng.below(65536)) << 16 | static_cast<std::uint32_t>(rng.below(65536));
    if (e % 11 == 2) u &= 0x807FFFFFu;                          // subnormal or zero
    if (e % 13 == 3) u = (u & 0x807FFFFFu) | 0x7F800000u;       // infinity or NaN with a payload
    return u;
  };
  for (std::size_t rows : {1, 7, 15, 16, 17, 33, 64})
    for (std::size_t n : {1, 2, 3, 32, 33, 128}) {
      const std::size_t ldx = n + rows % 3, ldd = rows + 1 + rows % 2;
      std::vector<std::uint32_t> x(rows * ldx + 1);
      for (std::size_t e = 0; e < x.size(); ++e) x[e] = any_bits(e);
      std::vector<std::uint32_t> d(n * ldd + 2, kGuard);
      t.transpose_f32(reinterpret_cast<const float*>(x.data()) + 1, ldx, rows, n, reinterpret_cast<float*>(d.data()) + 1,
                      ldd);
      for (std::size_t w = 0; w < d.size(); ++w) {
        if (w == 0 || w > n * ldd || (w - 1) % ldd >= rows) {
          ASSERT_EQ(d[w], kGuard) << "wrote outside at " << w << " rows=" << rows << " n=" << n;
          continue;
        }
        const std::size_t j = (w - 1) / ldd, i = (w - 1) % ldd;
        ASSERT_EQ(d[w], x[1 + i * ldx + j]) << "rows=" << rows << " n=" << n << " column " << j << " row " << i;
      }
    }
  for (std::size_t n : {0, 1, 7, 15, 16, 17, 31, 32, 33, 576}) {
    std::vector<std::uint16_t> x(n + 1);
    for (std::size_t e = 0; e < x.size(); ++e) x[e] = static_cast<std::uint16_t>(any_bits(e) >> 16);
    std::vector<std::uint32_t> d(n + 2, kGuard);
    t.widen_bf16(x.data() + 1, reinterpret_cast<float*>(d.data()) + 1, n);
    for (std::size_t w = 0; w < d.size(); ++w) {
      if (w == 0 || w > n) ASSERT_EQ(d[w], kGuard) << "wrote outside at " << w << " n=" << n;
      else ASSERT_EQ(d[w], static_cast<std::uint32_t>(x[w]) << 16) << "n=" << n << " element " << w - 1;
    }
  }
}

// Block-scaled bf16 x fp8 (the bf16 dot levels): against the exact scaled sums within the derived
// bound, for blocks that are and are not whole vector steps and a partial last block, with
// unaligned operands and padded strides, nothing written outside the tile; each row alone (a
// decode token) gets the bits it gets among all rows; a NaN code poisons exactly its column.
TEST_P(Gemm, Bf16F8BlockScaledMatchesExactScaledSums) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& t = table();
  if (!t.bf16_dot) {
    EXPECT_EQ(t.bf16_f8_block_scaled, nullptr);
    return;
  }
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
  Rng rng(41);
  std::size_t seed = 0;
  for (std::size_t block : {32, 48, 128})
    for (std::size_t m : {1, 2, 5, 6, 7, 13})
      for (std::size_t n : {1, 3, 4, 5, 9})
        for (std::size_t k : {0, 1, 31, 32, 33, 127, 128, 129, 300})
          for (bool acc : {false, true}) {
            const Problem p{m, n, k};
            const auto cs = make_case<std::uint16_t, std::uint8_t>(p, ++seed);
            const std::size_t blocks = (k + block - 1) / block;
            std::vector<float> scales(blocks + 1);
            for (auto& v : scales) v = rng.uniform(-0.5f, 0.5f) * std::ldexp(1.0f, -static_cast<int>(rng.below(12)));
            std::vector<float> c(1 + m * cs.ldc + 4, float_of(kGuard));
            for (std::size_t i = 0; i < m; ++i)
              for (std::size_t j = 0; j < n; ++j) c[1 + i * cs.ldc + j] = acc ? rng.uniform(-4.0f, 4.0f) : float_of(kGuard);
            const std::vector<float> c0 = c;
            t.bf16_f8_block_scaled(m, n, k, cs.a.data() + cs.a_off, cs.lda, cs.b.data() + cs.b_off, cs.ldb,
                                   scales.data(), block, c.data() + 1, cs.ldc, acc);
            for (std::size_t e = 0; e < c.size(); ++e) {
              const bool inside = e >= 1 && (e - 1) / cs.ldc < m && (e - 1) % cs.ldc < n;
              if (!inside) {
                ASSERT_EQ(bits_of(c[e]), kGuard) << "wrote outside the tile at " << e << ", m=" << m << " n=" << n;
                continue;
              }
              const std::size_t i = (e - 1) / cs.ldc, j = (e - 1) % cs.ldc;
              double exact = acc ? c0[e] : 0.0, mag = std::fabs(exact);
              for (std::size_t q = 0; q < k; ++q) {
                const double prod = static_cast<double>(scales[q / block]) * value(cs.a[cs.a_off + i * cs.lda + q]) *
                                    value(cs.b[cs.b_off + j * cs.ldb + q]);
                exact += prod;
                mag += std::fabs(prod);
              }
              // Derived bound: the pair-dot chains over k/32 steps (two roundings each), one FMA per
              // block, the lane reduction and the final add.
              const double bound = 2.0 * (static_cast<double>(k) + static_cast<double>(blocks) + 8.0) * 0x1p-24 * mag;
              ASSERT_LE(std::fabs(c[e] - exact), bound) << "block=" << block << " m=" << m << " n=" << n << " k=" << k
                                                        << " at (" << i << "," << j << ")" << (acc ? " +=" : "");
            }
            if (acc || m == 1) continue;
            for (std::size_t i = 0; i < m; ++i) {  // one row at a time
              std::vector<float> row(n);
              t.bf16_f8_block_scaled(1, n, k, cs.a.data() + cs.a_off + i * cs.lda, cs.lda, cs.b.data() + cs.b_off,
                                     cs.ldb, scales.data(), block, row.data(), n, false);
              for (std::size_t j = 0; j < n; ++j)
                ASSERT_EQ(bits_of(row[j]), bits_of(c[1 + i * cs.ldc + j])) << "row " << i << " alone, k=" << k;
            }
          }
  // Every code, the two NaN codes included: a NaN code makes its column NaN and nothing else.
  const std::size_t k = 300, n = 4;
  std::vector<std::uint16_t> a(k);
  for (auto& v : a) v = f32_to_bf16(rng.uniform(0.5f, 1.0f));
  std::vector<std::uint8_t> b(n * k);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i % 256);
  for (std::size_t i = 0; i < b.size(); ++i)
    if ((b[i] & 0x7F) == 0x7F && i / k != 2) b[i] = 0;
  const std::vector<float> scales(3, 0.25f);
  std::vector<float> c(n);
  t.bf16_f8_block_scaled(1, n, k, a.data(), k, b.data(), k, scales.data(), 128, c.data(), n, false);
  for (std::size_t j = 0; j < n; ++j) EXPECT_EQ(std::isnan(c[j]), j == 2) << "column " << j;
}

// The panel GEMM: every output is one chain over p in order, started from C when accumulating:
// a fused multiply-add per step on the FMA levels (the bits of std::fma applied in order), a
// product and a sum on generic; within the chain's bound of the exact sum; shapes around the
// register tile (rows) and the panel's two vectors (columns), k from 0 to past the callers'
// chunk, padded and unaligned operands, NaN and infinite inputs; nothing written outside the tile.
TEST_P(Gemm, PanelGemmIsOneChainPerOutput) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& g = table();
  const std::size_t pc = g.panel_cols, pr = g.panel_rows, half = pc / 2;
  ASSERT_EQ(pc % 2, 0u);
  const bool fused = GetParam() != Isa::generic;
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
  Rng rng(53);
  std::size_t seed = 0;
  for (std::size_t m : {std::size_t{1}, std::size_t{2}, pr - 1, pr, pr + 1, 2 * pr + 3})
    for (std::size_t n : {std::size_t{1}, half - 1, half, half + 1, pc - 1, pc})
      for (std::size_t k : {0, 1, 7, 64, 65, 300})
        for (bool acc : {false, true}) {
          ++seed;
          SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) + (acc ? " +=" : " ="));
          const std::size_t lda = k + seed % 3, ldb = k + 1 + seed % 4, ldc = n + seed % 3, off = 1 + seed % 3;
          std::vector<float> a(off + m * lda + 4), b(off + n * ldb + 4);
          for (auto& x : a) x = rng.uniform(-2.0f, 2.0f);
          for (auto& x : b) x = rng.uniform(-2.0f, 2.0f);
          if (seed % 9 == 0 && k) a[off + rng.below(m) * lda + rng.below(k)] = std::numeric_limits<float>::quiet_NaN();
          if (seed % 13 == 0 && k) b[off + rng.below(n) * ldb + rng.below(k)] = std::numeric_limits<float>::infinity();
          std::vector<float> panel(pc * k + 1, float_of(kGuard));
          g.pack_panel_f32(b.data() + off, ldb, n, k, panel.data());
          std::vector<float> c = guarded_c(rng, off, m, n, ldc, acc, kGuard);
          const std::vector<float> c0 = c;
          g.gemm_panel(m, n, k, a.data() + off, lda, panel.data(), c.data() + off, ldc, acc);
          for (std::size_t e = 0; e < c.size(); ++e) {
            if (!in_tile(e, off, m, n, ldc)) {
              ASSERT_EQ(bits_of(c[e]), kGuard) << "wrote outside the tile at " << e;
              continue;
            }
            const std::size_t i = (e - off) / ldc, j = (e - off) % ldc;
            float chain = acc ? c0[e] : 0.0f;
            double exact = acc ? c0[e] : 0.0, mag = std::fabs(exact);
            for (std::size_t p = 0; p < k; ++p) {
              const float x = a[off + i * lda + p], w = b[off + j * ldb + p];
              if (fused) {
                chain = std::fma(x, w, chain);
              } else {
                const volatile float prod = x * w;  // two roundings, as generic's multiply and add
                chain = chain + prod;
              }
              exact += static_cast<double>(x) * w;
              mag += std::fabs(static_cast<double>(x) * w);
            }
            if (std::isnan(chain)) {
              ASSERT_TRUE(std::isnan(c[e])) << "at (" << i << "," << j << ")";
              continue;
            }
            ASSERT_EQ(bits_of(c[e]), bits_of(chain)) << "at (" << i << "," << j << "): not the chain in order";
            if (std::isfinite(exact)) {
              ASSERT_LE(std::fabs(c[e] - exact), 2.0 * (static_cast<double>(k) + 1.0) * 0x1p-24 * mag);
            }
          }
        }
}

// The fp8 weight panel: every element the exact decode of its code times its block's scale,
// rounded once (the reference's code·scale), for all 256 codes (NaN codes NaN), blocks of k that
// are and are not multiples of 8 (the vector path and the element path), k past a multiple of 8,
// partial panels (missing columns zero); nothing written past the panel.
TEST_P(Gemm, PanelOfFp8WeightsIsCodeTimesBlockScale) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& g = table();
  ASSERT_TRUE(g.pack_panel_f8_scaled);
  const std::size_t pc = g.panel_cols;
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
  Rng rng(73);
  std::size_t seed = 0;
  for (std::size_t cols : {std::size_t{1}, pc / 2 + 1, pc})
    for (std::size_t k : {1, 8, 65, 300})
      for (std::size_t block : {8, 128, 5}) {
        ++seed;
        SCOPED_TRACE("cols=" + std::to_string(cols) + " k=" + std::to_string(k) + " block=" + std::to_string(block));
        const std::size_t ldb = k + seed % 5;
        std::vector<std::uint8_t> b(cols * ldb);
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>((i * 37 + seed) % 256);
        std::vector<float> scales((k + block - 1) / block);
        for (auto& s : scales) s = rng.uniform(0.001f, 3.0f);
        std::vector<float> panel(pc * k + 8, float_of(kGuard));
        g.pack_panel_f8_scaled(b.data(), ldb, cols, k, scales.data(), block, panel.data());
        for (std::size_t e = 0; e < panel.size(); ++e) {
          if (e >= pc * k) {
            ASSERT_EQ(bits_of(panel[e]), kGuard) << "wrote past the panel at " << e;
            continue;
          }
          const std::size_t p = e / pc, j = e % pc;
          const float want = j < cols ? f8e4m3_to_f32(b[j * ldb + p]) * scales[p / block] : 0.0f;
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(panel[e])) << "column " << j << ", p " << p;
          } else {
            ASSERT_EQ(bits_of(panel[e]), bits_of(want)) << "column " << j << ", p " << p << ", code " << (j < cols ? int(b[j * ldb + p]) : -1);
          }
        }
      }
  // Every case of 256 elements or more holds every code (37 is odd: i * 37 runs through all
  // residues mod 256).
}

// The packed-rows panel GEMM: pack_rows_* lays rows out in groups of panel_rows (element (r, p) of
// a group at p * panel_rows + r, missing rows zero, nothing written past round_up(m) * k), and
// gemm_panel_packed gives gemm_panel's bits over the same rows (the same chains), from f32 and from
// bf16 rows, around the register tile and the panel, k past a multiple of 8 and NaN inputs;
// nothing written outside the tile.
TEST_P(Gemm, PanelGemmPackedRowsGiveTheRowsBits) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& g = table();
  const std::size_t pc = g.panel_cols, pr = g.panel_rows, half = pc / 2;
  ASSERT_TRUE(g.pack_rows_f32 && g.pack_rows_bf16 && g.gemm_panel_packed);
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
  Rng rng(71);
  std::size_t seed = 0;
  for (std::size_t m : {std::size_t{1}, pr - 1, pr, pr + 1, 2 * pr + 3})
    for (std::size_t n : {std::size_t{1}, half + 1, pc})
      for (std::size_t k : {0, 1, 7, 8, 65, 256})
        for (bool bf16_rows : {false, true})
          for (bool acc : {false, true}) {
            ++seed;
            SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                         (bf16_rows ? " bf16" : " f32") + (acc ? " +=" : " ="));
            const std::size_t lda = k + seed % 3, ldc = n + seed % 3, off = 1 + seed % 3;
            std::vector<float> a(off + m * lda + 4), b(n * k + 1);
            std::vector<std::uint16_t> a16(a.size());
            for (std::size_t i = 0; i < a.size(); ++i) {
              a16[i] = f32_to_bf16(rng.uniform(-2.0f, 2.0f));
              a[i] = bf16_rows ? bf16_to_f32(a16[i]) : rng.uniform(-2.0f, 2.0f);
            }
            for (auto& x : b) x = rng.uniform(-2.0f, 2.0f);
            if (seed % 7 == 0 && k) {
              const std::size_t at = off + rng.below(m) * lda + rng.below(k);
              a[at] = std::numeric_limits<float>::quiet_NaN();
              a16[at] = 0x7FC0;
            }
            std::vector<float> panel(pc * k + 1, float_of(kGuard));
            g.pack_panel_f32(b.data(), k, n, k, panel.data());
            const std::size_t packed = (m + pr - 1) / pr * pr * k;
            std::vector<float> ap(packed + 8, float_of(kGuard));
            if (bf16_rows) g.pack_rows_bf16(a16.data() + off, lda, m, k, ap.data());
            else g.pack_rows_f32(a.data() + off, lda, m, k, ap.data());
            for (std::size_t e = 0; e < ap.size(); ++e) {
              if (e >= packed) {
                ASSERT_EQ(bits_of(ap[e]), kGuard) << "packed past the groups at " << e;
                continue;
              }
              const std::size_t grp = e / (pr * k), p = e % (pr * k) / pr, r = grp * pr + e % pr;
              const float want = r < m ? a[off + r * lda + p] : 0.0f;
              ASSERT_EQ(std::isnan(ap[e]), std::isnan(want)) << "row " << r << ", p " << p;
              if (!std::isnan(want)) {
                ASSERT_EQ(bits_of(ap[e]), bits_of(want)) << "row " << r << ", p " << p;
              }
            }
            std::vector<float> c = guarded_c(rng, off, m, n, ldc, acc, kGuard);
            std::vector<float> want = c;
            g.gemm_panel(m, n, k, a.data() + off, lda, panel.data(), want.data() + off, ldc, acc);
            g.gemm_panel_packed(m, n, k, ap.data(), panel.data(), c.data() + off, ldc, acc);
            for (std::size_t e = 0; e < c.size(); ++e) {
              if (!in_tile(e, off, m, n, ldc)) {
                ASSERT_EQ(bits_of(c[e]), kGuard) << "wrote outside the tile at " << e;
              } else if (std::isnan(want[e])) {
                ASSERT_TRUE(std::isnan(c[e])) << "at " << e;
              } else {
                ASSERT_EQ(bits_of(c[e]), bits_of(want[e])) << "at " << e << ": not gemm_panel's bits";
              }
            }
          }
}

// The scaled panel GEMM: each output is the plain chain from zero, then (rs·cs) applied by one
// fused multiply-add onto C (a product and a sum on generic), exactly as f32_nn_scaled over the
// same B, whose bits the block-scaled projections had before they moved onto panels; shapes around
// the register tile and the panel, NaN and zero scales; nothing written outside the tile.
TEST_P(Gemm, PanelGemmScaledIsTheChainThenOneScaledAdd) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& g = table();
  const std::size_t pc = g.panel_cols, pr = g.panel_rows, half = pc / 2;
  const bool fused = GetParam() != Isa::generic;
  constexpr std::uint32_t kGuard = 0x7FA5A5A5u;
  Rng rng(67);
  std::size_t seed = 0;
  for (std::size_t m : {std::size_t{1}, pr - 1, pr, pr + 1, 2 * pr + 3})
    for (std::size_t n : {std::size_t{1}, half - 1, half + 1, pc})
      for (std::size_t k : {0, 1, 65, 128})
        for (bool acc : {false, true}) {
          ++seed;
          SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) + (acc ? " +=" : " ="));
          const std::size_t lda = k + seed % 3, ldc = n + seed % 3, off = 1 + seed % 3;
          std::vector<float> a(off + m * lda + 4), b(n * k + 1), bnn(k * n + 1), rs(m), cs(n);
          for (auto& x : a) x = rng.uniform(-2.0f, 2.0f);
          for (auto& x : b) x = rng.uniform(-2.0f, 2.0f);
          for (auto& x : rs) x = rng.uniform(0.01f, 3.0f);
          for (auto& x : cs) x = rng.uniform(0.01f, 3.0f);
          if (seed % 7 == 0) rs[rng.below(m)] = std::numeric_limits<float>::quiet_NaN();
          if (seed % 5 == 0) cs[rng.below(n)] = 0.0f;
          for (std::size_t j = 0; j < n; ++j)
            for (std::size_t p = 0; p < k; ++p) bnn[p * n + j] = b[j * k + p];
          std::vector<float> panel(pc * k + 1);
          g.pack_panel_f32(b.data(), k, n, k, panel.data());
          std::vector<float> c = guarded_c(rng, off, m, n, ldc, acc, kGuard);
          std::vector<float> nn = c;
          const std::vector<float> c0 = c;
          g.gemm_panel_scaled(m, n, k, a.data() + off, lda, panel.data(), rs.data(), cs.data(), c.data() + off, ldc, acc);
          g.f32_nn_scaled(m, n, k, a.data() + off, lda, bnn.data(), n, rs.data(), cs.data(), nn.data() + off, ldc, acc);
          for (std::size_t e = 0; e < c.size(); ++e) {
            if (!in_tile(e, off, m, n, ldc)) {
              ASSERT_EQ(bits_of(c[e]), kGuard) << "wrote outside the tile at " << e;
              continue;
            }
            const std::size_t i = (e - off) / ldc, j = (e - off) % ldc;
            float chain = 0.0f;
            for (std::size_t p = 0; p < k; ++p) {
              const float x = a[off + i * lda + p], w = b[j * k + p];
              if (fused) {
                chain = std::fma(x, w, chain);
              } else {
                const volatile float prod = x * w;
                chain = chain + prod;
              }
            }
            const float f = rs[i] * cs[j];
            float want;
            if (!acc) {
              want = f * chain;
            } else if (fused) {
              want = std::fma(f, chain, c0[e]);
            } else {
              const volatile float prod = f * chain;
              want = c0[e] + prod;
            }
            if (std::isnan(want)) {
              ASSERT_TRUE(std::isnan(c[e])) << "at (" << i << "," << j << ")";
              ASSERT_TRUE(std::isnan(nn[e])) << "at (" << i << "," << j << ")";
              continue;
            }
            ASSERT_EQ(bits_of(c[e]), bits_of(want)) << "at (" << i << "," << j << "): not the chain, then one scaled add";
            ASSERT_EQ(bits_of(c[e]), bits_of(nn[e])) << "at (" << i << "," << j << "): not f32_nn_scaled's bits";
          }
        }
}

// A row's outputs do not depend on the other rows of the call or on where the row sits among them,
// and k cut into two calls (the second accumulating over a panel of the rest) gives the bits of one
// call: the properties that make the operators' results independent of tiles and threads.
TEST_P(Gemm, PanelGemmRowsAndSplitsOfKGiveTheBitsOfOneCall) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& g = table();
  const std::size_t pc = g.panel_cols, m = 2 * g.panel_rows + 5, k = 257, n = pc - 1;
  Rng rng(59);
  std::vector<float> a(m * k), b(n * k);
  for (auto& x : a) x = rng.uniform(-2.0f, 2.0f);
  for (auto& x : b) x = rng.uniform(-2.0f, 2.0f);
  std::vector<float> panel(pc * k), lo(pc * 100), hi(pc * (k - 100));
  g.pack_panel_f32(b.data(), k, n, k, panel.data());
  g.pack_panel_f32(b.data(), k, n, 100, lo.data());
  g.pack_panel_f32(b.data() + 100, k, n, k - 100, hi.data());
  std::vector<float> whole(m * n), split(m * n), alone(n);
  g.gemm_panel(m, n, k, a.data(), k, panel.data(), whole.data(), n, false);
  g.gemm_panel(m, n, 100, a.data(), k, lo.data(), split.data(), n, false);
  g.gemm_panel(m, n, k - 100, a.data() + 100, k, hi.data(), split.data(), n, true);
  for (std::size_t e = 0; e < whole.size(); ++e) ASSERT_EQ(bits_of(split[e]), bits_of(whole[e])) << "k split, at " << e;
  for (std::size_t i = 0; i < m; ++i) {
    g.gemm_panel(1, n, k, a.data() + i * k, k, panel.data(), alone.data(), n, false);
    for (std::size_t j = 0; j < n; ++j) ASSERT_EQ(bits_of(alone[j]), bits_of(whole[i * n + j])) << "row " << i << " alone, column " << j;
  }
}

// The panel's packers and the int4 expansion follow their definitions element by element: every
// bf16 pattern kind (NaN, infinities, subnormals) widened exactly, the columns past `cols` zero;
// int4 codes looked up in their column's and group's table for every group size, as rows and
// straight into panels.
TEST_P(Gemm, PanelPackersAndInt4RowsFollowTheirDefinitions) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& g = table();
  const std::size_t pc = g.panel_cols;
  Rng rng(61);
  for (std::size_t cols : {std::size_t{1}, pc / 2, pc - 1, pc})
    for (std::size_t k : {1, 9, 256}) {
      const std::size_t ldb = k + 3;
      std::vector<float> b32(cols * ldb);
      std::vector<std::uint16_t> b16(cols * ldb);
      for (auto& x : b32) x = rng.uniform(-3.0f, 3.0f);
      for (auto& x : b16) x = static_cast<std::uint16_t>(rng.below(1u << 16));  // every pattern kind
      std::vector<float> p32(pc * k, 7.0f), p16(pc * k, 7.0f);
      g.pack_panel_f32(b32.data(), ldb, cols, k, p32.data());
      g.pack_panel_bf16(b16.data(), ldb, cols, k, p16.data());
      for (std::size_t p = 0; p < k; ++p)
        for (std::size_t j = 0; j < pc; ++j) {
          const float want32 = j < cols ? b32[j * ldb + p] : 0.0f;
          const std::uint32_t want16 = j < cols ? std::uint32_t(b16[j * ldb + p]) << 16 : 0u;
          ASSERT_EQ(bits_of(p32[p * pc + j]), bits_of(want32)) << "f32 cols=" << cols << " k=" << k << " at " << p << "," << j;
          ASSERT_EQ(bits_of(p16[p * pc + j]), want16) << "bf16 cols=" << cols << " k=" << k << " at " << p << "," << j;
        }
    }
  for (std::size_t gs : {32, 64, 128})
    for (std::size_t n : {1, 5, 16, 17, 35})
      for (std::size_t k : {8, 32, 136, 256}) {
        const std::size_t groups = (k + gs - 1) / gs, ldw = n + 2, ldr = k + 1;
        std::vector<std::uint32_t> words((k / 8) * ldw);
        for (auto& w : words) w = static_cast<std::uint32_t>(rng.below(1u << 16)) << 16 | static_cast<std::uint32_t>(rng.below(1u << 16));
        std::vector<float> tables(n * groups * 16);
        for (auto& t : tables) t = round_to_bf16(rng.uniform(-3.0f, 3.0f));
        tables[rng.below(tables.size())] = std::numeric_limits<float>::quiet_NaN();
        const simd::Int4Columns cols{words.data(), ldw, tables.data(), gs};
        std::vector<float> rows(n * ldr, 7.0f);
        g.int4_rows_f32(cols, n, k, rows.data(), ldr);
        for (std::size_t j = 0; j < n; ++j) {
          for (std::size_t p = 0; p < k; ++p) {
            const std::uint32_t q = (words[(p / 8) * ldw + j] >> (4 * (p % 8))) & 0xFu;
            ASSERT_EQ(bits_of(rows[j * ldr + p]), bits_of(tables[(j * groups + p / gs) * 16 + q]))
                << "gs=" << gs << " n=" << n << " k=" << k << " at " << j << "," << p;
          }
          ASSERT_EQ(rows[j * ldr + k], 7.0f) << "wrote past k";
        }
        // The panel formed straight from the codes: the panels of those rows, bit for bit (NaN
        // too), missing columns zero, nothing past the panel.
        for (std::size_t c0 = 0; c0 < n; c0 += pc) {
          const std::size_t w = std::min(pc, n - c0);
          const simd::Int4Columns part{words.data() + c0, ldw, tables.data() + c0 * groups * 16, gs};
          std::vector<float> direct(pc * k + 4, 7.0f), via_rows(pc * k, 7.0f);
          g.pack_panel_int4(part, w, k, direct.data());
          g.pack_panel_f32(rows.data() + c0 * ldr, ldr, w, k, via_rows.data());
          for (std::size_t e = 0; e < pc * k; ++e)
            ASSERT_EQ(bits_of(direct[e]), bits_of(via_rows[e]))
                << "gs=" << gs << " n=" << n << " k=" << k << " panel at " << c0 << ", p " << e / pc << ", column " << e % pc;
          for (std::size_t e = pc * k; e < direct.size(); ++e) ASSERT_EQ(direct[e], 7.0f) << "wrote past the panel";
        }
      }
}

// int4_regroup: every out nibble is the code of the channel its order names, for column counts
// around the vector widths (1 .. 33) and orders that are permutations of K (act-order GPTQ's) or
// repeat channels; the words past n in each out row are left as they were.
TEST_P(Gemm, Int4RegroupTakesEachCodeFromTheChannelItsOrderNames) {
  MLAKIT_SKIP_UNLESS_CPU_RUNS(GetParam());
  const simd::GemmKernels& g = table();
  ASSERT_NE(g.int4_regroup, nullptr);
  Rng rng(41);
  for (std::size_t n : {1, 7, 8, 9, 16, 17, 33})
    for (std::size_t k : {8, 64, 136})
      for (bool permutation : {true, false}) {
        const std::size_t ldw = n + 3, ldo = n + 2, rows = k / 8;
        std::vector<std::uint32_t> words(rows * ldw);
        for (auto& w : words) w = static_cast<std::uint32_t>(rng.below(1u << 16)) << 16 | static_cast<std::uint32_t>(rng.below(1u << 16));
        std::vector<std::uint32_t> order(k);
        for (std::size_t i = 0; i < k; ++i) order[i] = static_cast<std::uint32_t>(permutation ? i : rng.below(static_cast<std::uint32_t>(k)));
        if (permutation)
          for (std::size_t i = k - 1; i > 0; --i) std::swap(order[i], order[rng.below(static_cast<std::uint32_t>(i + 1))]);
        std::vector<std::uint32_t> out(rows * ldo, 0xA5A5A5A5u);
        g.int4_regroup(words.data(), ldw, order.data(), rows, n, out.data(), ldo);
        for (std::size_t r = 0; r < rows; ++r) {
          for (std::size_t j = 0; j < n; ++j)
            for (std::size_t i = 0; i < 8; ++i) {
              const std::uint32_t c = order[8 * r + i];
              const std::uint32_t want = (words[(c / 8) * ldw + j] >> (4 * (c % 8))) & 0xFu;
              ASSERT_EQ((out[r * ldo + j] >> (4 * i)) & 0xFu, want)
                  << "n=" << n << " k=" << k << " row " << r << " column " << j << " nibble " << i;
            }
          for (std::size_t j = n; j < ldo; ++j) ASSERT_EQ(out[r * ldo + j], 0xA5A5A5A5u) << "wrote past n";
        }
      }
}

TEST_P(Gemm, TableDescribesItself) {
  const simd::GemmKernels& t = table();
  EXPECT_STREQ(t.level, isa_name(GetParam()));
  EXPECT_GE(t.mr, 1u);
  EXPECT_EQ(t.nr, 4u);
  EXPECT_EQ(t.bf16_dot, GetParam() >= Isa::avx512bf16);
  EXPECT_GE(t.panel_rows, 1u);
  EXPECT_GE(t.panel_cols, 8u);
  EXPECT_EQ(t.panel_cols % 8, 0u);
  EXPECT_TRUE(t.pack_panel_f32 && t.pack_panel_bf16 && t.gemm_panel && t.gemm_panel_scaled && t.split_bf16x3 && t.int4_rows_f32);
  EXPECT_TRUE(t.pack_rows_f32 && t.pack_rows_bf16 && t.gemm_panel_packed && t.pack_panel_f8_scaled && t.pack_panel_int4);
}

INSTANTIATE_TEST_SUITE_P(Levels, Gemm, ::testing::ValuesIn(levels_of("gemm")), level_param_name);

}  // namespace
}  // namespace mlakit::kernel_tests
