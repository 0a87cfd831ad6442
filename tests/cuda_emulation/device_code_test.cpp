// The cuda back-end's shared device code on the CPU emulation: the tensor-core fragment loaders
// against a plain matrix product, ldmatrix against the element loaders, cp.async's groups, the
// warpgroup products' descriptor and layouts, the block-wide top-k against a sort with the spec's
// order, and the emulator's own rules (a barrier in divergent code, a copy or a product never
// waited for, ldmatrix on global memory, an operand overwritten under a product are reported).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/async_copy.cuh"
#include "cuda/common.cuh"
#include "cuda/mma.cuh"
#include "cuda/topk.cuh"
#include "cuda/wgmma.cuh"
#include "cuda_runtime.h"

namespace mlakit::cuda {
namespace {

// ---- fragments ---------------------------------------------------------------------------------
// C[16x8] = A[16x16]·B[16x8] with A row-major (ld 24), B given twice: n-major (B[k][n] = Bn[n][k],
// ld 24) and k-major (B[k][n] = Bk[k][n], ld 16).
__global__ void fragment_kernel(const std::uint16_t* a, const std::uint16_t* bn, const std::uint16_t* bk, float* c_n,
                                float* c_k) {
  __shared__ std::uint16_t As[16 * 24], Bns[8 * 24], Bks[16 * 16];
  for (int i = threadIdx.x; i < 16 * 24; i += 32) As[i] = a[i];
  for (int i = threadIdx.x; i < 8 * 24; i += 32) Bns[i] = bn[i];
  for (int i = threadIdx.x; i < 16 * 16; i += 32) Bks[i] = bk[i];
  __syncthreads();
  std::uint32_t af[4], b1[2], b2[2];
  load_a_rowmajor(af, As, 24, 0, 0);
  load_b_nmajor(b1, Bns, 24, 0, 0);
  load_b_kmajor(b2, Bks, 16, 0, 0);
  float d1[4] = {0, 0, 0, 0}, d2[4] = {1, 1, 1, 1};  // d2 starts at 1: the accumulator is added
  mma_bf16_16816(d1, af, b1);
  mma_bf16_16816(d2, af, b2);
  const int lane = threadIdx.x, g = lane >> 2, q = lane & 3;
  c_n[g * 8 + 2 * q] = d1[0];
  c_n[g * 8 + 2 * q + 1] = d1[1];
  c_n[(g + 8) * 8 + 2 * q] = d1[2];
  c_n[(g + 8) * 8 + 2 * q + 1] = d1[3];
  c_k[g * 8 + 2 * q] = d2[0];
  c_k[g * 8 + 2 * q + 1] = d2[1];
  c_k[(g + 8) * 8 + 2 * q] = d2[2];
  c_k[(g + 8) * 8 + 2 * q + 1] = d2[3];
}

TEST(DeviceCode, FragmentLoadersComputeTheMatrixProduct) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-8, 8);
  // Small integers: every product and sum is exact, so the comparison is exact.
  auto bf = [](int v) { return f32_to_bf16(static_cast<float>(v)); };
  std::vector<int> A(16 * 16), B(16 * 8);
  for (int& v : A) v = small(rng);
  for (int& v : B) v = small(rng);
  std::vector<std::uint16_t> a(16 * 24, 0), bn(8 * 24, 0), bk(16 * 16, 0);
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k) a[i * 24 + k] = bf(A[i * 16 + k]);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) {
      bn[n * 24 + k] = bf(B[k * 8 + n]);
      bk[k * 16 + n] = bf(B[k * 8 + n]);
    }
  std::vector<float> c_n(128, -1), c_k(128, -1);
  mlakit_cuda_emu::launch(fragment_kernel, dim3(1), dim3(32), 0, nullptr, a.data(), bn.data(), bk.data(), c_n.data(),
                          c_k.data());
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n) {
      int s = 0;
      for (int k = 0; k < 16; ++k) s += A[i * 16 + k] * B[k * 8 + n];
      EXPECT_EQ(c_n[i * 8 + n], static_cast<float>(s)) << i << "," << n;
      EXPECT_EQ(c_k[i * 8 + n], static_cast<float>(s + 1)) << i << "," << n;
    }
}

// ---- ldmatrix ------------------------------------------------------------------------------------
// A 32 x 40 bf16 tile (ld 40) in dynamic shared memory; every lane writes the registers that the
// element loaders (load_a_rowmajor, load_b_nmajor, load_b_kmajor) and ldmatrix give for the same
// fragments: 12 words a lane from each.
__global__ void ldmatrix_kernel(const std::uint16_t* tile, int m0, int k0, std::uint32_t* by_loader,
                                std::uint32_t* by_ldmatrix) {
  MLAKIT_DYNAMIC_SHARED(smem);
  auto* s = reinterpret_cast<std::uint16_t*>(smem);
  constexpr int ld = 40;
  for (int i = threadIdx.x; i < 32 * ld; i += 32) s[i] = tile[i];
  __syncthreads();
  const int lane = threadIdx.x;
  std::uint32_t* x = by_loader + lane * 12;
  std::uint32_t* y = by_ldmatrix + lane * 12;
  load_a_rowmajor(x, s, ld, m0, k0);
  load_b_nmajor(x + 4, s, ld, m0, k0);  // n tile [m0, m0+8)
  load_b_nmajor(x + 6, s, ld, m0 + 8, k0);
  load_b_kmajor(x + 8, s, ld, m0, k0);  // k rows [m0, m0+16), n tile [k0, k0+8)
  load_b_kmajor(x + 10, s, ld, m0, k0 + 8);
  ldmatrix_x4(y, ldmatrix_a_row(s, ld, m0, k0));
  ldmatrix_x4(y + 4, ldmatrix_b_nmajor_row(s, ld, m0, k0));
  ldmatrix_x4_trans(y + 8, ldmatrix_b_kmajor_row(s, ld, m0, k0));
}

TEST(DeviceCode, LdmatrixGivesTheFragmentsOfTheElementLoaders) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> bits(0, 0xFFFF);
  std::vector<std::uint16_t> tile(32 * 40);
  for (auto& v : tile) v = static_cast<std::uint16_t>(bits(rng));
  for (int m0 : {0, 8, 16})
    for (int k0 : {0, 8, 16, 24}) {
      std::vector<std::uint32_t> a(32 * 12, 1), b(32 * 12, 2);
      mlakit_cuda_emu::launch(ldmatrix_kernel, dim3(1), dim3(32), 32 * 40 * 2, nullptr, tile.data(), m0, k0, a.data(),
                              b.data());
      for (int i = 0; i < 32 * 12; ++i) ASSERT_EQ(a[i], b[i]) << "m0 " << m0 << " k0 " << k0 << " lane " << i / 12 << " word " << i % 12;
    }
}

// ---- cp.async -------------------------------------------------------------------------------------
// Three groups of 16-byte copies (the second zero-filled) into shared memory; what a thread reads
// after waits that leave 2, 1 and 0 groups in flight.
__global__ void cp_async_kernel(const std::uint32_t* src, std::uint32_t* seen) {
  MLAKIT_DYNAMIC_SHARED(smem);
  auto* s = reinterpret_cast<std::uint32_t*>(smem);
  for (int grp = 0; grp < 3; ++grp) {
    cp_async_16(s + 4 * grp, src + 4 * grp, grp != 1);
    cp_async_commit();
  }
  cp_async_16(s + 12, src + 12, true);  // after the last commit: in no group yet
  for (int pending = 2, k = 0; pending >= 0; --pending, ++k) {
    if (pending == 2) cp_async_wait<2>();
    if (pending == 1) cp_async_wait<1>();
    if (pending == 0) cp_async_wait<0>();
    for (int i = 0; i < 16; ++i) seen[k * 16 + i] = s[i];
  }
  cp_async_commit();
  cp_async_wait<0>();
  for (int i = 0; i < 16; ++i) seen[48 + i] = s[i];
}

TEST(DeviceCode, CpAsyncCopiesLandWhenTheirGroupIsWaitedFor) {
  std::uint32_t* src = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&src), 64), cudaSuccess);
  for (std::uint32_t i = 0; i < 16; ++i) src[i] = 100 + i;
  std::vector<std::uint32_t> seen(64, 7);
  mlakit_cuda_emu::launch(cp_async_kernel, dim3(1), dim3(1), 64, nullptr, static_cast<const std::uint32_t*>(src),
                          seen.data());
  const std::uint32_t flight = 0xFFFFFFFFu;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 16; ++i) {
      const int grp = i / 4;
      const bool landed = grp == 3 ? k == 3 : grp < k + 1;  // wait<2> completes group 0, wait<1> 1, wait<0> 2
      const std::uint32_t want = !landed ? flight : grp == 1 ? 0u : 100u + static_cast<std::uint32_t>(i);
      EXPECT_EQ(seen[static_cast<std::size_t>(k * 16 + i)], want) << "read " << k << " word " << i;
    }
  ASSERT_EQ(cudaFree(src), cudaSuccess);
}

// ---- wgmma ----------------------------------------------------------------------------------------
TEST(DeviceCode, WgmmaDescriptorHoldsAddressAndOffsetsInTheirFields) {
  constexpr std::uint64_t d = wgmma_desc(0x12340u, 128, 256);
  EXPECT_EQ(d & 0x3FFFu, 0x1234u) << "start address >> 4, bits 0-13";
  EXPECT_EQ((d >> 16) & 0x3FFFu, 8u) << "lbo >> 4, bits 16-29";
  EXPECT_EQ((d >> 32) & 0x3FFFu, 16u) << "sbo >> 4, bits 32-45";
  EXPECT_EQ(d & ~((0x3FFFull) | (0x3FFFull << 16) | (0x3FFFull << 32)), 0u) << "base offset 0, no swizzle";
  EXPECT_EQ(wgmma_desc(0x40010u, 0, 0), 1u) << "the shared window's 18 address bits";
}

// n small integers (every product and sum of them exact in f32) and their bf16 bits.
struct SmallInts {
  std::vector<int> v;
  std::vector<std::uint16_t> bf;
  SmallInts(std::size_t n, std::mt19937& rng) : v(n), bf(n) {
    std::uniform_int_distribution<int> small(-8, 8);
    for (std::size_t i = 0; i < n; ++i) bf[i] = f32_to_bf16(static_cast<float>(v[i] = small(rng)));
  }
};

// Writes a thread's accumulators (wgmma.cuh's fragment, kN columns) to out, a row-major 64 x kN.
template <int kN>
void store_fragment(const float (&d)[kN / 2], float* out) {
  const int t = static_cast<int>(threadIdx.x), w = t / 32, g = t % 32 / 4, c = t % 4;
  for (int i = 0; i < kN / 8; ++i)
    for (int e = 0; e < 4; ++e) out[(16 * w + g + (e >= 2 ? 8 : 0)) * kN + 8 * i + 2 * c + (e & 1)] = d[4 * i + e];
}

// Byte offset of element (r, k) (k < 16) of an operand in wgmma.cuh's layout.
int wg_byte(int r, int k, int lbo, int sbo) { return (r / 8) * sbo + (k / 8) * lbo + (r % 8) * 16 + (k % 8) * 2; }

// D[64 x 128] = A[64 x 32]·B[128 x 32]ᵀ in two products of 16 k, the operands laid out with the
// given lbo and sbo (one stage per 16 k); d starts as garbage (the first product does not
// accumulate). seen_in_flight: whether thread 0's accumulators read NaN between issue and wait.
__global__ void wgmma_kernel(const std::uint16_t* a, const std::uint16_t* b, int lbo, int sbo, float* out,
                             int* seen_in_flight) {
  __shared__ __align__(128) std::uint16_t As[2][4096], Bs[2][8192];
  for (int e = threadIdx.x; e < 64 * 32; e += 128) {
    const int r = e / 32, k = e % 32;
    As[k / 16][wg_byte(r, k % 16, lbo, sbo) / 2] = a[e];
  }
  for (int e = threadIdx.x; e < 128 * 32; e += 128) {
    const int r = e / 32, k = e % 32;
    Bs[k / 16][wg_byte(r, k % 16, lbo, sbo) / 2] = b[e];
  }
  fence_proxy_async();
  __syncthreads();
  float d[64];
  for (int i = 0; i < 64; ++i) d[i] = 1e30f;
  wgmma_fence(d);
  wgmma_m64n128k16(d, As[0], Bs[0], static_cast<std::uint32_t>(lbo), static_cast<std::uint32_t>(sbo), false);
  wgmma_m64n128k16(d, As[1], Bs[1], static_cast<std::uint32_t>(lbo), static_cast<std::uint32_t>(sbo), true);
  wgmma_commit();
  if (threadIdx.x == 0) *seen_in_flight = std::isnan(d[0]) && std::isnan(d[63]);
  wgmma_wait<0>(d);
  store_fragment<128>(d, out);
}

TEST(DeviceCode, WgmmaComputesTheProductInTheDocumentedLayouts) {
  std::mt19937 rng(11);
  const SmallInts as(64 * 32, rng), bs(128 * 32, rng);
  const std::vector<int>&A = as.v, &B = bs.v;
  const std::vector<std::uint16_t>&a = as.bf, &b = bs.bf;
  // The kernels' layout (row groups 256 bytes apart, k halves 128), and the k halves apart with
  // the row groups packed (sbo 128, lbo past every row group of the operand: 2048 for B, which A
  // shares, its own rows then leaving a gap).
  for (const auto& [lbo, sbo] : {std::pair{128, 256}, std::pair{2048, 128}}) {
    SCOPED_TRACE("lbo " + std::to_string(lbo) + ", sbo " + std::to_string(sbo));
    std::vector<float> out(64 * 128, -1.0f);
    int in_flight = 0;
    mlakit_cuda_emu::launch(wgmma_kernel, dim3(1), dim3(128), 0, nullptr, static_cast<const std::uint16_t*>(a.data()),
                            static_cast<const std::uint16_t*>(b.data()), lbo, sbo, out.data(), &in_flight);
    EXPECT_EQ(in_flight, 1) << "the accumulators read NaN until the wait";
    for (int r = 0; r < 64; ++r)
      for (int n = 0; n < 128; ++n) {
        int want = 0;
        for (int k = 0; k < 32; ++k) want += A[static_cast<std::size_t>(r * 32 + k)] * B[static_cast<std::size_t>(n * 32 + k)];
        ASSERT_EQ(out[static_cast<std::size_t>(r * 128 + n)], static_cast<float>(want)) << r << "," << n;
      }
  }
}

// D[64 x 256] = A[64 x 16]·B[16 x 256] with B MN-major: its core matrices (8 k x 8 columns) sbo =
// 128 bytes apart along the columns, lbo = 4096 along k (the layout of V's rows for P·V).
__global__ void wgmma_mn_kernel(const std::uint16_t* a, const std::uint16_t* b, float* out) {
  __shared__ __align__(128) std::uint16_t As[1024], Bs[4096];
  for (int e = threadIdx.x; e < 64 * 16; e += 128) As[wg_byte(e / 16, e % 16, 128, 256) / 2] = a[e];
  for (int e = threadIdx.x; e < 16 * 256; e += 128) {
    const int k = e / 256, n = e % 256;
    Bs[((n / 8) * 128 + (k / 8) * 4096 + (k % 8) * 16 + (n % 8) * 2) / 2] = b[e];
  }
  fence_proxy_async();
  __syncthreads();
  float d[128];
  for (int i = 0; i < 128; ++i) d[i] = 1.0f;
  wgmma_fence(d);
  wgmma_m64n256k16_mn(d, As, 128, 256, Bs, 4096, 128, true);
  wgmma_commit();
  wgmma_wait<0>(d);
  store_fragment<256>(d, out);
}

TEST(DeviceCode, WgmmaReadsAnMnMajorB) {
  std::mt19937 rng(12);
  const SmallInts as(64 * 16, rng), bs(16 * 256, rng);
  const std::vector<int>&A = as.v, &B = bs.v;
  const std::vector<std::uint16_t>&a = as.bf, &b = bs.bf;
  std::vector<float> out(64 * 256, -1.0f);
  mlakit_cuda_emu::launch(wgmma_mn_kernel, dim3(1), dim3(128), 0, nullptr, static_cast<const std::uint16_t*>(a.data()),
                          static_cast<const std::uint16_t*>(b.data()), out.data());
  for (int r = 0; r < 64; ++r)
    for (int n = 0; n < 256; ++n) {
      int want = 1;  // accumulated onto 1
      for (int k = 0; k < 16; ++k) want += A[static_cast<std::size_t>(r * 16 + k)] * B[static_cast<std::size_t>(k * 256 + n)];
      ASSERT_EQ(out[static_cast<std::size_t>(r * 256 + n)], static_cast<float>(want)) << r << "," << n;
    }
}

// D[64 x 128] = A[64 x 32]·B[32 x 128] in two products of 16 k with A in registers (each lane's
// mma.sync A fragment of its warp's 16 rows) and B MN-major (sbo 128 along the columns, lbo 2048
// along k), then E[64 x 64] = A[.., 0:16]·C[64 x 16]ᵀ with both operands K-major in shared memory
// (m64n64k16).
__global__ void wgmma_rs_kernel(const std::uint16_t* a, const std::uint16_t* b, const std::uint16_t* c64, float* out,
                                float* out64) {
  __shared__ __align__(128) std::uint16_t As[1024], Bs[2][2048], Cs[1024];
  for (int e = threadIdx.x; e < 64 * 16; e += 128) As[wg_byte(e / 16, e % 16, 128, 256) / 2] = a[(e / 16) * 32 + e % 16];
  for (int e = threadIdx.x; e < 32 * 128; e += 128) {
    const int k = e / 128, n = e % 128;
    Bs[k / 16][((n / 8) * 128 + (k % 16 / 8) * 2048 + (k % 8) * 16 + (n % 8) * 2) / 2] = b[e];
  }
  for (int e = threadIdx.x; e < 64 * 16; e += 128) Cs[wg_byte(e / 16, e % 16, 128, 256) / 2] = c64[e];
  fence_proxy_async();
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x), w = t / 32, g = t % 32 / 4, q = t % 4;
  const auto pair = [&](int r, int k) {
    return static_cast<std::uint32_t>(a[r * 32 + k]) | static_cast<std::uint32_t>(a[r * 32 + k + 1]) << 16;
  };
  std::uint32_t frag[2][4];
  for (int h = 0; h < 2; ++h) {
    const int r = 16 * w + g, k = 16 * h + 2 * q;
    frag[h][0] = pair(r, k);
    frag[h][1] = pair(r + 8, k);
    frag[h][2] = pair(r, k + 8);
    frag[h][3] = pair(r + 8, k + 8);
  }
  float d[64], e64[32];
  for (int i = 0; i < 64; ++i) d[i] = 1e30f;
  for (int i = 0; i < 32; ++i) e64[i] = 1e30f;
  wgmma_fence(d, frag[0]);
  wgmma_m64n128k16_rs_mn(d, frag[0], Bs[0], 2048, 128, false);
  wgmma_m64n128k16_rs_mn(d, frag[1], Bs[1], 2048, 128, true);
  wgmma_m64n64k16(e64, As, Cs, 128, 256, false);
  wgmma_commit();
  wgmma_wait<0>(d);
  wgmma_wait<0>(e64);
  store_fragment<128>(d, out);
  store_fragment<64>(e64, out64);
}

TEST(DeviceCode, WgmmaTakesAFromRegistersAndHasA64ColumnShape) {
  std::mt19937 rng(13);
  const SmallInts as(64 * 32, rng), bs(32 * 128, rng), cs(64 * 16, rng);
  std::vector<float> out(64 * 128, -1.0f), out64(64 * 64, -1.0f);
  mlakit_cuda_emu::launch(wgmma_rs_kernel, dim3(1), dim3(128), 0, nullptr, static_cast<const std::uint16_t*>(as.bf.data()),
                          static_cast<const std::uint16_t*>(bs.bf.data()), static_cast<const std::uint16_t*>(cs.bf.data()),
                          out.data(), out64.data());
  for (int r = 0; r < 64; ++r) {
    for (int n = 0; n < 128; ++n) {
      int want = 0;
      for (int k = 0; k < 32; ++k) want += as.v[static_cast<std::size_t>(r * 32 + k)] * bs.v[static_cast<std::size_t>(k * 128 + n)];
      ASSERT_EQ(out[static_cast<std::size_t>(r * 128 + n)], static_cast<float>(want)) << "register A: " << r << "," << n;
    }
    for (int n = 0; n < 64; ++n) {
      int want = 0;
      for (int k = 0; k < 16; ++k) want += as.v[static_cast<std::size_t>(r * 32 + k)] * cs.v[static_cast<std::size_t>(n * 16 + k)];
      ASSERT_EQ(out64[static_cast<std::size_t>(r * 64 + n)], static_cast<float>(want)) << "m64n64k16: " << r << "," << n;
    }
  }
}

// ---- top-k -------------------------------------------------------------------------------------
constexpr int kThreads = 512;

__global__ void topk_kernel(const float* scores, int n, int m, unsigned long long* buf, std::int32_t* out) {
  __shared__ TopkShared<kThreads> sm;
  block_topk<kThreads>(sm, n, m, [scores](int j) { return rank_key(scores[j]); }, buf);
  for (int i = threadIdx.x; i < m; i += kThreads) out[i] = winner_is_nan(buf[i]) ? -2 : static_cast<std::int32_t>(winner_index(buf[i]));
}

// The spec's order, written independently: numbers before NaN, higher first, +0 == -0, then index.
std::vector<std::int32_t> expected_order(const std::vector<float>& s, int m) {
  std::vector<std::int32_t> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::int32_t a, std::int32_t b) {
    const bool na = std::isnan(s[a]), nb = std::isnan(s[b]);
    if (na != nb) return nb;
    if (na) return false;
    return s[a] > s[b];
  });
  idx.resize(static_cast<std::size_t>(m));
  for (auto& i : idx)
    if (std::isnan(s[i])) i = -2;
  return idx;
}

void check_topk(const std::vector<float>& scores, int m) {
  const int n = static_cast<int>(scores.size());
  std::vector<unsigned long long> buf(static_cast<std::size_t>(next_pow2(m)), 0);
  std::vector<std::int32_t> out(static_cast<std::size_t>(m), -7);
  mlakit_cuda_emu::launch(topk_kernel, dim3(1), dim3(kThreads), 0, nullptr, scores.data(), n, m, buf.data(), out.data());
  EXPECT_EQ(out, expected_order(scores, m)) << "n=" << n << " m=" << m;
}

TEST(DeviceCode, BlockTopkFollowsTheSpecOrder) {
  std::mt19937 rng(11);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int n : {1, 2, 5, 31, 512, 513, 1000, 5000}) {
    for (int m : {1, 3, n / 2, n - 1, n}) {
      if (m < 1 || m > n) continue;
      std::vector<float> s(static_cast<std::size_t>(n));
      std::uniform_int_distribution<int> pick(0, 9);
      std::uniform_int_distribution<int> small(-3, 3);  // many ties
      for (float& v : s) {
        const int k = pick(rng);
        v = k == 0 ? nan : k == 1 ? 0.0f : k == 2 ? -0.0f : k == 3 ? -inf : k == 4 ? inf : static_cast<float>(small(rng)) * 0.5f;
      }
      check_topk(s, m);
    }
  }
  check_topk(std::vector<float>(64, nan), 10);   // only NaN
  check_topk(std::vector<float>(64, 1.0f), 64);  // all equal
}

// ---- rank key ----------------------------------------------------------------------------------
TEST(DeviceCode, RankKeyOrdersFloatsAndTiesSignedZeros) {
  const float vals[] = {-std::numeric_limits<float>::infinity(), -1e30f, -1.0f, -1e-40f, -0.0f, 0.0f, 1e-40f, 1.0f,
                        std::numeric_limits<float>::infinity()};
  for (std::size_t i = 1; i < std::size(vals); ++i) {
    if (vals[i] == vals[i - 1]) EXPECT_EQ(rank_key(vals[i]), rank_key(vals[i - 1]));
    else EXPECT_GT(rank_key(vals[i]), rank_key(vals[i - 1])) << vals[i];
  }
  EXPECT_EQ(rank_key(std::numeric_limits<float>::quiet_NaN()), 0u);
  EXPECT_EQ(rank_key(-std::numeric_limits<float>::quiet_NaN()), 0u);
  EXPECT_GT(rank_key(vals[0]), 0u);
}

// ---- ragged rows -------------------------------------------------------------------------------
TEST(DeviceCode, FindSequenceSkipsEmptySequences) {
  const std::uint32_t offsets[] = {0, 0, 3, 3, 3, 7, 8};
  const int owner[] = {1, 1, 1, 4, 4, 4, 4, 5};
  for (int t = 0; t < 8; ++t) EXPECT_EQ(find_sequence(offsets, 6, t), owner[t]) << t;
}

// ---- the emulator --------------------------------------------------------------------------------
// Half of each warp at a shuffle, the other half at a block barrier: hangs on a GPU.
__global__ void divergent_collective_kernel() {
  if (threadIdx.x % 32 < 16) (void)__shfl_xor_sync(0xffffffffu, 1, 1);
  __syncthreads();
}

// A copy its thread never waits for: on a GPU the shared memory it lands in is gone.
__global__ void unwaited_copy_kernel(const std::uint32_t* src) {
  MLAKIT_DYNAMIC_SHARED(smem);
  cp_async_16(smem, src, true);
  cp_async_commit();
}

// A row address in global memory.
__global__ void ldmatrix_global_kernel(const std::uint16_t* rows) {
  std::uint32_t r[4];
  ldmatrix_x4(r, rows + 8 * (threadIdx.x % 8));
}

// A product whose operand a thread overwrites before the wait; a product never waited for.
__global__ void wgmma_hazard_kernel(bool overwrite, bool wait) {
  __shared__ __align__(128) std::uint16_t As[1024], Bs[2048];
  for (int e = threadIdx.x; e < 1024; e += 128) As[e] = 0;
  for (int e = threadIdx.x; e < 2048; e += 128) Bs[e] = 0;
  __syncthreads();
  float d[64] = {};
  wgmma_fence(d);
  wgmma_m64n128k16(d, As, Bs, 128, 256, false);
  wgmma_commit();
  if (overwrite && threadIdx.x == 5) Bs[7] = 0x3F80;
  if (wait) wgmma_wait<0>(d);
}

// A register-A product whose A registers one thread rewrites before the wait (`overwrite`), or
// only after it; thread 0 writes its first accumulator to `out`.
__global__ void wgmma_register_a_hazard_kernel(bool overwrite, float* out) {
  __shared__ __align__(128) std::uint16_t Bs[16 * 128];
  for (int e = threadIdx.x; e < 16 * 128; e += 128) Bs[e] = 0x3F80;
  __syncthreads();
  float d[64] = {};
  std::uint32_t a[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};
  wgmma_fence(d, a);
  wgmma_m64n128k16_rs_mn(d, a, Bs, 2048, 128, false);
  wgmma_commit();
  if (overwrite && threadIdx.x == 9) a[2] = 0;
  wgmma_wait<0>(d, a);
  if (!overwrite && threadIdx.x == 9) a[2] = 0;  // after the wait: free to reuse
  if (threadIdx.x == 0) *out = d[0];
}

// ---- temporaries ---------------------------------------------------------------------------------
TEST(DeviceCode, TemporariesAlignRegionsAndRefuseOverflow) {
  alignas(256) static unsigned char workspace[4096];
  core::DeviceLaunch launch;
  launch.workspace = workspace;
  launch.workspace_bytes = sizeof workspace;
  Temporaries t;
  EXPECT_EQ(t.add(1), 0u);
  EXPECT_EQ(t.add(256), 1u);
  EXPECT_EQ(t.add(0), 2u);
  EXPECT_EQ(t.add(257), 3u);
  EXPECT_EQ(t.total(), 256u + 256u + 0u + 512u);
  ASSERT_TRUE(t.acquire("op", launch, nullptr).ok());
  EXPECT_EQ(t.at<unsigned char>(1) - workspace, 256);
  EXPECT_EQ(t.at<unsigned char>(3) - workspace, 512);

  Temporaries many;  // one region past the table
  for (std::size_t i = 0; i < Temporaries::kMaxRegions; ++i) EXPECT_EQ(many.add(16), i);
  EXPECT_EQ(many.add(16), 0u);
  const Status s = many.acquire("op", launch, nullptr);
  EXPECT_EQ(s.code, StatusCode::internal);
  EXPECT_NE(s.message.find("more than 8 regions"), std::string::npos) << s.message;

  Temporaries huge;  // sizes whose sum leaves the address space
  huge.add(SIZE_MAX / 2);
  huge.add(SIZE_MAX / 2 + 1024);
  EXPECT_EQ(huge.acquire("op", launch, nullptr).code, StatusCode::internal);
  Temporaries top;
  top.add(SIZE_MAX - 3);
  EXPECT_EQ(top.acquire("op", launch, nullptr).code, StatusCode::internal);
}

TEST(CudaEmulationDeathTest, CollectiveInDivergentCodeIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(mlakit_cuda_emu::launch(divergent_collective_kernel, dim3(1), dim3(64), 0, nullptr), "deadlock");
}

TEST(CudaEmulationDeathTest, CopyNeverWaitedForIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::uint32_t* src = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&src), 16), cudaSuccess);
  EXPECT_DEATH(mlakit_cuda_emu::launch(unwaited_copy_kernel, dim3(1), dim3(1), 16, nullptr,
                                       static_cast<const std::uint32_t*>(src)),
               "never waited");
  ASSERT_EQ(cudaFree(src), cudaSuccess);
}

TEST(CudaEmulationDeathTest, WgmmaOperandOverwrittenBeforeTheWaitIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(mlakit_cuda_emu::launch(wgmma_hazard_kernel, dim3(1), dim3(128), 0, nullptr, true, true),
               "changed before the wait");
}

TEST(CudaEmulationDeathTest, WgmmaRegisterAOverwrittenBeforeTheWaitIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float* out = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), sizeof(float)), cudaSuccess);
  EXPECT_DEATH(mlakit_cuda_emu::launch(wgmma_register_a_hazard_kernel, dim3(1), dim3(128), 0, nullptr, true, out),
               "register holding A changed before the wait");
  // Rewritten only after the wait: no report, and the product is 16 k of 1 x 1.
  mlakit_cuda_emu::launch(wgmma_register_a_hazard_kernel, dim3(1), dim3(128), 0, nullptr, false, out);
  float got = 0.0f;
  ASSERT_EQ(cudaMemcpyAsync(&got, out, sizeof got, cudaMemcpyDeviceToHost, nullptr), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(got, 16.0f);
  ASSERT_EQ(cudaFree(out), cudaSuccess);
}

TEST(CudaEmulationDeathTest, WgmmaNeverWaitedForIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(mlakit_cuda_emu::launch(wgmma_hazard_kernel, dim3(1), dim3(128), 0, nullptr, false, false),
               "never waited");
}

TEST(CudaEmulationDeathTest, LdmatrixOnGlobalMemoryIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::uint16_t* rows = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&rows), 128), cudaSuccess);
  EXPECT_DEATH(mlakit_cuda_emu::launch(ldmatrix_global_kernel, dim3(1), dim3(32), 0, nullptr,
                                       static_cast<const std::uint16_t*>(rows)),
               "ldmatrix: a row address in global memory");
  ASSERT_EQ(cudaFree(rows), cudaSuccess);
}

}  // namespace
}  // namespace mlakit::cuda
