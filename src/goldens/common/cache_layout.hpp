// Caches laid out as engines keep them, for the tests: while a CacheRelayout scope is active on a
// thread, cache_view() (tensor.hpp) hands out views of the bundle's paged caches in another layout
// with the same contents: blocks padded apart, K and V interleaved per layer, or the layers
// outermost (one tensor per layer, side by side). finish() copies the caches an operator wrote
// (out.*) back into the bundle in the contiguous layout, so that outputs compare bit for bit with
// a run on the contiguous cache.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mlakit/tensor_view.hpp"

namespace mlakit::goldens {

enum class CacheLayout {
  contiguous,
  padded_blocks,   // each block followed by 64 unused elements (a padded block stride)
  kv_interleaved,  // [num_blocks, num_layers, kv_dim, ...]: a layer's K and V side by side
  layers_outer,    // [num_layers, num_blocks, kv_dim, ...]: one tensor per layer, back to back
  padded_rows,     // each row followed by 3 unused elements: rows start off every vector alignment
};
const char* cache_layout_name(CacheLayout l);

class CacheRelayout {
 public:
  explicit CacheRelayout(CacheLayout layout);
  ~CacheRelayout();
  CacheRelayout(const CacheRelayout&) = delete;
  CacheRelayout& operator=(const CacheRelayout&) = delete;

  // The view of tensor `name` of the bundle (a 6-d cache tensor) in this layout; made (and the
  // contents copied in) on first use.
  TensorView relaid(const std::string& name, const TensorView& contiguous);
  // Copies the out.* caches back into the bundle and ends the scope.
  void finish();

 private:
  struct Storage {
    std::unique_ptr<std::byte[]> memory;
    TensorView view;        // in this layout
    TensorView contiguous;  // the bundle tensor's view
  };
  CacheLayout layout_;
  std::map<std::string, Storage> storage_;
  CacheRelayout* previous_;
  bool active_ = true;
};

// The innermost active scope of this thread, or null.
CacheRelayout* current_relayout();

}  // namespace mlakit::goldens
