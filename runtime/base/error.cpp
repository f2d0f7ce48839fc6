#include "runtime/base/error.hpp"

#include <caf/deep_to_string.hpp>
#include <caf/message.hpp>
#include <caf/pec.hpp>
#include <caf/sec.hpp>

namespace syncfac {

const char* to_string(ec code) noexcept {
  switch (code) {
    case ec::none: return "none";
    case ec::invalid_argument: return "invalid_argument";
    case ec::shape_mismatch: return "shape_mismatch";
    case ec::invalid_config: return "invalid_config";
    case ec::io_error: return "io_error";
    case ec::bad_data: return "bad_data";
    case ec::non_finite: return "non_finite";
    case ec::unknown_name: return "unknown_name";
    case ec::timeout: return "timeout";
    case ec::peer_down: return "peer_down";
    case ec::peer_lost: return "peer_lost";
    case ec::bad_message: return "bad_message";
    case ec::numerical_failure: return "numerical_failure";
    case ec::unavailable: return "unavailable";
    case ec::internal: return "internal";
  }
  return "unknown_error_code";
}

caf::error make_error(ec code, std::string context) {
  return caf::error{static_cast<uint8_t>(code), error_category,
                    caf::make_message(std::move(context))};
}

caf::error make_error(ec code) {
  return caf::error{static_cast<uint8_t>(code), error_category};
}

std::string in_quotes(const std::string& name) {
  return "'" + name + "'";
}

caf::error bad_config(const std::string& who, const std::string& what) {
  return make_error(ec::invalid_config, who + ": " + what);
}

caf::error with_context(const caf::error& err, const std::string& prefix) {
  auto code = err.category() == error_category ? static_cast<ec>(err.code())
                                               : ec::internal;
  auto text = render(err);
  // render() starts with the code's name; keep only the message after it.
  auto colon = text.find(": ");
  if (err.category() == error_category && colon != std::string::npos)
    text = text.substr(colon + 2);
  return make_error(code, prefix + ": " + text);
}

std::string render(const caf::error& err) {
  if (!err)
    return "no error";
  std::string result;
  if (err.category() == error_category)
    result = to_string(static_cast<ec>(err.code()));
  else if (err.category() == caf::atom("system"))
    result = caf::to_string(static_cast<caf::sec>(err.code()));
  else if (err.category() == caf::atom("parser"))
    result = "parse error: " + caf::to_string(static_cast<caf::pec>(err.code()));
  else
    result = caf::to_string(err.category()) + " error "
             + std::to_string(static_cast<int>(err.code()));
  const auto& ctx = err.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    result += ": " + ctx.get_as<std::string>(0);
  else if (!ctx.empty())
    result += ": " + caf::deep_to_string(ctx);
  return result;
}

} // namespace syncfac
