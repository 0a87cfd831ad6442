// Overlap tests point a written view into an input's bytes. Where the input is smaller than the
// written view, the view also runs into whatever the heap put after the input, and the validator
// may name that neighbour first. Moving the input to the front of a private buffer with room for
// the whole view makes the view overlap that input and nothing else, whatever the heap layout.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "goldens/common/tensor.hpp"

namespace mlakit::test_support {

// Copies `input`'s bytes to the front of `storage` (sized for `room_bytes` more than the input),
// repoints `input` there and returns the buffer's start. `storage` must outlive the call.
inline std::uint8_t* move_alone(TensorView& input, goldens::Tensor& storage, std::int64_t room_bytes) {
  storage = goldens::Tensor(DType::u8, {input.size_bytes() + std::max<std::int64_t>(room_bytes, 0)});
  std::memcpy(storage.bytes(), input.data, static_cast<std::size_t>(input.size_bytes()));
  input.data = storage.bytes();
  return storage.bytes();
}

}  // namespace mlakit::test_support
