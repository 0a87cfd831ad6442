// Golden-vector files (docs/golden-format.md): a strict safetensors reader and a deterministic
// writer for Bundles.
//
// Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the raw
// little-endian tensor data. Element types: F8_E4M3 (f8e4m3), BF16, F16, F32, F64, I32, U32, U8.
//
// Writer (byte-identical output for identical bundles):
//  * "__metadata__" first, its keys in sorted order: format ("mlakit-golden/1" unless
//    Bundle::metadata names another), op (omitted when empty), params and tolerance (compact
//    nlohmann dumps of JSON objects: keys sorted, shortest round-trip numbers), then every entry of
//    Bundle::metadata (producer, case, seed, ...). "op", "params" and "tolerance" may not appear in
//    Bundle::metadata: they have their own fields.
//  * Then one entry per tensor, {"dtype","shape","data_offsets"}, in data order. The data order is
//    element size descending, then name (byte-wise): with the header padded by spaces to a multiple
//    of 8 bytes, every tensor starts at a multiple of its element size in the file, so readers that
//    map the file (torch.frombuffer, numpy memmap, cudaMemcpy from an mmap) get aligned views. This is
//    also the order the reference safetensors writer uses. Offsets have no gaps.
//  * Refuses what it could not read back: rank above kMaxRank, negative dimensions, a shape whose
//    byte size overflows, a tensor named "__metadata__", names or strings that are not UTF-8,
//    params/tolerance that are not objects or hold non-finite numbers.
//
// Reader (strict; every failure is a Status with code invalid_argument, op "safetensors", and a
// message "safetensors: <file>: <problem>"; no exception escapes; *out is untouched on failure):
//  * The file must hold the 8-byte length; N <= 100 MB (kMaxHeaderBytes) and 8 + N <= file size.
//  * The header must begin with '{', end with '}' followed only by space padding (0x20), be valid
//    UTF-8 JSON (no duplicate keys at any depth, nesting <= kMaxJsonDepth, finite numbers) and be
//    an object.
//  * Each tensor entry is an object with exactly the keys dtype (a known dtype string), shape
//    (array of non-negative integers, rank <= kMaxRank, product of non-zero dimensions and byte size
//    within int64) and data_offsets ([begin, end], non-negative integers, begin <= end,
//    end - begin == numel x element size).
//  * The JSON order of the entries is free (writers differ); sorted by offsets, the tensors must
//    start at 0 and tile the data section without gaps or overlaps, and the last one must end
//    exactly at the end of the file: trailing bytes after the last tensor are rejected, as the
//    reference safetensors reader does (they would hide data no reader sees, and a truncated or
//    concatenated file would otherwise load).
//  * "__metadata__" is optional (a plain safetensors file from Python loads); when present it must
//    be an object of strings. "op" goes to Bundle::op; "params" and "tolerance", when present, must
//    parse (same strict JSON rules) to objects and go to Bundle::params / Bundle::tolerance; every
//    other key (producer, case, seed, ...) goes to Bundle::metadata unchanged, except
//    format = "mlakit-golden/1", which is dropped because the writer adds it by default: so
//    read(write(b)) == b for a generated bundle and write(read(f)) == f for a golden file, while a
//    foreign tag (e.g. format = "pt") is kept and written back. Whether a file must carry op/params
//    is the caller's decision.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "goldens/common/tensor.hpp"
#include "mlakit/status.hpp"

namespace mlakit::goldens {

inline constexpr const char* kGoldenFormat = "mlakit-golden/1";
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit
inline constexpr int kMaxJsonDepth = 64;

Status write_safetensors(const std::string& path, const Bundle& b);
// The bytes write_safetensors writes (the fuzzer and the tests use it without a file).
Status serialize_safetensors(const Bundle& b, std::vector<std::uint8_t>* out);

Status read_safetensors(const std::string& path, Bundle* out);
// `label` names the source in error messages (read_safetensors passes the path).
Status parse_safetensors(const std::uint8_t* data, std::size_t size, const std::string& label, Bundle* out);

// True when a and b hold the same op, params, tolerance, metadata and tensors (names, dtypes,
// shapes, data bytes): what a write/read round trip preserves. Otherwise *why (if given) says
// what differs first.
bool same_bundle(const Bundle& a, const Bundle& b, std::string* why = nullptr);

// safetensors dtype strings <-> DType ("F8_E4M3" <-> f8e4m3, "BF16", "F16", "F32", "F64", "I32",
// "U32", "U8").
std::string_view safetensors_dtype_name(DType t);
bool safetensors_dtype_from_name(std::string_view name, DType* out);

}  // namespace mlakit::goldens
