// Golden-file container (docs/golden-format.md): round trips, byte-exact determinism, the exact
// layout, and one test per malformed-file kind the reader must reject.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "goldens/common/safetensors.hpp"

namespace mlakit::goldens {
namespace {

using Bytes = std::vector<std::uint8_t>;

// ---- test files ------------------------------------------------------------------

// A file from a header string (written as is, no padding) and a data section.
Bytes make_file(const std::string& header, const Bytes& data = {}, std::uint64_t declared = ~0ull) {
  const std::uint64_t n = declared == ~0ull ? header.size() : declared;
  Bytes f;
  for (int i = 0; i < 8; ++i) f.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
  f.insert(f.end(), header.begin(), header.end());
  f.insert(f.end(), data.begin(), data.end());
  return f;
}

Bytes zeros(std::size_t n) { return Bytes(n, 0); }

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("mlakit_st_" + std::to_string(::getpid()) + "_" + name)).string();
}

// A bundle holding every dtype, a scalar, an empty tensor and a rank-6 tensor, with params,
// tolerance and metadata.
Bundle sample_bundle() {
  Bundle b;
  b.op = "lightning_indexer";
  b.params = {{"num_heads", 4}, {"mask", "causal"}, {"scale", 0.125}, {"neg", -3}, {"nested", {{"a", {1, 2.5, nullptr}}}}};
  b.tolerance = {{"out.output_indices", {{"selection", {{"top_k", 8}}}}}, {"out.x", {{"atol", 1e-3}, {"rtol", 0.01}}}};
  b.metadata["case"] = "tiny";
  b.metadata["seed"] = "7";
  b.metadata["producer"] = "mlakit test; \"quoted\" \\ and \xc3\xa9";
  std::uint32_t state = 12345;
  auto fill = [&state](Tensor& t) {
    for (std::size_t i = 0; i < t.nbytes(); ++i) {
      state = state * 1664525u + 1013904223u;
      t.bytes()[i] = static_cast<std::uint8_t>(state >> 24);
    }
  };
  Tensor& f8 = b.add("q", DType::f8e4m3, {2, 128});
  for (int i = 0; i < 256; ++i) f8.bytes()[i] = static_cast<std::uint8_t>(i);  // all 256 codes
  fill(b.add("q_s", DType::f32, {2, 3}));
  fill(b.add("k_cache.blocks", DType::bf16, {3, 5}));
  fill(b.add("h", DType::f16, {7}));
  fill(b.add("d", DType::f64, {1, 3}));
  fill(b.add("input_row_offsets", DType::i32, {3}));
  fill(b.add("k_cache.lookup_table", DType::u32, {2, 2}));
  fill(b.add("bytes", DType::u8, {5}));  // odd size: the following tensors must still be aligned
  fill(b.add("scalar", DType::f32, {}));
  b.add("empty", DType::i32, {0, 3});
  fill(b.add("out.rank6", DType::bf16, {1, 2, 1, 2, 1, 2}));
  return b;
}

Bytes serialize(const Bundle& b) {
  Bytes out;
  const Status s = serialize_safetensors(b, &out);
  EXPECT_TRUE(s.ok()) << s.message;
  return out;
}

// The reader must reject `file` with invalid_argument, op "safetensors", a message naming the
// label and containing `problem`, and must leave *out alone.
void expect_rejected(const Bytes& file, const std::string& problem, const std::string& label = "vectors/bad.safetensors") {
  Bundle out;
  out.op = "untouched";
  const Status s = parse_safetensors(file.data(), file.size(), label, &out);
  ASSERT_FALSE(s.ok()) << "accepted; expected: " << problem;
  EXPECT_EQ(s.code, StatusCode::invalid_argument);
  EXPECT_EQ(s.op, "safetensors");
  EXPECT_NE(s.message.find(label), std::string::npos) << s.message;
  EXPECT_NE(s.message.find(problem), std::string::npos) << "message: " << s.message << "\nexpected: " << problem;
  EXPECT_EQ(out.op, "untouched");
  EXPECT_TRUE(out.tensors.empty());
}

void expect_accepted(const Bytes& file, Bundle* out) {
  const Status s = parse_safetensors(file.data(), file.size(), "ok.safetensors", out);
  ASSERT_TRUE(s.ok()) << s.message;
}

// One valid tensor entry.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, std::uint64_t b,
                  std::uint64_t e) {
  std::string s = "\"";
  s += name;
  s += "\":{\"dtype\":\"";
  s += dtype;
  s += "\",\"shape\":";
  s += shape;
  s += ",\"data_offsets\":[";
  s += std::to_string(b);
  s += ",";
  s += std::to_string(e);
  s += "]}";
  return s;
}

// A JSON object from its members, "{m1,m2,...}".
std::string object(std::initializer_list<std::string> members) {
  std::string s = "{";
  for (const auto& m : members) {
    if (s.size() > 1) s += ",";
    s += m;
  }
  s += "}";
  return s;
}

// ---- round trips, determinism, layout ----------------------------------------------

TEST(Safetensors, DtypeNamesMapBothWays) {
  const std::pair<DType, const char*> table[] = {{DType::f8e4m3, "F8_E4M3"}, {DType::bf16, "BF16"}, {DType::f16, "F16"},
                                                 {DType::f32, "F32"},        {DType::f64, "F64"},   {DType::i32, "I32"},
                                                 {DType::u32, "U32"},        {DType::u8, "U8"}};
  for (const auto& [t, name] : table) {
    EXPECT_EQ(safetensors_dtype_name(t), name);
    DType back = DType::u8;
    ASSERT_TRUE(safetensors_dtype_from_name(name, &back)) << name;
    EXPECT_EQ(back, t);
  }
  DType x;
  EXPECT_FALSE(safetensors_dtype_from_name("F8_E5M2", &x));
  EXPECT_FALSE(safetensors_dtype_from_name("f32", &x));
}

TEST(Safetensors, RoundTripsEveryDtypeThroughABuffer) {
  const Bundle b = sample_bundle();
  const Bytes bytes = serialize(b);
  Bundle back;
  expect_accepted(bytes, &back);
  std::string why;
  EXPECT_TRUE(same_bundle(b, back, &why)) << why;
  EXPECT_EQ(back.at("q").dtype(), DType::f8e4m3);
  EXPECT_EQ(back.at("scalar").shape().size(), 0u);
  EXPECT_EQ(back.at("empty").shape(), (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(back.params.at("scale").get<double>(), 0.125);
  EXPECT_TRUE(back.metadata.count("format") == 0) << "the golden format tag is implied, not stored";
  for (const auto& [name, t] : back.tensors) EXPECT_TRUE(t.guard_intact()) << name;
  EXPECT_EQ(serialize(back), bytes);  // and back again, byte for byte
}

TEST(Safetensors, RoundTripsThroughAFileAndIsByteIdentical) {
  const Bundle b = sample_bundle();
  const std::string p1 = temp_path("a.safetensors"), p2 = temp_path("b.safetensors");
  ASSERT_TRUE(write_safetensors(p1, b).ok());
  ASSERT_TRUE(write_safetensors(p2, sample_bundle()).ok());  // an independently built, identical bundle
  EXPECT_EQ(file_bytes(p1), file_bytes(p2));
  EXPECT_FALSE(std::filesystem::exists(p1 + ".partial"));
  Bundle back;
  const Status s = read_safetensors(p1, &back);
  ASSERT_TRUE(s.ok()) << s.message;
  std::string why;
  EXPECT_TRUE(same_bundle(b, back, &why)) << why;
  ASSERT_TRUE(write_safetensors(p2, back).ok());
  EXPECT_EQ(file_bytes(p1), file_bytes(p2));
  std::filesystem::remove(p1);
  std::filesystem::remove(p2);
}

TEST(Safetensors, OutputDoesNotDependOnInsertionOrder) {
  Bundle a, b;
  a.add("x", DType::f32, {2});
  a.add("a", DType::u8, {3});
  a.params = {{"z", 1}, {"a", 2}};
  b.params = {{"a", 2}, {"z", 1}};
  b.add("a", DType::u8, {3});
  b.add("x", DType::f32, {2});
  EXPECT_EQ(serialize(a), serialize(b));
  EXPECT_EQ(serialize(a), serialize(a));
}

TEST(Safetensors, WritesTheExactDocumentedLayout) {
  Bundle b;
  b.op = "x";
  b.params = {{"b", 1.5}, {"a", 1}};
  b.metadata["seed"] = "3";
  Tensor& u = b.add("u", DType::u8, {3});
  u.bytes()[0] = 1, u.bytes()[1] = 2, u.bytes()[2] = 3;
  Tensor& w = b.add("w", DType::f32, {1});
  const float one = 1.0f;
  std::memcpy(w.bytes(), &one, 4);
  const Bytes bytes = serialize(b);
  const std::string json =
      "{\"__metadata__\":{\"format\":\"mlakit-golden/1\",\"op\":\"x\",\"params\":\"{\\\"a\\\":1,\\\"b\\\":1.5}\","
      "\"seed\":\"3\",\"tolerance\":\"{}\"},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[4,7]}}";
  const std::size_t n = (json.size() + 7) / 8 * 8;
  ASSERT_EQ(bytes.size(), 8 + n + 7);
  std::uint64_t declared = 0;
  for (int i = 7; i >= 0; --i) declared = (declared << 8) | bytes[i];
  EXPECT_EQ(declared, n);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  EXPECT_EQ(header, json + std::string(n - json.size(), ' '));
  const Bytes data(bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), bytes.end());
  EXPECT_EQ(data, (Bytes{0x00, 0x00, 0x80, 0x3F, 1, 2, 3}));
}

TEST(Safetensors, EveryTensorIsAlignedToItsElementSize) {
  const Bytes bytes = serialize(sample_bundle());
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  EXPECT_EQ((8 + n) % 8, 0u);
  const json header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  std::size_t last_size = 8;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    DType t;
    ASSERT_TRUE(safetensors_dtype_from_name(e.at("dtype").get<std::string>(), &t));
    const auto begin = e.at("data_offsets")[0].get<std::uint64_t>();
    EXPECT_EQ((8 + n + begin) % dtype_size(t), 0u) << name;
    EXPECT_LE(dtype_size(t), last_size) << name;
  }
}

TEST(Safetensors, LoadsAPlainFileWithoutMetadata) {
  const Bytes f = make_file(object({entry("t", "F32", "[2]", 0, 8)}), zeros(8));
  Bundle b;
  expect_accepted(f, &b);
  EXPECT_TRUE(b.op.empty());
  EXPECT_EQ(b.params, json::object());
  EXPECT_EQ(b.tolerance, json::object());
  EXPECT_TRUE(b.metadata.empty());
  ASSERT_TRUE(b.has("t"));
  EXPECT_EQ(b.at("t").shape(), (std::vector<std::int64_t>{2}));
}

TEST(Safetensors, AcceptsAnyEntryOrderPaddingAndForeignMetadata) {
  // Entries out of data order, a zero-size tensor, a foreign format tag, space padding.
  const std::string h = object({entry("b", "U8", "[2]", 4, 6), entry("z", "U8", "[0]", 6, 6),
                                 "\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"}", entry("a", "F32", "[1]", 0, 4)}) +
                        "   ";
  Bundle b;
  expect_accepted(make_file(h, zeros(6)), &b);
  EXPECT_EQ(b.tensors.size(), 3u);
  EXPECT_EQ(b.metadata.at("format"), "pt");
  EXPECT_EQ(b.metadata.at("note"), "x");
  // A foreign format tag is written back as it was.
  Bundle again;
  expect_accepted(serialize(b), &again);
  std::string why;
  EXPECT_TRUE(same_bundle(b, again, &why)) << why;
}

TEST(Safetensors, AcceptsAnEmptyFile) {
  Bundle b;
  expect_accepted(make_file("{}"), &b);
  EXPECT_TRUE(b.tensors.empty());
  Bundle again;
  expect_accepted(serialize(Bundle{}), &again);
}

// ---- rejected files: container --------------------------------------------------------

TEST(SafetensorsRejects, FileShorterThanTheLengthField) {
  expect_rejected(Bytes{1, 2, 3}, "shorter than the 8-byte header length");
  expect_rejected(Bytes{}, "shorter than the 8-byte header length");
}

TEST(SafetensorsRejects, HeaderLengthPastTheEnd) {
  expect_rejected(make_file("{}", {}, 3), "header length 3 runs past the end of the file (10 bytes)");
}

TEST(SafetensorsRejects, AbsurdHeaderLength) {
  expect_rejected(make_file("{}", {}, ~0ull - 1), "is absurdly large");
  expect_rejected(make_file("{}", {}, kMaxHeaderBytes + 1), "is absurdly large");
}

TEST(SafetensorsRejects, InvalidJson) {
  expect_rejected(make_file("{\"t\":{\"dtype\":\"F32\",}}"), "invalid JSON header");
  expect_rejected(make_file("{\"t\" 1}"), "invalid JSON header: parse error at line 1, column 6: syntax error");
}

TEST(SafetensorsRejects, InvalidUtf8) {
  expect_rejected(make_file("{\"t\xff\":{}}"), "ill-formed UTF-8");
  expect_rejected(make_file("{\"t\xc3\":{}}"), "ill-formed UTF-8");
  expect_rejected(make_file("{\"\\ud800\":{}}"), "invalid JSON header");  // lone surrogate
}

TEST(SafetensorsRejects, HeaderThatIsNotAnObject) {
  expect_rejected(make_file("[1,2]   "), "does not begin with '{'");
  expect_rejected(make_file(" {}"), "does not begin with '{'");
  expect_rejected(make_file("\"{}\""), "does not begin with '{'");
  expect_rejected(make_file(""), "does not begin with '{'");
}

TEST(SafetensorsRejects, BytesAfterTheHeaderObject) {
  expect_rejected(make_file("{}x"), "does not end with '}' followed only by space padding");
  expect_rejected(make_file("{}\n"), "does not end with '}' followed only by space padding");
  expect_rejected(make_file("{}{}"), "invalid JSON header");
  expect_rejected(make_file("{\"a\":{}"), "invalid JSON header");
}

TEST(SafetensorsRejects, NestingTooDeep) {
  std::string deep = "{\"__metadata__\":{\"x\":" + std::string(100, '[') + std::string(100, ']') + "}}";
  expect_rejected(make_file(deep), "nesting deeper than 64 levels");
}

// ---- rejected files: tensor entries -----------------------------------------------------

TEST(SafetensorsRejects, EntryThatIsNotAnObject) {
  expect_rejected(make_file("{\"t\":[1]}"), "tensor 't': entry is a JSON array, not an object");
  expect_rejected(make_file("{\"t\":\"F32\"}"), "tensor 't': entry is the string 'F32', not an object");
}

TEST(SafetensorsRejects, EntryMissingAField) {
  expect_rejected(make_file("{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", zeros(4)), "tensor 't': missing \"dtype\"");
  expect_rejected(make_file("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", zeros(4)), "tensor 't': missing \"shape\"");
  expect_rejected(make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", zeros(4)), "tensor 't': missing \"data_offsets\"");
}

TEST(SafetensorsRejects, EntryWithAnUnknownField) {
  expect_rejected(make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", zeros(4)),
                  "tensor 't': unknown key 'x'");
}

TEST(SafetensorsRejects, EntryFieldsOfTheWrongJsonType) {
  expect_rejected(make_file("{\"t\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}", zeros(4)),
                  "tensor 't': dtype is 5, not a string");
  expect_rejected(make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", zeros(4)),
                  "tensor 't': shape is the string '1', not an array");
  expect_rejected(make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"a\":0}}}", zeros(4)),
                  "tensor 't': data_offsets is a JSON object, not an array");
  expect_rejected(make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", zeros(4)),
                  "tensor 't': data_offsets has 3 elements (expected [begin, end])");
  expect_rejected(make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", zeros(4)),
                  "tensor 't': shape[0] is the string '1', not an integer");
  expect_rejected(make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,null]}}", zeros(4)),
                  "tensor 't': data_offsets[1] is a JSON null, not an integer");
}

TEST(SafetensorsRejects, NegativeOrNonIntegerShape) {
  expect_rejected(make_file(object({entry("t", "F32", "[-1]", 0, 4)}), zeros(4)), "tensor 't': shape[0] = -1 is negative");
  expect_rejected(make_file(object({entry("t", "F32", "[1,2.5]", 0, 4)}), zeros(4)),
                  "tensor 't': shape[1] = 2.5 is not an integer");
  expect_rejected(make_file(object({entry("t", "F32", "[1.0]", 0, 4)}), zeros(4)),
                  "tensor 't': shape[0] = 1.0 is not an integer");
  expect_rejected(make_file(object({entry("t", "F32", "[9223372036854775808]", 0, 4)}), zeros(4)),
                  "tensor 't': shape[0] = 9223372036854775808 is too large");
}

TEST(SafetensorsRejects, NegativeOffsets) {
  expect_rejected(make_file("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", zeros(1)),
                  "tensor 't': data_offsets[0] = -1 is negative");
}

TEST(SafetensorsRejects, RankAboveTheLimit) {
  expect_rejected(make_file(object({entry("t", "U8", "[1,1,1,1,1,1,1]", 0, 1)}), zeros(1)),
                  "tensor 't': shape has rank 7, more than 6");
}

TEST(SafetensorsRejects, UnknownDtype) {
  expect_rejected(make_file(object({entry("t", "I64", "[1]", 0, 8)}), zeros(8)), "tensor 't': unknown dtype 'I64'");
  expect_rejected(make_file(object({entry("t", "f32", "[1]", 0, 4)}), zeros(4)), "tensor 't': unknown dtype 'f32'");
}

TEST(SafetensorsRejects, ShapeProductThatOverflows) {
  expect_rejected(make_file(object({entry("t", "F32", "[4294967296,4294967296]", 0, 0)})),
                  "tensor 't': shape [4294967296, 4294967296] overflows");
  // The byte size overflows although the element count does not.
  expect_rejected(make_file(object({entry("t", "F64", "[2305843009213693952]", 0, 0)})), "overflows");
  // A zero dimension does not excuse the others: every stride must fit.
  expect_rejected(make_file(object({entry("t", "U8", "[0,4294967296,4294967296]", 0, 0)})), "overflows");
}

TEST(SafetensorsRejects, OffsetsThatDisagreeWithTheShape) {
  expect_rejected(make_file(object({entry("t", "F32", "[2,3]", 0, 20)}), zeros(20)),
                  "tensor 't': data_offsets [0, 20] cover 20 bytes but shape [2, 3] x F32 (4 bytes) needs 24");
}

TEST(SafetensorsRejects, OffsetsThatEndBeforeTheyBegin) {
  expect_rejected(make_file(object({entry("t", "U8", "[0]", 4, 0)}), zeros(4)), "data_offsets [4, 0] end before they begin");
}

TEST(SafetensorsRejects, OffsetsThatOverlap) {
  const std::string h = object({entry("a", "F32", "[2]", 0, 8), entry("b", "F32", "[2]", 4, 12)});
  expect_rejected(make_file(h, zeros(12)), "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
  // Two tensors on the same bytes.
  const std::string same = object({entry("a", "F32", "[1]", 0, 4), entry("b", "F32", "[1]", 0, 4)});
  expect_rejected(make_file(same, zeros(4)), "overlap");
}

TEST(SafetensorsRejects, OffsetsThatLeaveAGap) {
  const std::string h = object({entry("a", "F32", "[1]", 0, 4), entry("b", "F32", "[1]", 8, 12)});
  expect_rejected(make_file(h, zeros(12)), "tensor 'b': gap of 4 bytes before data_offsets [8, 12] (previous tensor 'a' ends at 4)");
}

TEST(SafetensorsRejects, OffsetsThatDoNotStartAtZero) {
  expect_rejected(make_file(object({entry("a", "F32", "[1]", 4, 8)}), zeros(8)),
                  "tensor 'a': the data does not start at offset 0 (first tensor starts at 4)");
}

TEST(SafetensorsRejects, OffsetsPastTheEnd) {
  expect_rejected(make_file(object({entry("a", "F32", "[2]", 0, 8)}), zeros(7)),
                  "tensor 'a': data_offsets [0, 8] run past the end of the data section (7 bytes)");
  expect_rejected(make_file(object({entry("a", "U8", "[0]", 9, 9)}), zeros(8)), "run past the end");
}

TEST(SafetensorsRejects, TrailingBytesAfterTheLastTensor) {
  expect_rejected(make_file(object({entry("a", "F32", "[1]", 0, 4)}), zeros(6)),
                  "2 trailing bytes after the last tensor (tensors end at 4, the data section is 6 bytes)");
  expect_rejected(make_file("{}", zeros(1)), "1 trailing bytes after the last tensor");
}

TEST(SafetensorsRejects, DuplicateTensorNames) {
  const std::string h = object({entry("a", "F32", "[1]", 0, 4), entry("a", "F32", "[1]", 4, 8)});
  expect_rejected(make_file(h, zeros(8)), "invalid JSON header: duplicate key 'a'");
  // Duplicates deeper down too.
  expect_rejected(make_file("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}"),
                  "duplicate key 'dtype'");
  expect_rejected(make_file("{\"__metadata__\":{},\"__metadata__\":{}}"), "duplicate key '__metadata__'");
}

// ---- rejected files: metadata --------------------------------------------------------------

TEST(SafetensorsRejects, MetadataThatIsNotAnObject) {
  expect_rejected(make_file("{\"__metadata__\":[\"a\"]}"), "__metadata__ is a JSON array, not an object");
  expect_rejected(make_file("{\"__metadata__\":null}"), "__metadata__ is a JSON null, not an object");
}

TEST(SafetensorsRejects, NonStringMetadataValues) {
  expect_rejected(make_file("{\"__metadata__\":{\"seed\":3}}"), "__metadata__ value of 'seed' is 3, not a string");
  expect_rejected(make_file("{\"__metadata__\":{\"params\":{\"a\":1}}}"),
                  "__metadata__ value of 'params' is a JSON object, not a string");
}

TEST(SafetensorsRejects, DuplicateMetadataKeys) {
  expect_rejected(make_file("{\"__metadata__\":{\"op\":\"a\",\"op\":\"b\"}}"), "duplicate key 'op'");
}

TEST(SafetensorsRejects, ParamsOrToleranceThatAreNotJsonObjects) {
  expect_rejected(make_file("{\"__metadata__\":{\"params\":\"{\\\"a\\\":}\"}}"), "__metadata__ 'params' is not valid JSON");
  expect_rejected(make_file("{\"__metadata__\":{\"tolerance\":\"nope\"}}"), "__metadata__ 'tolerance' is not valid JSON");
  expect_rejected(make_file("{\"__metadata__\":{\"params\":\"[1]\"}}"), "__metadata__ 'params' is a JSON array, not an object");
  expect_rejected(make_file("{\"__metadata__\":{\"params\":\"{\\\"a\\\":1,\\\"a\\\":2}\"}}"),
                  "__metadata__ 'params' is not valid JSON: duplicate key 'a'");
  expect_rejected(make_file("{\"__metadata__\":{\"params\":\"{\\\"a\\\":1e999}\"}}"),
                  "__metadata__ 'params' is not valid JSON");
}

TEST(SafetensorsRejects, MissingOrUnreadableFileNamesThePath) {
  const std::string p = temp_path("does_not_exist.safetensors");
  Bundle b;
  Status s = read_safetensors(p, &b);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code, StatusCode::invalid_argument);
  EXPECT_NE(s.message.find(p), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("no such file"), std::string::npos) << s.message;

  const std::string bad = temp_path("truncated.safetensors");
  ASSERT_TRUE(write_safetensors(bad, sample_bundle()).ok());
  std::filesystem::resize_file(bad, std::filesystem::file_size(bad) - 1);
  s = read_safetensors(bad, &b);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message.find(bad), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("run past the end of the data section"), std::string::npos) << s.message;
  std::filesystem::remove(bad);
}

TEST(SafetensorsRejects, EveryTruncationOfAValidFile) {
  // No prefix of a valid file loads, and none crashes.
  const Bytes full = serialize(sample_bundle());
  for (std::size_t n = 0; n < full.size(); ++n) {
    Bundle b;
    const Bytes part(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_FALSE(parse_safetensors(part.data(), part.size(), "cut", &b).ok()) << n;
  }
}

// ---- the writer refuses what it could not read back -----------------------------------------

void expect_write_refused(const Bundle& b, const std::string& problem) {
  Bytes out;
  const Status s = serialize_safetensors(b, &out);
  ASSERT_FALSE(s.ok()) << "written; expected: " << problem;
  EXPECT_EQ(s.op, "safetensors");
  EXPECT_NE(s.message.find(problem), std::string::npos) << s.message;
}

TEST(SafetensorsWriter, RefusesUnreadableBundles) {
  Bundle reserved;
  reserved.metadata["op"] = "x";
  expect_write_refused(reserved, "Bundle::metadata may not hold 'op'");

  Bundle named;
  named.add("__metadata__", DType::u8, {1});
  expect_write_refused(named, "a tensor may not be named '__metadata__'");

  Bundle not_utf8;
  not_utf8.add("t\xff", DType::u8, {1});
  expect_write_refused(not_utf8, "is not UTF-8");

  Bundle nan_param;
  nan_param.params = {{"scale", std::numeric_limits<double>::quiet_NaN()}};
  expect_write_refused(nan_param, "params holds a non-finite number");

  Bundle array_tol;
  array_tol.tolerance = json::array();
  expect_write_refused(array_tol, "tolerance is a JSON array, not an object");

  Bundle rank7;
  rank7.add("t", DType::u8, {1, 1, 1, 1, 1, 1, 1});
  expect_write_refused(rank7, "rank 7 is more than 6");
}

TEST(SafetensorsWriter, ReportsAnUnwritablePath) {
  const Status s = write_safetensors("/nonexistent-dir/x.safetensors", sample_bundle());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message.find("/nonexistent-dir/x.safetensors"), std::string::npos) << s.message;
}

}  // namespace
}  // namespace mlakit::goldens
