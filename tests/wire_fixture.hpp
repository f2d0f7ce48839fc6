#pragma once

// Round trips through CAF's binary serialisation, as values and as
// type-erased messages (the way actors on different nodes exchange them).

#include <vector>

#include <boost/test/unit_test.hpp>
#include <caf/actor_system.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/message.hpp>

#include "runtime/base/error.hpp"
#include "actors/program_config.hpp"

namespace syncfac::test {

struct wire_fixture {
  program_config cfg;
  caf::actor_system sys{cfg};

  template <class T>
  std::vector<char> save(T x) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    auto err = sink(x);
    BOOST_REQUIRE_MESSAGE(!err, render(err));
    return buf;
  }

  template <class T>
  T round_trip(T x) {
    auto buf = save(std::move(x));
    T y;
    caf::binary_deserializer source{sys, buf};
    auto err = source(y);
    BOOST_REQUIRE_MESSAGE(!err, render(err));
    return y;
  }

  template <class T>
  T message_round_trip(T x) {
    auto buf = save(caf::make_message(std::move(x)));
    caf::message copy;
    caf::binary_deserializer source{sys, buf};
    auto err = source(copy);
    BOOST_REQUIRE_MESSAGE(!err, render(err));
    BOOST_REQUIRE(copy.match_element<T>(0));
    return copy.get_as<T>(0);
  }
};

} // namespace syncfac::test
