#include "goldens/common/safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <new>
#include <utility>

namespace mlakit::goldens {
namespace {

constexpr const char* kOp = "safetensors";
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

// ---- messages ------------------------------------------------------------------

// A string from the file, fit for a one-line message: quoted, non-ASCII and control bytes as \xNN,
// long strings cut short.
std::string shown(std::string_view s, std::size_t max = 80) {
  std::string r = "'";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i == max) {
      r += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7F || c == '\'' || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      r += buf;
    } else {
      r += static_cast<char>(c);
    }
  }
  return r + "'";
}

Status fail(const std::string& label, const std::string& field, const std::string& problem) {
  return Status::error(StatusCode::invalid_argument, kOp, field, std::string(kOp) + ": " + label + ": " + problem);
}

std::string tensor_field(const std::string& name) { return "tensor " + shown(name); }

// A scalar JSON value for a message ("3", "-1", "2.5", "a string").
std::string describe(const json& v) {
  if (v.is_number()) return v.dump();
  if (v.is_string()) return "the string " + shown(v.get_ref<const std::string&>());
  return std::string("a JSON ") + v.type_name();
}

// ---- strict JSON -----------------------------------------------------------------

// A DOM builder for nlohmann's SAX parser that rejects duplicate keys at any depth (the stock
// parser silently keeps the last one), nesting deeper than kMaxJsonDepth, and non-finite numbers.
class StrictJson {
 public:
  json root;
  std::string error;

  bool null() { return place(json(nullptr)); }
  bool boolean(bool v) { return place(json(v)); }
  bool number_integer(json::number_integer_t v) { return place(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return place(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t& text) {
    if (!std::isfinite(v)) return set_error("number " + shown(text) + " is out of range");
    return place(json(v));
  }
  bool string(json::string_t& v) { return place(json(std::move(v))); }
  bool binary(json::binary_t&) { return set_error("binary values are not JSON"); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    json* obj = stack_.back();
    if (obj->contains(k)) return set_error("duplicate key " + shown(k));
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const json::exception& ex) {
    std::string what = ex.what();
    const auto bracket = what.find("] ");
    if (what.rfind("[json.exception.", 0) == 0 && bracket != std::string::npos) what = what.substr(bracket + 2);
    // The parser quotes the offending input; keep the message printable.
    std::string clean;
    for (char ch : what) {
      const auto c = static_cast<unsigned char>(ch);
      if (c < 0x20 || c >= 0x7F) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02X", c);
        clean += buf;
      } else {
        clean += ch;
      }
    }
    if (clean.size() > 240) clean = clean.substr(0, 240) + "...";
    return set_error(clean);
  }

 private:
  std::vector<json*> stack_;
  std::string key_;

  bool set_error(std::string e) {
    if (error.empty()) error = std::move(e);
    return false;
  }
  json* slot(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    json& s = (*top)[key_];
    s = std::move(v);
    return &s;
  }
  bool place(json&& v) {
    slot(std::move(v));
    return true;
  }
  bool open(json&& container) {
    if (static_cast<int>(stack_.size()) >= kMaxJsonDepth)
      return set_error("nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    stack_.push_back(slot(std::move(container)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
};

bool parse_strict_json(const char* first, const char* last, json* out, std::string* error) {
  StrictJson sax;
  bool ok = false;
  try {
    ok = json::sax_parse(first, last, &sax, json::input_format_t::json, /*strict=*/true,
                         /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    sax.error = std::string("parser failure: ") + e.what();
    ok = false;
  }
  if (!ok) {
    *error = sax.error.empty() ? "syntax error" : sax.error;
    return false;
  }
  *out = std::move(sax.root);
  return true;
}

// What the writer refuses in params/tolerance because the reader would refuse it (or read back
// something else): non-finite numbers (dumped as null), binary values, nesting past the limit.
bool check_json_value(const json& v, int depth, std::string* why) {
  if (v.is_structured()) {
    if (depth + 1 > kMaxJsonDepth) {
      *why = "nests deeper than " + std::to_string(kMaxJsonDepth) + " levels";
      return false;
    }
    for (const auto& child : v) {
      if (!check_json_value(child, depth + 1, why)) return false;
    }
    return true;
  }
  if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    *why = "holds a non-finite number";
    return false;
  }
  if (v.is_binary() || v.is_discarded()) {
    *why = std::string("holds a ") + v.type_name() + " value";
    return false;
  }
  return true;
}

// ---- shapes ------------------------------------------------------------------------

// Element count and byte size of a shape; false when the product of the non-zero dimensions (every
// stride of the tensor) or the byte size does not fit in int64.
bool shape_size(const std::vector<std::int64_t>& shape, std::size_t esize, std::int64_t* numel, std::int64_t* bytes) {
  std::int64_t nonzero = 1;
  bool has_zero = false;
  for (std::int64_t d : shape) {
    if (d == 0) {
      has_zero = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero, d, &nonzero)) return false;
  }
  *numel = has_zero ? 0 : nonzero;
  if (__builtin_mul_overflow(nonzero, static_cast<std::int64_t>(esize), bytes)) return false;
  *bytes = *numel * static_cast<std::int64_t>(esize);
  return true;
}

std::uint64_t load_le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---- reader --------------------------------------------------------------------------

struct Entry {
  std::string name;
  DType dtype = DType::u8;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;
};

// A non-negative integer that fits in int64, or an error naming `what`.
bool get_index(const json& v, const std::string& what, std::uint64_t* out, std::string* why) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<json::number_unsigned_t>();
    if (u > static_cast<std::uint64_t>(kInt64Max)) {
      *why = what + " = " + v.dump() + " is too large";
      return false;
    }
    *out = u;
    return true;
  }
  if (v.is_number_integer()) {
    *why = what + " = " + v.dump() + " is negative";
  } else if (v.is_number_float()) {
    *why = what + " = " + v.dump() + " is not an integer";
  } else {
    *why = what + " is " + describe(v) + ", not an integer";
  }
  return false;
}

Status parse_entry(const std::string& label, const std::string& name, const json& v, Entry* e) {
  const std::string field = tensor_field(name);
  const std::string who = "tensor " + shown(name);
  if (!v.is_object()) return fail(label, field, who + ": entry is " + describe(v) + ", not an object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& k = it.key();
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      return fail(label, field, who + ": unknown key " + shown(k) + " (expected dtype, shape, data_offsets)");
  }
  for (const char* k : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(k)) return fail(label, field, who + ": missing \"" + k + "\"");
  }
  e->name = name;

  const json& dt = v.at("dtype");
  if (!dt.is_string()) return fail(label, field + ".dtype", who + ": dtype is " + describe(dt) + ", not a string");
  if (!safetensors_dtype_from_name(dt.get_ref<const std::string&>(), &e->dtype))
    return fail(label, field + ".dtype",
                who + ": unknown dtype " + shown(dt.get_ref<const std::string&>()) +
                    " (expected one of F8_E4M3, BF16, F16, F32, F64, I32, U32, U8)");

  const json& sh = v.at("shape");
  if (!sh.is_array()) return fail(label, field + ".shape", who + ": shape is " + describe(sh) + ", not an array");
  if (sh.size() > static_cast<std::size_t>(kMaxRank))
    return fail(label, field + ".shape",
                who + ": shape has rank " + std::to_string(sh.size()) + ", more than " + std::to_string(kMaxRank));
  std::string why;
  for (std::size_t i = 0; i < sh.size(); ++i) {
    std::uint64_t d = 0;
    if (!get_index(sh[i], "shape[" + std::to_string(i) + "]", &d, &why)) return fail(label, field + ".shape", who + ": " + why);
    e->shape.push_back(static_cast<std::int64_t>(d));
  }
  std::int64_t numel = 0, bytes = 0;
  const std::size_t esize = dtype_size(e->dtype);
  if (!shape_size(e->shape, esize, &numel, &bytes))
    return fail(label, field + ".shape",
                who + ": shape " + shape_text(e->shape) + " overflows: its size does not fit in 64 bits");

  const json& off = v.at("data_offsets");
  if (!off.is_array())
    return fail(label, field + ".data_offsets", who + ": data_offsets is " + describe(off) + ", not an array");
  if (off.size() != 2)
    return fail(label, field + ".data_offsets",
                who + ": data_offsets has " + std::to_string(off.size()) + " elements (expected [begin, end])");
  if (!get_index(off[0], "data_offsets[0]", &e->begin, &why) || !get_index(off[1], "data_offsets[1]", &e->end, &why))
    return fail(label, field + ".data_offsets", who + ": " + why);
  const std::string range = "[" + std::to_string(e->begin) + ", " + std::to_string(e->end) + "]";
  if (e->end < e->begin)
    return fail(label, field + ".data_offsets", who + ": data_offsets " + range + " end before they begin");
  if (e->end - e->begin != static_cast<std::uint64_t>(bytes))
    return fail(label, field + ".data_offsets",
                who + ": data_offsets " + range + " cover " + std::to_string(e->end - e->begin) + " bytes but shape " +
                    shape_text(e->shape) + " x " + std::string(safetensors_dtype_name(e->dtype)) + " (" +
                    std::to_string(esize) + " bytes) needs " + std::to_string(bytes));
  return Status::success();
}

Status parse_json_metadata(const std::string& label, const std::string& key, const std::string& text, json* out) {
  const std::string field = "__metadata__." + key;
  std::string why;
  json v;
  if (!parse_strict_json(text.data(), text.data() + text.size(), &v, &why))
    return fail(label, field, "__metadata__ " + shown(key) + " is not valid JSON: " + why);
  if (!v.is_object())
    return fail(label, field, "__metadata__ " + shown(key) + " is a JSON " + v.type_name() + ", not an object");
  *out = std::move(v);
  return Status::success();
}

Status parse_metadata(const std::string& label, const json& m, Bundle* b) {
  if (!m.is_object()) return fail(label, "__metadata__", "__metadata__ is " + describe(m) + ", not an object");
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string())
      return fail(label, "__metadata__." + k,
                  "__metadata__ value of " + shown(k) + " is " + describe(v) + ", not a string");
    const std::string& s = v.get_ref<const std::string&>();
    if (k == "op") {
      b->op = s;
    } else if (k == "params") {
      Status st = parse_json_metadata(label, k, s, &b->params);
      if (!st.ok()) return st;
    } else if (k == "tolerance") {
      Status st = parse_json_metadata(label, k, s, &b->tolerance);
      if (!st.ok()) return st;
    } else if (k == "format" && s == kGoldenFormat) {
      // The writer's default: a bundle without a "format" entry is a golden bundle.
    } else {
      b->metadata[k] = s;
    }
  }
  return Status::success();
}

Status parse_impl(const std::uint8_t* data, std::size_t size, const std::string& label, Bundle* out) {
  if (size < 8)
    return fail(label, "header length",
                "the file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  const std::uint64_t n = load_le64(data);
  if (n > kMaxHeaderBytes)
    return fail(label, "header length",
                "header length " + std::to_string(n) + " is absurdly large (limit " + std::to_string(kMaxHeaderBytes) +
                    " bytes)");
  if (n > size - 8)
    return fail(label, "header length",
                "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) +
                    " bytes)");
  const char* h = reinterpret_cast<const char*>(data + 8);
  if (n == 0 || h[0] != '{') return fail(label, "header", "the JSON header does not begin with '{'");
  std::size_t hend = static_cast<std::size_t>(n);
  while (hend > 0 && h[hend - 1] == ' ') --hend;
  if (hend == 0 || h[hend - 1] != '}')
    return fail(label, "header", "the JSON header does not end with '}' followed only by space padding");
  json header;
  std::string why;
  if (!parse_strict_json(h, h + hend, &header, &why)) return fail(label, "header", "invalid JSON header: " + why);
  if (!header.is_object()) return fail(label, "header", "the JSON header is not an object");

  Bundle b;
  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      Status s = parse_metadata(label, v, &b);
      if (!s.ok()) return s;
      continue;
    }
    Entry e;
    Status s = parse_entry(label, name, v, &e);
    if (!s.ok()) return s;
    entries.push_back(std::move(e));
  }

  // The tensors, in data order, must tile the data section exactly.
  const std::uint64_t data_size = size - 8 - n;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& c) {
    if (a.begin != c.begin) return a.begin < c.begin;
    if (a.end != c.end) return a.end < c.end;
    return a.name < c.name;
  });
  std::uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    const std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    const std::string field = tensor_field(e.name) + ".data_offsets";
    const std::string who = "tensor " + shown(e.name);
    if (e.end > data_size)
      return fail(label, field,
                  who + ": data_offsets " + range + " run past the end of the data section (" +
                      std::to_string(data_size) + " bytes)");
    if (e.begin > cursor) {
      if (prev == nullptr)
        return fail(label, field, who + ": the data does not start at offset 0 (first tensor starts at " +
                                      std::to_string(e.begin) + ")");
      return fail(label, field,
                  who + ": gap of " + std::to_string(e.begin - cursor) + " bytes before data_offsets " + range +
                      " (previous tensor " + shown(prev->name) + " ends at " + std::to_string(cursor) + ")");
    }
    if (e.begin < cursor)
      return fail(label, field,
                  who + ": data_offsets " + range + " overlap tensor " + shown(prev->name) + " [" +
                      std::to_string(prev->begin) + ", " + std::to_string(prev->end) + "]");
    cursor = e.end;
    prev = &e;
  }
  if (cursor != data_size)
    return fail(label, "data",
                std::to_string(data_size - cursor) + " trailing bytes after the last tensor (tensors end at " +
                    std::to_string(cursor) + ", the data section is " + std::to_string(data_size) + " bytes)");

  const std::uint8_t* base = data + 8 + n;
  for (const Entry& e : entries) {
    Tensor t(e.dtype, e.shape);
    if (t.nbytes() > 0) std::memcpy(t.bytes(), base + e.begin, t.nbytes());
    b.tensors.emplace(e.name, std::move(t));
  }
  *out = std::move(b);
  return Status::success();
}

// ---- writer -------------------------------------------------------------------------

// A JSON string literal; false (with the reason) when s is not UTF-8.
bool json_string(const std::string& s, std::string* out, std::string* why) {
  try {
    *out = json(s).dump();
    return true;
  } catch (const json::exception& e) {
    *why = e.what();
    return false;
  }
}

Status serialize_impl(const Bundle& b, const std::string& label, std::vector<std::uint8_t>* out) {
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : b.metadata) {
    if (k == "op" || k == "params" || k == "tolerance")
      return fail(label, "__metadata__." + k,
                  "Bundle::metadata may not hold " + shown(k) + ": it has its own Bundle field");
    meta[k] = v;
  }
  meta.emplace("format", kGoldenFormat);
  if (!b.op.empty()) meta["op"] = b.op;
  const std::pair<const char*, const json*> objects[] = {{"params", &b.params}, {"tolerance", &b.tolerance}};
  for (const auto& [key, value] : objects) {
    if (!value->is_object())
      return fail(label, std::string("__metadata__.") + key,
                  std::string(key) + " is a JSON " + value->type_name() + ", not an object");
    std::string why;
    if (!check_json_value(*value, 0, &why))
      return fail(label, std::string("__metadata__.") + key, std::string(key) + " " + why);
    try {
      meta[key] = value->dump();
    } catch (const json::exception& e) {
      return fail(label, std::string("__metadata__.") + key, std::string(key) + " cannot be written: " + e.what());
    }
  }

  std::string header = "{\"__metadata__\":{";
  bool first = true;
  for (const auto& [k, v] : meta) {
    std::string ks, vs, why;
    if (!json_string(k, &ks, &why) || !json_string(v, &vs, &why))
      return fail(label, "__metadata__." + k, "__metadata__ entry " + shown(k) + " is not UTF-8: " + why);
    header += (first ? "" : ",") + ks + ":" + vs;
    first = false;
  }
  header += "}";

  struct Item {
    const std::string* name;
    const Tensor* t;
  };
  std::vector<Item> items;
  for (const auto& [name, t] : b.tensors) {
    const std::string field = tensor_field(name);
    if (name == "__metadata__") return fail(label, field, "a tensor may not be named '__metadata__'");
    if (t.shape().size() > static_cast<std::size_t>(kMaxRank))
      return fail(label, field + ".shape",
                  "tensor " + shown(name) + ": rank " + std::to_string(t.shape().size()) + " is more than " +
                      std::to_string(kMaxRank));
    std::int64_t numel = 0, bytes = 0;
    for (std::int64_t d : t.shape()) {
      if (d < 0) return fail(label, field + ".shape", "tensor " + shown(name) + ": shape " + shape_text(t.shape()) + " has a negative dimension");
    }
    if (!shape_size(t.shape(), dtype_size(t.dtype()), &numel, &bytes))
      return fail(label, field + ".shape", "tensor " + shown(name) + ": shape " + shape_text(t.shape()) + " overflows");
    items.push_back({&name, &t});
  }
  // Element size descending, then name: every tensor lands on a multiple of its element size.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& c) {
    return dtype_size(a.t->dtype()) > dtype_size(c.t->dtype());
  });

  std::uint64_t offset = 0;
  for (const Item& it : items) {
    std::string ns, why;
    if (!json_string(*it.name, &ns, &why))
      return fail(label, tensor_field(*it.name), "tensor name " + shown(*it.name) + " is not UTF-8: " + why);
    std::string shape = "[";
    for (std::size_t i = 0; i < it.t->shape().size(); ++i) shape += (i ? "," : "") + std::to_string(it.t->shape()[i]);
    shape += "]";
    const std::uint64_t end = offset + it.t->nbytes();
    header += "," + ns + ":{\"dtype\":\"" + std::string(safetensors_dtype_name(it.t->dtype())) + "\",\"shape\":" + shape +
              ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  if (header.size() > kMaxHeaderBytes)
    return fail(label, "header", "the header would be " + std::to_string(header.size()) + " bytes, over the limit");

  std::vector<std::uint8_t> bytes;
  bytes.reserve(8 + header.size() + offset);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  for (const Item& it : items) bytes.insert(bytes.end(), it.t->bytes(), it.t->bytes() + it.t->nbytes());
  *out = std::move(bytes);
  return Status::success();
}

}  // namespace

std::string_view safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f8e4m3: return "F8_E4M3";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i32: return "I32";
    case DType::u32: return "U32";
    case DType::u8: return "U8";
    case DType::e8m0: return "F8_E8M0";
  }
  return "?";
}

bool safetensors_dtype_from_name(std::string_view name, DType* out) {
  for (DType t : {DType::f8e4m3, DType::bf16, DType::f16, DType::f32, DType::f64, DType::i32, DType::u32, DType::u8, DType::e8m0}) {
    if (safetensors_dtype_name(t) == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

bool same_bundle(const Bundle& a, const Bundle& b, std::string* why) {
  auto differ = [why](std::string w) {
    if (why) *why = std::move(w);
    return false;
  };
  if (a.op != b.op) return differ("op " + shown(a.op) + " vs " + shown(b.op));
  if (a.params != b.params) return differ("params differ");
  if (a.tolerance != b.tolerance) return differ("tolerance differs");
  if (a.metadata != b.metadata) return differ("metadata differs");
  if (a.tensors.size() != b.tensors.size())
    return differ(std::to_string(a.tensors.size()) + " vs " + std::to_string(b.tensors.size()) + " tensors");
  for (const auto& [name, t] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end()) return differ("tensor " + shown(name) + " missing from the second bundle");
    if (!t.same_bytes(it->second)) return differ("tensor " + shown(name) + " differs (dtype, shape or bytes)");
  }
  return true;
}

Status parse_safetensors(const std::uint8_t* data, std::size_t size, const std::string& label, Bundle* out) {
  try {
    return parse_impl(data, size, label, out);
  } catch (const std::bad_alloc&) {
    return fail(label, "file", "out of memory while reading");
  } catch (const std::exception& e) {
    return fail(label, "file", std::string("unexpected failure while reading: ") + e.what());
  }
}

Status read_safetensors(const std::string& path, Bundle* out) {
  try {
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(st)) return fail(path, "file", "cannot open: no such file");
    if (!std::filesystem::is_regular_file(st)) return fail(path, "file", "cannot read: not a regular file");
    std::ifstream in(path, std::ios::binary);
    if (!in) return fail(path, "file", "cannot open for reading");
    std::vector<std::uint8_t> bytes;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) return fail(path, "file", "cannot read its size: " + ec.message());
    bytes.resize(static_cast<std::size_t>(size));
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (static_cast<std::uintmax_t>(in.gcount()) != size) return fail(path, "file", "short read");
    return parse_safetensors(bytes.data(), bytes.size(), path, out);
  } catch (const std::bad_alloc&) {
    return fail(path, "file", "out of memory while reading");
  } catch (const std::exception& e) {
    return fail(path, "file", std::string("unexpected failure while reading: ") + e.what());
  }
}

Status serialize_safetensors(const Bundle& b, std::vector<std::uint8_t>* out) {
  try {
    return serialize_impl(b, "<buffer>", out);
  } catch (const std::exception& e) {
    return fail("<buffer>", "file", std::string("unexpected failure while writing: ") + e.what());
  }
}

Status write_safetensors(const std::string& path, const Bundle& b) {
  try {
    std::vector<std::uint8_t> bytes;
    Status s = serialize_impl(b, path, &bytes);
    if (!s.ok()) return s;
    // Written next to the target, then renamed: a failed write never leaves a half file behind.
    const std::string tmp = path + ".partial";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      if (!f) return fail(path, "file", "cannot open for writing");
      f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      f.close();
      if (!f) {
        std::remove(tmp.c_str());
        return Status::error(StatusCode::internal, kOp, "file", std::string(kOp) + ": " + path + ": write failed");
      }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
      std::remove(tmp.c_str());
      return Status::error(StatusCode::internal, kOp, "file",
                           std::string(kOp) + ": " + path + ": cannot rename into place: " + ec.message());
    }
    return Status::success();
  } catch (const std::exception& e) {
    return Status::error(StatusCode::internal, kOp, "file",
                         std::string(kOp) + ": " + path + ": unexpected failure while writing: " + e.what());
  }
}

}  // namespace mlakit::goldens
