#include "bench/onednn_bar.hpp"

#include "bench/library_bar.hpp"

#if defined(MLAKIT_HAVE_ONEDNN)
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include <dnnl.hpp>
#endif

namespace mlakit::bench {

#if defined(MLAKIT_HAVE_ONEDNN)
namespace {

struct Product {
  dnnl::matmul mm;
  dnnl::memory a, w, c;
};

using dt = dnnl::memory::data_type;

// 0.5 or 0.25 in every element, as bf16 or f32 (the values do not change the library's speed).
void fill(const dnnl::memory& m, dt type, float value) {
  if (type == dt::bf16) {
    auto* p = static_cast<std::uint16_t*>(m.get_data_handle());
    std::fill(p, p + m.get_desc().get_size() / sizeof(std::uint16_t), static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(value) >> 16));
  } else {
    auto* p = static_cast<float*>(m.get_data_handle());
    std::fill(p, p + m.get_desc().get_size() / sizeof(float), value);
  }
}

dnnl::matmul::primitive_desc matmul_desc(const dnnl::engine& eng, dt type, const Gemm& g) {
  using tag = dnnl::memory::format_tag;
  const auto m = static_cast<dnnl::memory::dim>(g.m), n = static_cast<dnnl::memory::dim>(g.n),
             k = static_cast<dnnl::memory::dim>(g.k);
  const dnnl::memory::desc a_md({m, k}, type, tag::ab), w_any({k, n}, type, tag::any), c_md({m, n}, dt::f32, tag::ab);
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::matmul::primitive_desc(eng, a_md, w_any, c_md);
#else
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, w_any, c_md), eng);
#endif
}

// The operand type of the bar: bf16 where this oneDNN has a bf16 matmul for the CPU (AVX-512 and
// up in 2.x), else f32, the matmul a user of such a CPU would run (oneDNN 2.6 refuses bf16 on an
// AVX2-only CPU by throwing at the primitive's creation).
dt bar_type() {
  static const dt type = [] {
    try {
      const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      (void)matmul_desc(eng, dt::bf16, Gemm{64, 64, 64});
      return dt::bf16;
    } catch (const dnnl::error&) {
      return dt::f32;
    }
  }();
  return type;
}

// One primitive per distinct shape, its operands filled once and the weights reordered into the
// layout it chose.
Product make_product(const dnnl::engine& eng, dnnl::stream& strm, const Gemm& g) {
  const dt type = bar_type();
  const dnnl::matmul::primitive_desc pd = matmul_desc(eng, type, g);
  Product p{dnnl::matmul(pd), dnnl::memory(pd.src_desc(), eng), dnnl::memory(pd.weights_desc(), eng),
            dnnl::memory(pd.dst_desc(), eng)};
  dnnl::memory rows(dnnl::memory::desc({static_cast<dnnl::memory::dim>(g.k), static_cast<dnnl::memory::dim>(g.n)}, type,
                                       dnnl::memory::format_tag::ba),
                    eng);
  fill(p.a, type, 0.5f);
  fill(rows, type, 0.25f);
  dnnl::reorder(rows, p.w).execute(strm, rows, p.w);
  strm.wait();
  return p;
}

// The primitives and their operands live as long as the returned round.
std::function<void()> prepare_matmuls(const std::vector<Gemm>& gemms, std::size_t calls, int threads) {
  struct Ready {
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    dnnl::stream strm{eng};
    std::vector<Product> products;
    std::vector<std::size_t> order;
  };
  omp_set_num_threads(threads);
  auto r = std::make_shared<Ready>();
  std::map<std::tuple<std::size_t, std::size_t, std::size_t>, std::size_t> by_shape;
  for (const Gemm& g : gemms) {
    const auto key = std::make_tuple(g.m, g.n, g.k);
    auto it = by_shape.find(key);
    if (it == by_shape.end()) {
      it = by_shape.emplace(key, r->products.size()).first;
      r->products.push_back(make_product(r->eng, r->strm, g));
    }
    r->order.push_back(it->second);
  }
  return [r, calls, threads] {
    omp_set_num_threads(threads);
    for (std::size_t c = 0; c < calls; ++c)
      for (const std::size_t i : r->order) {
        Product& p = r->products[i];
        p.mm.execute(r->strm, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.w}, {DNNL_ARG_DST, p.c}});
      }
    r->strm.wait();
  };
}

}  // namespace

std::optional<BarRound> onednn_bar(const std::string& op, const goldens::Bundle& b, int threads) {
  const std::vector<GemmGroup> groups = library_gemms(op, b);
  if (groups.empty()) return std::nullopt;
  try {
    return prepare_groups(groups, prepare_matmuls, threads);
  } catch (const dnnl::error&) {
    return std::nullopt;  // a shape this oneDNN has no matmul for: no bar rather than no benchmark
  }
}

std::string onednn_description() {
  const dnnl_version_t* v = dnnl_version();
  const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB" : "other";
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " (" +
         runtime + " runtime), " + (bar_type() == dt::bf16 ? "bf16" : "f32 (no bf16 matmul for this CPU)") +
         " matmul, weights in its own layout";
}

#else

std::optional<BarRound> onednn_bar(const std::string&, const goldens::Bundle&, int) { return std::nullopt; }
std::string onednn_description() { return "not built in (no oneDNN found at configure time)"; }

#endif

}  // namespace mlakit::bench
