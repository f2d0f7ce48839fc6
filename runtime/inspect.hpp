#pragma once

// The CAF inspect function of a plain struct, declared once from its type:
// the type's name on the wire is its own (the string cannot drift from the
// type), the fields are the expressions after it, of the object `x` in
// their wire order, a scalar float as wire(x.f) (runtime/wire_float.hpp).
//
//   SYNCFAC_INSPECT(push_ack, x.accepted, x.global_step)

#include <caf/meta/type_name.hpp>

#define SYNCFAC_INSPECT(type, ...)                                          \
  template <class Inspector>                                                \
  typename Inspector::result_type inspect(Inspector& f, type& x) {          \
    return f(caf::meta::type_name(#type), __VA_ARGS__);                     \
  }
