#include "goldens/common/compare.hpp"

#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

namespace mlakit::goldens {
namespace {

bool shapes_match(const std::string& name, const Tensor& e, const Tensor& a, Comparison* c) {
  if (e.dtype() == a.dtype() && e.shape() == a.shape()) return true;
  c->pass = false;
  c->detail = name + ": dtype/shape differ from the expected tensor";
  return false;
}

void note_failure(Comparison* c, std::int64_t i, double e, double a, const char* why) {
  if (c->mismatches++ == 0) {
    std::ostringstream s;
    s.precision(9);
    s << c->name << "[" << i << "]: expected " << e << ", got " << a << " (" << why << ")";
    c->detail = s.str();
  }
  c->pass = false;
}

// Element by element: NaN must meet NaN and an infinity the same infinity; every other element
// must lie within allowance(i, expected) of the expected value. Records the error statistics and
// the element that comes closest to (or furthest past) its allowance.
template <class Allowance>
void check_within(const Tensor& expected, const Tensor& actual, Allowance allowance, const char* why,
                  Comparison* c) {
  double worst = -1;
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    const double e = expected.value(i), a = actual.value(i);
    if (std::isnan(e) || std::isnan(a)) {
      if (std::isnan(e) != std::isnan(a)) note_failure(c, i, e, a, "NaN mismatch");
      continue;
    }
    if (std::isinf(e) || std::isinf(a)) {
      if (e != a) note_failure(c, i, e, a, "infinity mismatch");
      continue;
    }
    const double err = std::fabs(a - e);
    const double rel = err / (std::fabs(e) > 0 ? std::fabs(e) : 1.0);
    if (err > c->max_abs_err) c->max_abs_err = err;
    if (rel > c->max_rel_err) c->max_rel_err = rel;
    const double excess = err - allowance(i, e);
    if (excess > worst) {
      worst = excess;
      c->worst_index = i;
    }
    if (excess > 0) note_failure(c, i, e, a, why);
  }
}

}  // namespace

Comparison compare_close(const std::string& name, const Tensor& expected, const Tensor& actual, double atol,
                         double rtol, std::int64_t row_len, double min_cosine) {
  Comparison c;
  c.name = name;
  c.kind = "close";
  if (!shapes_match(name, expected, actual, &c)) return c;
  const std::int64_t n = expected.numel();
  check_within(expected, actual, [&](std::int64_t, double e) { return atol + rtol * std::fabs(e); },
               "outside atol + rtol·|expected|", &c);
  if (row_len > 0) {
    for (std::int64_t r = 0; r * row_len < n; ++r) {
      double ee = 0, aa = 0, ea = 0;
      bool finite = true;
      for (std::int64_t j = r * row_len; j < (r + 1) * row_len && j < n; ++j) {
        const double e = expected.value(j), a = actual.value(j);
        if (!std::isfinite(e) || !std::isfinite(a)) finite = false;
        ee += e * e;
        aa += a * a;
        ea += e * a;
      }
      if (!finite) continue;
      // Two zero rows agree perfectly; one zero row against a non-zero one does not.
      const double cosine = (ee == 0 && aa == 0) ? 1.0 : (ee == 0 || aa == 0) ? 0.0 : ea / std::sqrt(ee * aa);
      if (cosine < c.min_cosine) c.min_cosine = cosine;
      if (cosine < min_cosine) {
        if (c.mismatches++ == 0) {
          std::ostringstream s;
          s << name << " row " << r << ": cosine " << cosine << " < " << min_cosine;
          c.detail = s.str();
        }
        c.pass = false;
      }
    }
  }
  return c;
}

Comparison compare_exact(const std::string& name, const Tensor& expected, const Tensor& actual) {
  Comparison c;
  c.name = name;
  c.kind = "exact";
  if (!shapes_match(name, expected, actual, &c)) return c;
  const std::size_t es = dtype_size(expected.dtype());
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    if (std::memcmp(expected.bytes() + i * es, actual.bytes() + i * es, es) != 0) {
      const double err = std::fabs(actual.value(i) - expected.value(i));
      if (!(err <= c.max_abs_err)) c.max_abs_err = err;
      if (c.worst_index < 0) c.worst_index = i;
      note_failure(&c, i, expected.value(i), actual.value(i), "bits differ");
    }
  }
  return c;
}

Comparison compare_bound(const std::string& name, const Tensor& expected, const Tensor& actual,
                         const std::vector<double>& bound) {
  Comparison c;
  c.name = name;
  c.kind = "bound";
  if (!shapes_match(name, expected, actual, &c)) return c;
  if (bound.size() != static_cast<std::size_t>(expected.numel())) {
    c.pass = false;
    c.detail = name + ": " + std::to_string(bound.size()) + " bounds for " + std::to_string(expected.numel()) +
               " elements";
    return c;
  }
  check_within(expected, actual, [&](std::int64_t i, double) { return bound[i]; }, "outside the derived bound", &c);
  return c;
}

std::string describe(const Comparison& c) {
  std::ostringstream s;
  s.precision(3);
  s << c.name << " [" << c.kind << "] " << (c.pass ? "PASS" : "FAIL") << " max_abs=" << c.max_abs_err
    << " max_rel=" << c.max_rel_err;
  if (c.min_cosine < 1) s << " min_cos=" << std::fixed << std::setprecision(6) << c.min_cosine;
  if (c.worst_index >= 0) s << " worst@" << c.worst_index;
  if (!c.pass) s << " mismatches=" << c.mismatches << " — " << c.detail;
  return s.str();
}

}  // namespace mlakit::goldens
