// The one exception the golden drivers throw for what a file, a knob or a size asked of it: what() is
// the complete, user-facing message ("<op>: params.<key>=<value> (<what was expected>)"), so the
// tools print it as it is, with exit status 2.
#pragma once

#include <stdexcept>

namespace mlakit::goldens {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace mlakit::goldens
