#include "runtime/sync/compute_delay.hpp"

#include <cmath>
#include <cstdlib>
#include <vector>

#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

constexpr const char* prefix = "bench_delay";

std::vector<std::string> split_colons(const std::string& str) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    auto end = str.find(':', start);
    out.push_back(str.substr(start, end - start));
    if (end == std::string::npos)
      return out;
    start = end + 1;
  }
}

bool parse_number(const std::string& str, double& out) {
  if (str.empty())
    return false;
  char* end = nullptr;
  out = std::strtod(str.c_str(), &end);
  return end == str.c_str() + str.size() && std::isfinite(out);
}

} // namespace

std::chrono::microseconds compute_delay::draw(std::mt19937_64& rng) const {
  double factor = 1;
  switch (dist) {
    case tail::none:
      break;
    case tail::lognormal: {
      // mu = -sigma^2 / 2: the factor's mean is 1.
      std::lognormal_distribution<double> d{-shape * shape / 2, shape};
      factor = d(rng);
      break;
    }
    case tail::pareto: {
      // x_m = (alpha - 1) / alpha: the factor's mean is 1.
      std::uniform_real_distribution<double> u{0.0, 1.0};
      auto xm = (shape - 1) / shape;
      factor = xm / std::pow(1.0 - u(rng), 1.0 / shape);
      break;
    }
  }
  return std::chrono::microseconds{
    static_cast<int64_t>(std::llround(ms * factor * 1000.0))};
}

bool is_delay_device(const std::string& device) {
  return device == prefix || device.rfind(std::string{prefix} + ":", 0) == 0;
}

caf::expected<compute_delay> parse_compute_delay(const std::string& device) {
  auto bad = [&](const std::string& why) {
    return make_error(ec::invalid_config,
                      "device " + in_quotes(device) + ": " + why
                        + " (expected bench_delay:MS, "
                          "bench_delay:MS:lognormal:SIGMA or "
                          "bench_delay:MS:pareto:ALPHA, each optionally "
                          "followed by :random)");
  };
  auto parts = split_colons(device);
  if (parts.front() != prefix)
    return bad("not a bench_delay device");
  compute_delay out;
  if (parts.size() > 2 && parts.back() == "random") {
    out.random_gradients = true;
    parts.pop_back();
  }
  if (parts.size() != 2 && parts.size() != 4)
    return bad("wrong number of fields");
  if (!parse_number(parts[1], out.ms) || out.ms < 0)
    return bad("the delay " + in_quotes(parts[1])
               + " is not a number of milliseconds >= 0");
  if (parts.size() == 2)
    return out;
  if (!parse_number(parts[3], out.shape))
    return bad("the shape " + in_quotes(parts[3]) + " is not a number");
  if (parts[2] == "lognormal") {
    out.dist = compute_delay::tail::lognormal;
    if (out.shape <= 0)
      return bad("the log-normal's SIGMA must be > 0, got " + parts[3]);
  } else if (parts[2] == "pareto") {
    out.dist = compute_delay::tail::pareto;
    if (out.shape <= 1)
      return bad("the Pareto's ALPHA must be > 1 (a finite mean), got "
                 + parts[3]);
  } else {
    return bad("unknown distribution " + in_quotes(parts[2]));
  }
  return out;
}

} // namespace syncfac
