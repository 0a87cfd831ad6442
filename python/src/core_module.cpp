// mlakit._core: the C++ library for Python. Arrays cross as plain views (data pointer, dtype name,
// shape, strides in elements, device flag) that mlakit/_views.py reads off NumPy arrays and torch
// tensors, so no array library is needed here and bf16 / fp8 arrays pass as they are. An operator
// call goes through the golden drivers' mapping from golden-format names and params to the
// library's descriptors and arguments (the same names `mlakit check` reads from files), over
// borrowed views: nothing is copied, outputs are written in place. The GIL is released while an
// operator runs. A refusal comes back as (code, op, field, message); mlakit raises it as a typed
// exception.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "goldens/common/driver.hpp"
#include "goldens/common/golden_check.hpp"
#include "goldens/common/input_error.hpp"
#include "goldens/common/safetensors.hpp"
#include "goldens/fused_qkv_paged.hpp"
#include "mlakit/mlakit.hpp"

namespace nb = nanobind;
using namespace mlakit;

namespace {

// (data pointer, dtype name, shape, strides in elements, on the device)
using ViewSpec = std::tuple<std::uintptr_t, std::string, std::vector<std::int64_t>, std::vector<std::int64_t>, bool>;
using Refusal = std::tuple<std::string, std::string, std::string, std::string>;  // code, op, field, message
using NamedView = std::tuple<std::string, ViewSpec>;

bool dtype_from_name(const std::string& name, DType* out) {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::f8e4m3, DType::i32, DType::u32, DType::u8, DType::e8m0}) {
    if (dtype_name(t) == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

// A refusal naming the argument, for what is wrong before the library sees it.
Refusal refuse(const std::string& op, const std::string& field, const std::string& message) {
  return {"invalid_argument", op, field, op + ": " + field + ": " + message};
}

std::optional<Refusal> to_view(const std::string& op, const std::string& name, const ViewSpec& s, TensorView* v) {
  const auto& [ptr, dtype, shape, strides, device] = s;
  if (!dtype_from_name(dtype, &v->dtype)) return refuse(op, name, "dtype '" + dtype + "' is not one mlakit reads");
  if (shape.size() != strides.size()) return refuse(op, name, "shape and strides differ in rank");
  if (shape.size() > static_cast<std::size_t>(kMaxRank))
    return refuse(op, name, "rank " + std::to_string(shape.size()) + " (at most " + std::to_string(kMaxRank) + ")");
  v->data = reinterpret_cast<void*>(ptr);
  v->rank = static_cast<int>(shape.size());
  for (int i = 0; i < v->rank; ++i) {
    v->shape[i] = shape[i];
    v->strides[i] = strides[i];
  }
  v->memory = device ? MemorySpace::device : MemorySpace::host;
  return std::nullopt;
}

std::optional<Refusal> from_status(const Status& s) {
  if (s.ok()) return std::nullopt;
  return Refusal{status_code_name(s.code), s.op, s.field, s.message};
}

Backend backend_from(const std::string& name) {
  Backend b = Backend::automatic;
  if (!parse_backend(name, &b)) throw nb::value_error(("unknown back-end '" + name + "'").c_str());
  return b;
}

const goldens::OpDriver& driver_named(const std::string& op) {
  const goldens::OpDriver* d = goldens::find_driver(op);
  if (d == nullptr) throw nb::value_error(("no operator named '" + op + "'").c_str());
  return *d;
}

// The bundle of a call of operator `op`: `params` (golden-format keys, as JSON text) and borrowed
// views named as in golden files (inputs, and out.* for what it writes). In-place arguments are
// named twice: as the input and as its out.* (the same memory).
std::optional<Refusal> bundle_of(const std::string& op, const std::string& params, const std::vector<NamedView>& views,
                                 goldens::Bundle* b) {
  b->op = op;
  try {
    b->params = goldens::json::parse(params);
  } catch (const std::exception& e) {
    return refuse(op, "params", e.what());
  }
  for (const auto& [name, spec] : views) {
    TensorView v;
    if (auto r = to_view(op, name, spec, &v)) return r;
    b->tensors.emplace(name, goldens::Tensor::borrow(v));
  }
  return std::nullopt;
}

// Runs `body` (which may throw the drivers' InputError) without the GIL; its Status or the
// exception as a refusal.
template <class Body>
std::optional<Refusal> unlocked_status(const std::string& op, Body&& body) {
  Status s;
  try {
    nb::gil_scoped_release unlocked;
    s = body();
  } catch (const goldens::InputError& e) {
    return Refusal{"invalid_argument", op, "", e.what()};
  } catch (const std::exception& e) {
    return Refusal{"invalid_argument", op, "", op + ": " + e.what()};
  }
  return from_status(s);
}

// A layer's op 5 weights packed once (pack_weights): made by pack(), named by calls.
struct PackedWeightsHandle {
  FusedQkvPackedWeights packed;

  // `params`: weight_format, group_size, has_zp, zero_format (golden-format keys, JSON text) and
  // prefill_layout (FusedQkvPackOptions);
  // `views`: the weight tensors by their argument names and hidden_state (its dtype and K).
  std::optional<Refusal> pack(const std::string& params, const std::vector<NamedView>& views) {
    const std::string op = "fused_qkv_paged.pack_weights";
    FusedQkvPagedDesc d;
    FusedQkvPackOptions options;
    try {
      const goldens::json p = goldens::json::parse(params);
      const std::string f = p.value("weight_format", "dense");
      d.weight_format = f == "fp8_block" ? WeightFormat::fp8_block : f == "gptq" ? WeightFormat::gptq : WeightFormat::dense;
      d.group_size = p.value("group_size", std::int64_t{128});
      d.has_zp = p.value("has_zp", false);
      d.zero_format = p.value("zero_format", std::string("v2")) == "v1" ? ZeroFormat::v1 : ZeroFormat::v2;
      options.prefill_layout = p.value("prefill_layout", true);
    } catch (const std::exception& e) {
      return refuse(op, "params", e.what());
    }
    FusedQkvPagedArgs a;
    for (const auto& [name, spec] : views) {
      TensorView* slot = name == "hidden_state"   ? &a.hidden_state
                         : name == "weight"       ? &a.weight
                         : name == "weight_scale" ? &a.weight_scale
                         : name == "qweight"      ? &a.qweight
                         : name == "scales"       ? &a.scales
                         : name == "qzeros"       ? &a.qzeros
                         : name == "g_idx"        ? &a.g_idx
                                                  : nullptr;
      if (slot == nullptr) return refuse(op, name, "not a weight of the operator");
      if (auto r = to_view(op, name, spec, slot)) return r;
    }
    return unlocked_status(op, [&] { return pack_weights(d, a, &packed, options); });
  }
  std::size_t bytes() const { return packed.bytes(); }
  std::string layout() const { return packed.layout(); }
};

// Calls operator `op` once (plan and run in one); op 5 with `packed` names its packed weights.
std::optional<Refusal> call(const std::string& op, const std::string& params, const std::vector<NamedView>& views,
                            const std::string& backend, std::uintptr_t cuda_stream, const PackedWeightsHandle* packed) {
  const goldens::OpDriver* driver = &driver_named(op);
  goldens::Bundle b;
  if (auto r = bundle_of(op, params, views, &b)) return r;
  RunOptions options;
  options.backend = backend_from(backend);
  options.cuda_stream = reinterpret_cast<void*>(cuda_stream);
  if (packed != nullptr && op != "fused_qkv_paged") return refuse(op, "packed_weights", "only fused_qkv_paged takes them");
  return unlocked_status(op, [&] {
    driver->check_inputs(b);
    if (packed == nullptr) return driver->call(b, options);
    FusedQkvPagedArgs a = goldens::fused_qkv_paged_args(b);
    a.packed_weights = &packed->packed;
    return fused_qkv_paged(goldens::fused_qkv_paged_desc(b), a, options);
  });
}

// Op 5's plan, held here rather than by its driver so that a run can name packed weights.
struct FusedPlannedCall final : goldens::PlannedCall {
  FusedQkvPagedPlan plan;
  Status run(const goldens::Bundle& b, const RunContext& context) const override {
    return run_packed(b, context, nullptr);
  }
  Status run_packed(const goldens::Bundle& b, const RunContext& context, const FusedQkvPackedWeights* packed) const {
    FusedQkvPagedArgs a = goldens::fused_qkv_paged_args(b);
    a.packed_weights = packed;
    return mlakit::run(plan, a, context);
  }
  const PlanInfo& info() const override { return plan; }
};

// A plan of one operator for a step (mlakit/plan.hpp), run once per layer: plan() checks the
// step's metadata and picks the back-end and kernels once; run() checks what a layer may change.
struct PlanHandle {
  std::string op;
  const goldens::OpDriver* driver = nullptr;
  std::unique_ptr<goldens::PlannedCall> call;
  const FusedPlannedCall* fused = nullptr;  // call, when it is op 5's

  const goldens::PlannedCall& planned() const {
    if (!call) throw nb::value_error("the plan was refused or never made");
    return *call;
  }

  std::optional<Refusal> plan(const std::string& name, const std::string& params, const std::vector<NamedView>& views,
                              const std::string& backend, std::uintptr_t cuda_stream) {
    call.reset();
    fused = nullptr;
    op = name;
    driver = &driver_named(name);
    goldens::Bundle b;
    if (auto r = bundle_of(op, params, views, &b)) return r;
    PlanOptions options;
    const Backend be = backend_from(backend);
    if (be != Backend::automatic) options.backends = {be};
    options.cuda_stream = reinterpret_cast<void*>(cuda_stream);
    return unlocked_status(op, [&] {
      driver->check_inputs(b);
      if (op != "fused_qkv_paged") return driver->plan(b, options, &call);
      auto f = std::make_unique<FusedPlannedCall>();
      const Status s = mlakit::plan(goldens::fused_qkv_paged_desc(b), goldens::fused_qkv_paged_args(b), options, &f->plan);
      if (s.ok()) {
        fused = f.get();
        call = std::move(f);
      }
      return s;
    });
  }

  // `packed`: op 5's packed weights for this run (none for other operators).
  std::optional<Refusal> run(const std::string& params, const std::vector<NamedView>& views, std::uintptr_t cuda_stream,
                             const PackedWeightsHandle* packed) const {
    const goldens::PlannedCall& p = planned();
    if (packed != nullptr && fused == nullptr) return refuse(op, "packed_weights", "only fused_qkv_paged takes them");
    goldens::Bundle b;
    if (auto r = bundle_of(op, params, views, &b)) return r;
    RunContext context;
    context.cuda_stream = reinterpret_cast<void*>(cuda_stream);
    return unlocked_status(op, [&] {
      driver->check_inputs(b);
      return packed ? fused->run_packed(b, context, &packed->packed) : p.run(b, context);
    });
  }
};

std::optional<Refusal> remap(const std::vector<NamedView>& views, std::int64_t page_size, std::int64_t num_blocks,
                             const std::string& backend, std::uintptr_t cuda_stream) {
  RemapIndicesArgs a;
  a.page_size = page_size;
  a.num_blocks = num_blocks;
  for (const auto& [name, spec] : views) {
    TensorView* slot = name == "indices"             ? &a.indices
                       : name == "input_row_offsets" ? &a.input_row_offsets
                       : name == "lookup_table"      ? &a.lookup_table
                       : name == "rows"              ? &a.rows
                                                     : nullptr;
    if (slot == nullptr) return refuse("remap_indices_to_rows", name, "not an argument of the operator");
    if (auto r = to_view("remap_indices_to_rows", name, spec, slot)) return r;
  }
  RunOptions options;
  options.backend = backend_from(backend);
  options.cuda_stream = reinterpret_cast<void*>(cuda_stream);
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = remap_indices_to_rows(a, options);
  }
  return from_status(s);
}

// A golden bundle's tensors as (name, dtype, shape, bytes), for NumPy on the Python side.
using OwnedTensor = std::tuple<std::string, std::string, std::vector<std::int64_t>, nb::bytes>;

std::vector<OwnedTensor> tensors_of(const goldens::Bundle& b) {
  std::vector<OwnedTensor> out;
  for (const auto& [name, t] : b.tensors)
    out.emplace_back(name, std::string(dtype_name(t.dtype())), t.shape(),
                     nb::bytes(reinterpret_cast<const char*>(t.bytes()), t.nbytes()));
  return out;
}

goldens::Bundle read_file(const std::string& path) {
  goldens::Bundle b;
  const Status s = goldens::read_safetensors(path, &b);
  if (!s.ok()) throw nb::value_error(s.message.c_str());
  return b;
}

const goldens::OpDriver& driver_of(const goldens::Bundle& b) { return driver_named(b.op); }

// (op, params JSON, tolerance JSON, metadata, tensors)
nb::tuple golden_load(const std::string& path) {
  const goldens::Bundle b = read_file(path);
  nb::dict meta;
  for (const auto& [k, v] : b.metadata) meta[k.c_str()] = v;
  return nb::make_tuple(b.op, b.params.dump(), b.tolerance.dump(), meta, tensors_of(b));
}

// Re-runs the file's inputs on `backend` (or reads `candidate`'s outputs) and compares with the
// file's outputs by its tolerance: [(output, kind, pass, mismatches, max_abs, max_rel, description)].
std::vector<std::tuple<std::string, std::string, bool, std::int64_t, double, double, std::string>> golden_check(
    const std::string& path, const std::string& backend, const std::optional<std::string>& candidate) {
  const goldens::Bundle expected = read_file(path);
  std::optional<goldens::Bundle> theirs;
  if (candidate) theirs = read_file(*candidate);
  RunOptions options;
  options.backend = backend_from(backend);
  std::vector<goldens::Comparison> cs;
  try {
    nb::gil_scoped_release unlocked;
    cs = goldens::check_golden(driver_of(expected), expected, theirs ? &*theirs : nullptr, options);
  } catch (const goldens::InputError& e) {
    throw nb::value_error(e.what());
  }
  std::vector<std::tuple<std::string, std::string, bool, std::int64_t, double, double, std::string>> out;
  for (const auto& c : cs)
    out.emplace_back(c.name, c.kind, c.pass, c.mismatches, c.max_abs_err, c.max_rel_err, goldens::describe(c));
  return out;
}

// Runs the file's inputs on `backend`; returns its out.* tensors.
std::vector<OwnedTensor> golden_run(const std::string& path, const std::string& backend) {
  goldens::Bundle b = read_file(path);
  RunOptions options;
  options.backend = backend_from(backend);
  try {
    nb::gil_scoped_release unlocked;
    goldens::run_golden(driver_of(b), b, options);
  } catch (const goldens::InputError& e) {
    throw nb::value_error(e.what());
  }
  goldens::Bundle outs;
  for (const auto& name : b.output_names()) outs.tensors.emplace(name, b.at(name));
  return tensors_of(outs);
}

// A golden file of the caller's own inputs: copies them, runs the reference for the outputs and
// writes the file with the operator's tolerance.
void golden_write(const std::string& op, const std::string& params, const std::vector<NamedView>& inputs,
                  const std::string& path) {
  const goldens::OpDriver* driver = &driver_named(op);
  goldens::Bundle b;
  b.op = op;
  try {
    b.params = goldens::json::parse(params);
    for (const auto& [name, spec] : inputs) {
      TensorView v;
      if (auto r = to_view(op, name, spec, &v)) throw nb::value_error(std::get<3>(*r).c_str());
      if (v.memory != MemorySpace::host || !v.is_contiguous())
        throw nb::value_error((op + ": " + name + ": golden files take contiguous host arrays").c_str());
      goldens::Tensor& t = b.add(name, v.dtype, {v.shape.begin(), v.shape.begin() + v.rank});
      std::memcpy(t.bytes(), v.data, t.nbytes());
    }
    nb::gil_scoped_release unlocked;
    goldens::run_golden(*driver, b, RunOptions{Backend::reference});
    b.tolerance = driver->tolerance(b);
    b.metadata["producer"] = std::string("mlakit ") + version() + " (python, reference)";
  } catch (const goldens::InputError& e) {
    throw nb::value_error(e.what());
  } catch (const goldens::json::exception& e) {
    throw nb::value_error((op + ": params: " + e.what()).c_str());
  }
  const Status s = goldens::write_safetensors(path, b);
  if (!s.ok()) throw nb::value_error(s.message.c_str());
}

nb::dict info() {
  nb::dict d;
  d["version"] = version();
  nb::dict backends;
  for (Backend be : {Backend::reference, Backend::cpu, Backend::cuda}) {
    std::string why;
    const bool ok = backend_available(be, &why);
    backends[backend_name(be)] = nb::make_tuple(ok, why);
  }
  d["backends"] = backends;
  d["cpu_model"] = cpu_model();
  d["cpu_features"] = cpu_features();
  d["cpu_supported_isa"] = isa_name(cpu_supported_isa());
  d["isa"] = isa_name(active_isa());
  d["max_isa"] = isa_name(max_isa());
  d["threads"] = cpu_threads();
  nb::list kernels;
  for (const auto& [family, choice] : cpu_kernel_choices()) kernels.append(nb::make_tuple(family, choice));
  d["kernels"] = kernels;
  nb::list ops;
  for (const goldens::OpDriver* op : goldens::all_drivers()) ops.append(op->name());
  d["operators"] = ops;
  return d;
}

void set_isa(const std::string& name) {
  Isa i = Isa::generic;
  if (!parse_isa(name, &i)) throw nb::value_error(("unknown ISA level '" + name + "'").c_str());
  set_max_isa(i);
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "mlakit's C++ library (use the mlakit package, not this module)";
  nb::class_<PackedWeightsHandle>(m, "PackedWeightsHandle")
      .def(nb::init<>())
      .def("pack", &PackedWeightsHandle::pack, nb::arg("params"), nb::arg("views"))
      .def("bytes", &PackedWeightsHandle::bytes)
      .def("layout", &PackedWeightsHandle::layout);
  m.def("call", &call, nb::arg("op"), nb::arg("params"), nb::arg("views"), nb::arg("backend"), nb::arg("cuda_stream"),
        nb::arg("packed").none() = nb::none());
  nb::class_<PlanHandle>(m, "PlanHandle")
      .def(nb::init<>())
      .def("plan", &PlanHandle::plan, nb::arg("op"), nb::arg("params"), nb::arg("views"), nb::arg("backend"),
           nb::arg("cuda_stream"))
      .def("run", &PlanHandle::run, nb::arg("params"), nb::arg("views"), nb::arg("cuda_stream"),
           nb::arg("packed").none() = nb::none())
      .def_prop_ro("backend", [](const PlanHandle& h) { return std::string(backend_name(h.planned().info().backend())); })
      .def_prop_ro("implementation", [](const PlanHandle& h) { return h.planned().info().implementation(); })
      .def_prop_ro("decisions", [](const PlanHandle& h) { return h.planned().info().decisions(); })
      .def_prop_ro("workspace_bytes", [](const PlanHandle& h) { return h.planned().info().workspace_bytes(); });
  m.def("remap", &remap, nb::arg("views"), nb::arg("page_size"), nb::arg("num_blocks"), nb::arg("backend"),
        nb::arg("cuda_stream"));
  m.def("golden_load", &golden_load);
  m.def("golden_check", &golden_check, nb::arg("path"), nb::arg("backend"), nb::arg("candidate") = nb::none());
  m.def("golden_run", &golden_run);
  m.def("golden_write", &golden_write);
  m.def("info", &info);
  m.def("set_max_isa", &set_isa);
  m.def("set_threads", &set_cpu_threads);
  m.def("threads", &cpu_threads);
  m.def("release_cpu_call_buffers", &release_cpu_call_buffers);
}
