#pragma once

namespace mlakit {
const char* version();
}
