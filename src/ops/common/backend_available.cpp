// Which back-ends can run here. It lives with the front door, not in the ground: with the cuda
// back-end built in, the direct call below is also what links the file that registers its
// launchers (src/cuda/runtime.cu) into a program that uses only the static library.
#include "core/common/device_kernels.hpp"
#include "mlakit/backend.hpp"

#if MLAKIT_HAVE_CUDA
#include "cuda/runtime.hpp"
#endif

namespace mlakit {

bool backend_available(Backend b, std::string* why) {
  switch (b) {
    case Backend::automatic:
    case Backend::reference:
    case Backend::cpu:
      return true;
    case Backend::cuda:
#if MLAKIT_HAVE_CUDA
      // A direct call: it also links in the file that registers the back-end's launchers.
      return cuda::device_available(why);
#else
      if (const core::DeviceKernels* k = core::device_kernels(); k != nullptr && k->available != nullptr)
        return k->available(why);  // launchers registered by other means (the tests' CPU emulation)
      if (why) *why = "not built (no CUDA compiler was found at configure time, or MLAKIT_ENABLE_CUDA=OFF)";
      return false;
#endif
  }
  return false;
}

}  // namespace mlakit
