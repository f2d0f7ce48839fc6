#pragma once

// Small helpers shared by the test suites: tensors written out by hand,
// checks of values and of expected errors, requests with a timeout.

#include <chrono>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/scoped_actor.hpp>

#include "kernels/backend.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model_spec.hpp"
#include "runtime/named_tensor.hpp"
#include "runtime/optimizer_config.hpp"
#include "tests/same_parameters.hpp"

namespace syncfac::test {

/// The rendered error of `x`, or "ok". Boost evaluates a check's message
/// even when the check passes, and reading error() of an expected that
/// holds a value is undefined in CAF 0.17.
template <class T>
std::string why(const caf::expected<T>& x) {
  return x ? std::string{"ok"} : render(x.error());
}

/// A tensor of rank 0 holding x.
inline tensor scalar(float x) {
  return tensor{tensor_shape{}, {x}};
}

/// A tensor of rank 1 holding xs.
inline tensor vec(std::vector<float> xs) {
  auto n = static_cast<int64_t>(xs.size());
  return tensor{{n}, std::move(xs)};
}

/// An optimizer of `kind` at learning rate `lr`; the rest as
/// optimizer_config's defaults.
inline optimizer_config optimizer_of(optimizer_kind kind, float lr) {
  optimizer_config cfg;
  cfg.kind = kind;
  cfg.learning_rate = lr;
  return cfg;
}

/// An MLP on `side` x `side` one-channel images with the `hidden` layer
/// widths; the rest (classes, activation, init) as model_spec's defaults.
inline model_spec mlp_spec(int64_t side, std::vector<int64_t> hidden) {
  model_spec spec;
  spec.arch = model_arch::mlp;
  spec.height = spec.width = side;
  spec.hidden = std::move(hidden);
  return spec;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// The rendered error, which must be a syncfac error with `code`.
inline std::string failure(const caf::error& err, ec code) {
  BOOST_REQUIRE_MESSAGE(err, "expected an error");
  BOOST_TEST(err.category() == error_category, render(err));
  BOOST_TEST(static_cast<int>(err.code()) == static_cast<int>(code),
             render(err));
  return render(err);
}

/// The same for an answer that must fail.
template <class T>
std::string failure(const caf::expected<T>& x, ec code) {
  BOOST_REQUIRE_MESSAGE(!x, "expected an error, got a value");
  return failure(x.error(), code);
}

/// Checks that err has the code and that its rendering contains every one
/// of `parts`.
inline void check_error(const caf::error& err, ec code,
                        const std::vector<std::string>& parts) {
  BOOST_REQUIRE_MESSAGE(err, "expected an error of code " << to_string(code));
  BOOST_CHECK_MESSAGE(err.category() == error_category
                        && err.code() == static_cast<uint8_t>(code),
                      "expected " << to_string(code) << ", got "
                                  << render(err));
  auto text = render(err);
  for (const auto& part : parts)
    BOOST_CHECK_MESSAGE(text.find(part) != std::string::npos,
                        "'" << text << "' does not mention '" << part
                            << "'");
}

/// The same for an answer that must fail.
template <class T>
void check_error(const caf::expected<T>& x, ec code,
                 const std::vector<std::string>& parts) {
  BOOST_REQUIRE_MESSAGE(!x, "expected an error of code " << to_string(code)
                                                         << ", got a value");
  check_error(x.error(), code, parts);
}

/// The answer to a request already sent from a blocking actor (its
/// response handle; the request's own timeout bounds the wait), or the
/// error it produced. For requests a test sends before what answers them.
template <class T, class Pending>
caf::expected<T> answer(Pending& pending) {
  caf::expected<T> result{caf::error{}};
  pending.receive([&](T& x) { result = std::move(x); },
                  [&](caf::error& err) { result = std::move(err); });
  return result;
}

/// The answer of `dest` to a request (10 s at most), or the error it
/// produced.
template <class T, class Handle, class... Ts>
caf::expected<T> ask(caf::scoped_actor& self, const Handle& dest,
                     Ts&&... xs) {
  auto pending = self->request(dest, std::chrono::seconds{10},
                               std::forward<Ts>(xs)...);
  return answer<T>(pending);
}

} // namespace syncfac::test

// How Boost.Test prints values of our types in failed checks (found by ADL).
namespace caf {

inline std::ostream& boost_test_print_type(std::ostream& out,
                                           const error& err) {
  return out << syncfac::render(err);
}

template <class T>
std::ostream& boost_test_print_type(std::ostream& out, const expected<T>& x) {
  return out << (x ? std::string{"expected value"}
                   : "error: " + syncfac::render(x.error()));
}

} // namespace caf

namespace syncfac {

inline std::ostream& operator<<(std::ostream& out, ec x) {
  return out << to_string(x);
}

inline std::ostream& operator<<(std::ostream& out, optimizer_kind x) {
  return out << to_string(x);
}

inline std::ostream& operator<<(std::ostream& out, model_arch x) {
  return out << to_string(x);
}

inline std::ostream& operator<<(std::ostream& out, init_scheme x) {
  return out << to_string(x);
}

inline std::ostream& operator<<(std::ostream& out, activation x) {
  return out << to_string(x);
}

} // namespace syncfac
