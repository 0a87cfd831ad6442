// The CPU emulation behind tests/cuda_emulation/cuda_runtime.h (see there).
#include <ucontext.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <functional>
#include <map>
#include <vector>

#include "cuda_runtime.h"

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace mlakit_cuda_emu {
namespace {

constexpr std::size_t kStackBytes = 256 * 1024;
constexpr std::size_t kMaxDynamicShared = 232448;

enum class Wait { ready, block, warp, done };
enum class WarpOp { sync, ballot, shfl, mma, ldmatrix };

// A cp.async copy in flight: its group is the number of commits before it.
struct AsyncCopy {
  unsigned char* dst;
  const unsigned char* src;  // null: zero fill
  long group;
};

// A wgmma product in flight: the issuing thread's accumulators, the values they receive at the
// wait for its group, and the bytes of the core matrices it read (checked unchanged then); with A
// in registers, those registers and their values at the issue (the hardware reads them until the
// product completes, so they too must hold until the wait).
struct AsyncProduct {
  float* d;
  std::vector<float> result;
  std::vector<std::pair<const unsigned char*, std::vector<unsigned char>>> operands;
  long group;
  const std::uint32_t* a_regs = nullptr;
  std::uint32_t a_at_issue[4] = {0, 0, 0, 0};
};

struct Fiber {
  ucontext_t ctx;
  uint3 idx;
  Wait wait = Wait::ready;
  // block barrier
  int predicate = 0;
  // warp collective
  WarpOp op = WarpOp::sync;
  std::uint64_t value = 0;
  int lane_mask = 0;
  float c[4] = {0, 0, 0, 0};
  std::uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  std::uint64_t result = 0;
  // ldmatrix: this lane's row address, and the four registers it receives
  const unsigned char* row = nullptr;
  bool trans = false;
  std::uint32_t r[4] = {0, 0, 0, 0};
  // cp.async: copies not yet completed, and the commits so far
  std::vector<AsyncCopy> copies;
  long commits = 0;
  // wgmma: products not yet completed, and the commits so far
  std::vector<AsyncProduct> products;
  long product_commits = 0;
};

struct Block {
  std::vector<Fiber> fibers;
  ucontext_t scheduler;
  int current = 0;
  std::vector<unsigned char> smem;
  const std::function<void()>* body = nullptr;
};

Block* g_block = nullptr;
std::vector<std::unique_ptr<char[]>> g_stacks;
std::map<const void*, std::size_t> g_allocations;  // ordered: copies look up the allocation they fall in
std::function<void(const unsigned char*, std::size_t)> g_free_observer;
long g_launches = 0;
long g_copies_to_host = 0;
long g_allocations_made = 0;
// The start: MLAKIT_CUDA_EMU_SCHEDULE=in_order or reversed runs a whole test program under a serial
// order (a search for barriers the kernels lack), else lockstep.
Schedule schedule_from_env() {
  const char* v = std::getenv("MLAKIT_CUDA_EMU_SCHEDULE");
  if (v != nullptr && std::string(v) == "in_order") return Schedule::warps_in_order;
  if (v != nullptr && std::string(v) == "reversed") return Schedule::warps_reversed;
  return Schedule::lockstep;
}
Schedule g_schedule = schedule_from_env();
long g_syncs = 0;
int g_device_count = 1;

// True when [p, p + bytes) lies inside one live allocation.
bool in_device_memory(const void* p, std::size_t bytes) {
  auto it = g_allocations.upper_bound(p);
  if (it == g_allocations.begin()) return false;
  --it;
  const auto* base = static_cast<const unsigned char*>(it->first);
  const auto* q = static_cast<const unsigned char*>(p);
  return q >= base && static_cast<std::size_t>(q - base) + bytes <= it->second;
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "cuda emulation: %s (block %u,%u,%u)\n", what.c_str(), blockIdx.x, blockIdx.y, blockIdx.z);
  std::abort();
}

Fiber& self() {
  if (g_block == nullptr) fail("a device intrinsic was called outside a kernel");
  return g_block->fibers[static_cast<std::size_t>(g_block->current)];
}

void yield() {
  Fiber& f = self();
  swapcontext(&f.ctx, &g_block->scheduler);
}

void fiber_entry() {
  (*g_block->body)();
  Fiber& f = g_block->fibers[static_cast<std::size_t>(g_block->current)];
  if (!f.copies.empty()) fail("a thread exited with cp.async copies it never waited for");
  if (!f.products.empty()) fail("a thread exited with wgmma products it never waited for");
  f.wait = Wait::done;
  // returning resumes uc_link (the scheduler)
}

float bf16_lo(std::uint32_t r) { return __uint_as_float(r << 16); }
// A tensor-core sum rounded to f32; NaN as the canonical NaN the tensor cores give (whichever NaN
// went in), so that no result depends on which operand's NaN a CPU instruction passes on.
float tensor_core_result(double s) { return s != s ? __uint_as_float(0x7fffffffu) : static_cast<float>(s); }
float bf16_hi(std::uint32_t r) { return __uint_as_float(r & 0xFFFF0000u); }

// D = A·B + C for one warp, with the fragment layout of mma.m16n8k16 (.bf16, .f32).
void run_mma(Fiber* lanes) {
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    const Fiber& f = lanes[l];
    const int g = l >> 2, c = l & 3;
    A[g][2 * c] = bf16_lo(f.a[0]);
    A[g][2 * c + 1] = bf16_hi(f.a[0]);
    A[g + 8][2 * c] = bf16_lo(f.a[1]);
    A[g + 8][2 * c + 1] = bf16_hi(f.a[1]);
    A[g][2 * c + 8] = bf16_lo(f.a[2]);
    A[g][2 * c + 9] = bf16_hi(f.a[2]);
    A[g + 8][2 * c + 8] = bf16_lo(f.a[3]);
    A[g + 8][2 * c + 9] = bf16_hi(f.a[3]);
    B[2 * c][g] = bf16_lo(f.b[0]);
    B[2 * c + 1][g] = bf16_hi(f.b[0]);
    B[2 * c + 8][g] = bf16_lo(f.b[1]);
    B[2 * c + 9][g] = bf16_hi(f.b[1]);
    C[g][2 * c] = f.c[0];
    C[g][2 * c + 1] = f.c[1];
    C[g + 8][2 * c] = f.c[2];
    C[g + 8][2 * c + 1] = f.c[3];
  }
  float D[16][8];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double s = C[i][j];
      for (int k = 0; k < 16; ++k) s += static_cast<double>(A[i][k]) * static_cast<double>(B[k][j]);
      D[i][j] = tensor_core_result(s);
    }
  for (int l = 0; l < 32; ++l) {
    Fiber& f = lanes[l];
    const int g = l >> 2, c = l & 3;
    f.c[0] = D[g][2 * c];
    f.c[1] = D[g][2 * c + 1];
    f.c[2] = D[g + 8][2 * c];
    f.c[3] = D[g + 8][2 * c + 1];
  }
}

// True when [p, p + bytes) lies in the running block's dynamic shared memory.
bool in_shared_memory(const void* p, std::size_t bytes) {
  const auto* q = static_cast<const unsigned char*>(p);
  const unsigned char* base = g_block->smem.data();
  return q >= base && static_cast<std::size_t>(q - base) + bytes <= g_block->smem.size();
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lane 8i + j names row j of matrix i; lane l
// receives, per matrix, row l/4 columns 2(l%4), +1 (or with .trans, those of the transposed
// matrix: column l/4 of rows 2(l%4), +1), the lower column (row) in the low half.
void run_ldmatrix(Fiber* lanes) {
  const bool trans = lanes[0].trans;
  // Static __shared__ arrays are process statics here, so a row outside the dynamic shared memory
  // is taken as one of them unless it lies in device memory or runs past the dynamic end.
  const unsigned char* dyn = g_block->smem.data();
  for (int l = 0; l < 32; ++l) {
    const unsigned char* row = lanes[l].row;
    if (lanes[l].trans != trans) fail("lanes of one warp at ldmatrix with and without .trans");
    if (!aligned16(row)) fail("ldmatrix: a row address not 16-byte aligned");
    if (in_device_memory(row, 1)) fail("ldmatrix: a row address in global memory");
    if (row + 16 > dyn && row < dyn + g_block->smem.size() && !in_shared_memory(row, 16))
      fail("ldmatrix: a row past the end of the block's shared memory");
  }
  auto at = [&](int matrix, int row, int col) {
    std::uint16_t v;
    std::memcpy(&v, lanes[8 * matrix + row].row + 2 * col, 2);
    return static_cast<std::uint32_t>(v);
  };
  std::uint32_t out[32][4];
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const int g = l >> 2, c = 2 * (l & 3);
      out[l][i] = trans ? at(i, c, g) | at(i, c + 1, g) << 16 : at(i, g, c) | at(i, g, c + 1) << 16;
    }
  for (int l = 0; l < 32; ++l) std::memcpy(lanes[l].r, out[l], sizeof out[l]);
}

const char* wait_name(const Fiber& f) {
  switch (f.wait) {
    case Wait::ready: return "ready";
    case Wait::block: return "__syncthreads";
    case Wait::done: return "exited";
    case Wait::warp:
      switch (f.op) {
        case WarpOp::sync: return "__syncwarp";
        case WarpOp::ballot: return "__ballot_sync";
        case WarpOp::shfl: return "__shfl_xor_sync";
        case WarpOp::mma: return "mma.sync";
        case WarpOp::ldmatrix: return "ldmatrix";
      }
  }
  return "?";
}

// Completes warp w0 / 32's collective if its 32 lanes all wait at one; true when it completed.
bool resolve_warp(Block& blk, int w0) {
  const int n = static_cast<int>(blk.fibers.size());
  Fiber* lanes = &blk.fibers[static_cast<std::size_t>(w0)];
  const int width = n - w0 < 32 ? n - w0 : 32;
  int waiting = 0;
  bool any_done = false;
  for (int l = 0; l < width; ++l) {
    waiting += lanes[l].wait == Wait::warp;
    any_done |= lanes[l].wait == Wait::done;
  }
  if (waiting == 0) return false;
  if (width < 32) fail("a warp collective in a partial warp");
  if (any_done) fail("a warp collective reached by some lanes after others exited");
  if (waiting < 32) return false;  // the other lanes have not arrived yet
  const WarpOp op = lanes[0].op;
  for (int l = 1; l < 32; ++l)
    if (lanes[l].op != op)
      fail(std::string("lanes of one warp wait at different collectives: ") + wait_name(lanes[0]) + " and " +
           wait_name(lanes[l]));
  switch (op) {
    case WarpOp::sync: break;
    case WarpOp::ballot: {
      std::uint64_t bits = 0;
      for (int l = 0; l < 32; ++l) bits |= (lanes[l].value ? 1ull : 0ull) << l;
      for (int l = 0; l < 32; ++l) lanes[l].result = bits;
      break;
    }
    case WarpOp::shfl:
      for (int l = 0; l < 32; ++l) lanes[l].result = lanes[l ^ lanes[l].lane_mask].value;
      break;
    case WarpOp::mma: run_mma(lanes); break;
    case WarpOp::ldmatrix: run_ldmatrix(lanes); break;
  }
  for (int l = 0; l < 32; ++l) lanes[l].wait = Wait::ready;
  return true;
}

// Completes the warp collectives whose 32 lanes all wait at one; true when one completed.
bool resolve_warps(Block& blk) {
  bool progress = false;
  for (int w0 = 0; w0 < static_cast<int>(blk.fibers.size()); w0 += 32) progress |= resolve_warp(blk, w0);
  return progress;
}

bool resolve_block(Block& blk) {
  int live = 0, waiting = 0, any = 0;
  for (const Fiber& f : blk.fibers) {
    if (f.wait == Wait::done) continue;
    ++live;
    if (f.wait == Wait::block) {
      ++waiting;
      any |= f.predicate;
    }
  }
  if (live == 0 || waiting != live) return false;
  for (Fiber& f : blk.fibers)
    if (f.wait == Wait::block) {
      f.wait = Wait::ready;
      f.result = static_cast<std::uint64_t>(any != 0);
    }
  return true;
}

void run_block(dim3 block, std::size_t smem, const std::function<void()>& body) {
  const std::size_t n = static_cast<std::size_t>(block.x) * block.y * block.z;
  while (g_stacks.size() < n) g_stacks.push_back(std::make_unique<char[]>(kStackBytes));
  Block blk;
  blk.fibers.resize(n);
  blk.smem.assign(smem + 16, 0xA5);  // uninitialized shared memory holds garbage
  blk.body = &body;
  for (std::size_t i = 0; i < n; ++i) {
    Fiber& f = blk.fibers[i];
    f.idx.x = static_cast<unsigned>(i % block.x);
    f.idx.y = static_cast<unsigned>((i / block.x) % block.y);
    f.idx.z = static_cast<unsigned>(i / (static_cast<std::size_t>(block.x) * block.y));
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = g_stacks[i].get();
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = &blk.scheduler;
    makecontext(&f.ctx, fiber_entry, 0);
  }
  g_block = &blk;
  // Runs the ready threads of [first, last); true when one ran.
  const auto sweep = [&](std::size_t first, std::size_t last) {
    bool ran = false;
    for (std::size_t i = first; i < last; ++i) {
      if (blk.fibers[i].wait != Wait::ready) continue;
      blk.current = static_cast<int>(i);
      threadIdx = blk.fibers[i].idx;
      swapcontext(&blk.scheduler, &blk.fibers[i].ctx);
      ran = true;
    }
    return ran;
  };
  const std::size_t warps = (n + 31) / 32;
  for (;;) {
    bool ran = false;
    if (g_schedule == Schedule::lockstep) {
      ran = sweep(0, n);
    } else {
      // The first warp in the order with work left runs until its threads all wait at a block
      // barrier or have exited.
      for (std::size_t k = 0; k < warps && !ran; ++k) {
        const std::size_t w = g_schedule == Schedule::warps_reversed ? warps - 1 - k : k;
        const std::size_t first = 32 * w, last = std::min(n, first + 32);
        while (sweep(first, last) || resolve_warp(blk, static_cast<int>(first))) ran = true;
      }
    }
    bool all_done = true;
    for (const Fiber& f : blk.fibers) all_done &= f.wait == Wait::done;
    if (all_done) break;
    if (resolve_warps(blk) || resolve_block(blk) || ran) continue;
    std::string states;
    for (std::size_t i = 0; i < n && i < 64; i += 8) states += " t" + std::to_string(i) + "=" + wait_name(blk.fibers[i]);
    fail("deadlock: the block's threads wait at barriers that cannot complete:" + states);
  }
  g_block = nullptr;
}

}  // namespace

void sync_block() { (void)sync_block_or(0); }

int sync_block_or(int predicate) {
  Fiber& f = self();
  f.wait = Wait::block;
  f.predicate = predicate != 0;
  yield();
  return static_cast<int>(self().result);
}

unsigned warp_ballot(bool predicate) {
  Fiber& f = self();
  f.wait = Wait::warp;
  f.op = WarpOp::ballot;
  f.value = predicate ? 1 : 0;
  yield();
  return static_cast<unsigned>(self().result);
}

std::uint64_t warp_shfl_xor(std::uint64_t bits, int lane_mask) {
  Fiber& f = self();
  if (lane_mask < 0 || lane_mask > 31) fail("__shfl_xor_sync lane mask out of range");
  f.wait = Wait::warp;
  f.op = WarpOp::shfl;
  f.value = bits;
  f.lane_mask = lane_mask;
  yield();
  return self().result;
}

void warp_sync() {
  Fiber& f = self();
  f.wait = Wait::warp;
  f.op = WarpOp::sync;
  yield();
}

void mma_bf16_16816(float c[4], const std::uint32_t a[4], const std::uint32_t b[2]) {
  Fiber& f = self();
  f.wait = Wait::warp;
  f.op = WarpOp::mma;
  for (int i = 0; i < 4; ++i) f.c[i] = c[i], f.a[i] = a[i];
  f.b[0] = b[0];
  f.b[1] = b[1];
  yield();
  for (int i = 0; i < 4; ++i) c[i] = self().c[i];
}

void ldmatrix_x4(std::uint32_t r[4], const void* row, bool trans) {
  Fiber& f = self();
  f.wait = Wait::warp;
  f.op = WarpOp::ldmatrix;
  f.row = static_cast<const unsigned char*>(row);
  f.trans = trans;
  yield();
  for (int i = 0; i < 4; ++i) r[i] = self().r[i];
}

void cp_async_16(void* dst, const void* src, bool fill) {
  Fiber& f = self();
  if (!aligned16(dst) || !in_shared_memory(dst, 16))
    fail("cp.async: a destination outside the block's shared memory or not 16-byte aligned");
  // The source is not required to lie in an emulated allocation: the tests' engine cache layouts
  // hand kernels host copies of staged caches, which stand for device memory here.
  if (fill && (!aligned16(src) || in_shared_memory(src, 16)))
    fail("cp.async: a source in shared memory or not 16-byte aligned");
  auto* d = static_cast<unsigned char*>(dst);
  std::memset(d, 0xFF, 16);  // in flight: reads see NaN until the group completes
  f.copies.push_back(AsyncCopy{d, fill ? static_cast<const unsigned char*>(src) : nullptr, f.commits});
}

void cp_async_commit() { ++self().commits; }

void cp_async_wait(int pending_groups) {
  Fiber& f = self();
  // Groups [0, commits - pending_groups) complete; the copies after the last commit belong to no
  // group yet and stay in flight.
  const long done_below = f.commits - pending_groups;
  std::vector<AsyncCopy> left;
  for (const AsyncCopy& c : f.copies) {
    if (c.group < done_below) {
      if (c.src) std::memcpy(c.dst, c.src, 16);
      else std::memset(c.dst, 0, 16);
    } else {
      left.push_back(c);
    }
  }
  f.copies.swap(left);
}

namespace {

// Core matrix (row group q, k group h) of an operand: 128 bytes, in shared memory; sbo steps along
// the rows (M or N), lbo along k.
const unsigned char* core_matrix(const unsigned char* base, std::uint32_t lbo, std::uint32_t sbo, int q, int h) {
  const unsigned char* at = base + static_cast<std::size_t>(q) * sbo + static_cast<std::size_t>(h) * lbo;
  if (in_device_memory(at, 128)) fail("wgmma: an operand in device memory, not shared memory");
  return at;
}

// Element (r, k) of an operand in shared memory: K-major, a core matrix's 16-byte rows are its 8
// rows (8 k each); MN-major, its 8 k (8 rows or columns each).
double operand_element(const unsigned char* base, std::uint32_t lbo, std::uint32_t sbo, bool mn_major, int r, int k) {
  std::uint16_t v;
  const unsigned char* c = core_matrix(base, lbo, sbo, r / 8, k / 8);
  std::memcpy(&v, mn_major ? c + (k % 8) * 16 + (r % 8) * 2 : c + (r % 8) * 16 + (k % 8) * 2, 2);
  return static_cast<double>(__uint_as_float(static_cast<std::uint32_t>(v) << 16));
}

std::size_t block_threads() { return static_cast<std::size_t>(blockDim.x) * blockDim.y * blockDim.z; }

// Queues the issuing thread's share of a product D (+)= A·B over 16 k, N = n: its accumulators'
// values computed now (f64 sums in k order from the accumulators at the issue, as mma.sync's),
// delivered at the wait for its group; A's element (row, k) from a_element, A's core matrices in
// shared memory (none when A is in registers) and B's kept to be checked unchanged then.
template <class AElement>
void issue_product(float* d, int n, const AElement& a_element, const unsigned char* pa, std::uint32_t a_lbo,
                   std::uint32_t a_sbo, const std::uint16_t* b, std::uint32_t b_lbo, std::uint32_t b_sbo,
                   bool b_mn_major, bool accumulate) {
  if (block_threads() % 128 != 0) fail("wgmma in a block that is not whole warpgroups of 128 threads");
  Fiber& f = self();
  const auto* pb = reinterpret_cast<const unsigned char*>(b);
  if ((pa != nullptr && !aligned16(pa)) || !aligned16(pb) || (a_lbo | a_sbo | b_lbo | b_sbo) % 16 != 0)
    fail("wgmma: an operand start, lbo or sbo not a multiple of 16 bytes");
  if (n % 8 != 0 || n < 8 || n > 256) fail("wgmma: N not a multiple of 8 in [8, 256]");
  const std::size_t regs = static_cast<std::size_t>(n) / 2;
  AsyncProduct p{d, std::vector<float>(regs), {}, f.product_commits};
  for (int q = 0; pa != nullptr && q < 8; ++q)
    for (int h = 0; h < 2; ++h) {
      const unsigned char* at = core_matrix(pa, a_lbo, a_sbo, q, h);
      p.operands.emplace_back(at, std::vector<unsigned char>(at, at + 128));
    }
  for (int q = 0; q < n / 8; ++q)
    for (int h = 0; h < 2; ++h) {
      const unsigned char* at = core_matrix(pb, b_lbo, b_sbo, q, h);
      p.operands.emplace_back(at, std::vector<unsigned char>(at, at + 128));
    }
  // The accumulators' values at the issue: those of this thread's last product on d still in
  // flight, else the registers.
  const float* in = d;
  for (const AsyncProduct& q : f.products)
    if (q.d == d) {
      if (q.result.size() != regs) fail("wgmma: products of two shapes in flight on one set of registers");
      in = q.result.data();
    }
  const unsigned t = static_cast<unsigned>(
      (threadIdx.x + blockDim.x * (threadIdx.y + static_cast<std::size_t>(blockDim.y) * threadIdx.z)) % 128);
  const int w = static_cast<int>(t / 32), g = static_cast<int>(t % 32 / 4), c = static_cast<int>(t % 4);
  for (int i = 0; i < n / 8; ++i)
    for (int e = 0; e < 4; ++e) {
      const int row = 16 * w + g + (e >= 2 ? 8 : 0), col = 8 * i + 2 * c + (e & 1);
      double s = accumulate ? in[4 * i + e] : 0.0;
      for (int k = 0; k < 16; ++k) s += a_element(row, k) * operand_element(pb, b_lbo, b_sbo, b_mn_major, col, k);
      p.result[static_cast<std::size_t>(4 * i + e)] = tensor_core_result(s);
    }
  for (std::size_t i = 0; i < regs; ++i) d[i] = __uint_as_float(0x7fc00000u);  // in flight
  f.products.push_back(std::move(p));
}

}  // namespace

void wgmma_bf16(float* d, int n, const std::uint16_t* a, std::uint32_t a_lbo, std::uint32_t a_sbo, const std::uint16_t* b,
                std::uint32_t b_lbo, std::uint32_t b_sbo, bool b_mn_major, bool accumulate) {
  const auto* pa = reinterpret_cast<const unsigned char*>(a);
  const auto a_element = [&](int row, int k) { return operand_element(pa, a_lbo, a_sbo, false, row, k); };
  issue_product(d, n, a_element, pa, a_lbo, a_sbo, b, b_lbo, b_sbo, b_mn_major, accumulate);
}

void wgmma_bf16_rs(float* d, int n, const std::uint32_t a[4], const std::uint16_t* b, std::uint32_t b_lbo,
                   std::uint32_t b_sbo, bool b_mn_major, bool accumulate) {
  // A row's 16 k lie in the four lanes of its quad (mma.sync's A fragment): lane c of the quad
  // holds k 2c, 2c + 1 (registers 0 and 1: rows g and g + 8) and k 8 + 2c, + 1 (registers 2, 3).
  // The quad's registers, exchanged as the warp's lanes all issue the product.
  const unsigned lane = threadIdx.x % 32;
  std::uint32_t quad[4][4];
  for (int mask = 0; mask < 4; ++mask) {
    const std::uint64_t lo = mask == 0 ? (a[0] | static_cast<std::uint64_t>(a[1]) << 32)
                                       : warp_shfl_xor(a[0] | static_cast<std::uint64_t>(a[1]) << 32, mask);
    const std::uint64_t hi = mask == 0 ? (a[2] | static_cast<std::uint64_t>(a[3]) << 32)
                                       : warp_shfl_xor(a[2] | static_cast<std::uint64_t>(a[3]) << 32, mask);
    const unsigned c = (lane ^ static_cast<unsigned>(mask)) & 3u;
    quad[c][0] = static_cast<std::uint32_t>(lo);
    quad[c][1] = static_cast<std::uint32_t>(lo >> 32);
    quad[c][2] = static_cast<std::uint32_t>(hi);
    quad[c][3] = static_cast<std::uint32_t>(hi >> 32);
  }
  const auto a_element = [&](int row, int k) {
    const std::uint32_t r = quad[(k % 8) / 2][(row % 16 >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
    return static_cast<double>(k % 2 == 0 ? bf16_lo(r) : bf16_hi(r));
  };
  issue_product(d, n, a_element, nullptr, 0, 0, b, b_lbo, b_sbo, b_mn_major, accumulate);
  AsyncProduct& p = self().products.back();
  p.a_regs = a;
  std::memcpy(p.a_at_issue, a, sizeof p.a_at_issue);
}

void wgmma_commit() { ++self().product_commits; }

void wgmma_wait(int pending_groups) {
  Fiber& f = self();
  const long done_below = f.product_commits - pending_groups;
  std::vector<AsyncProduct> left;
  for (AsyncProduct& p : f.products) {
    if (p.group >= done_below) {
      left.push_back(std::move(p));
      continue;
    }
    for (const auto& [at, bytes] : p.operands)
      if (std::memcmp(at, bytes.data(), bytes.size()) != 0)
        fail("wgmma: an operand in shared memory changed before the wait for its product");
    if (p.a_regs != nullptr && std::memcmp(p.a_regs, p.a_at_issue, sizeof p.a_at_issue) != 0)
      fail("wgmma: a register holding A changed before the wait for its product");
    std::memcpy(p.d, p.result.data(), p.result.size() * sizeof(float));
  }
  f.products.swap(left);
}

unsigned char* dynamic_shared() {
  if (g_block == nullptr) fail("dynamic shared memory outside a kernel");
  return g_block->smem.data();
}

void run_grid(dim3 grid, dim3 block, std::size_t dynamic_smem, const std::function<void()>& thread_body) {
  if (dynamic_smem > kMaxDynamicShared) fail("a launch asks for " + std::to_string(dynamic_smem) + " bytes of dynamic shared memory");
  if (block.x * block.y * block.z == 0 || block.x * block.y * block.z > 1024) fail("bad block size");
  if (grid.y > 65535 || grid.z > 65535) fail("grid.y / grid.z above 65535");
  ++g_launches;
  gridDim = grid;
  blockDim = block;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx.x = x;
        blockIdx.y = y;
        blockIdx.z = z;
        run_block(block, dynamic_smem, thread_body);
      }
}

long live_allocations() { return static_cast<long>(g_allocations.size()); }

std::function<void(const unsigned char*, std::size_t)> set_free_observer(
    std::function<void(const unsigned char*, std::size_t)> observer) {
  std::swap(observer, g_free_observer);
  return observer;
}
long launches() { return g_launches; }
long copies_to_host() { return g_copies_to_host; }
long allocations_made() { return g_allocations_made; }
long stream_synchronizations() { return g_syncs; }
Schedule set_schedule(Schedule s) {
  const Schedule previous = g_schedule;
  g_schedule = s;
  return previous;
}
int set_device_count(int count) {
  const int previous = g_device_count;
  g_device_count = count;
  return previous;
}

}  // namespace mlakit_cuda_emu

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    default: return "emulated error";
  }
}
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* count) {
  *count = mlakit_cuda_emu::g_device_count;
  return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(mlakit_cuda_emu::kMaxDynamicShared); return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}
cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  *ptr = std::malloc(bytes == 0 ? 1 : bytes);
  if (*ptr == nullptr) return cudaErrorMemoryAllocation;
  std::memset(*ptr, 0xFF, bytes);
  mlakit_cuda_emu::g_allocations[*ptr] = bytes;
  ++mlakit_cuda_emu::g_allocations_made;
  return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  const auto at = mlakit_cuda_emu::g_allocations.find(ptr);
  if (at == mlakit_cuda_emu::g_allocations.end()) return cudaErrorInvalidValue;
  if (mlakit_cuda_emu::g_free_observer) mlakit_cuda_emu::g_free_observer(static_cast<const unsigned char*>(ptr), at->second);
  mlakit_cuda_emu::g_allocations.erase(at);
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMallocAsync(void** ptr, std::size_t bytes, cudaStream_t) { return cudaMalloc(ptr, bytes); }
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) { return cudaFree(ptr); }
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  using mlakit_cuda_emu::in_device_memory;
  // The side a copy names as device memory must be (cudaMemcpyDefault infers the sides: unchecked).
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_ok = !src_device || in_device_memory(src, bytes);
  const bool dst_ok = !dst_device || in_device_memory(dst, bytes);
  if (bytes > 0 && (!src_ok || !dst_ok)) return cudaErrorInvalidValue;
  if (kind == cudaMemcpyDeviceToHost) ++mlakit_cuda_emu::g_copies_to_host;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  ++mlakit_cuda_emu::g_syncs;
  return cudaSuccess;
}
