// Host-side facts about the CUDA runtime, callable from code compiled without nvcc.
#pragma once

#include <string>

namespace mlakit::cuda {

// True when the CUDA runtime finds at least one device; otherwise `why` says what it reported.
bool device_available(std::string* why);

}  // namespace mlakit::cuda
