// Builds without the CUDA back-end have no GPU to probe.
#include "bench/gpu_peak.hpp"

namespace mlakit::bench {

const GpuPeak& gpu_peak() {
  static const GpuPeak p = [] {
    GpuPeak g;
    g.why = "built without the CUDA back-end";
    return g;
  }();
  return p;
}

std::string describe(const GpuPeak& p) { return "gpu peak: n/a (" + p.why + ")"; }

}  // namespace mlakit::bench
