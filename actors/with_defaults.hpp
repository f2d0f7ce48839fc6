#pragma once

// A typed behaviour from a state's own handlers and the defaults of the
// actor's other states. CAF 0.17's typed behaviours must name every message
// of the interface, and the states of a supervisor treat most messages
// alike: each state names only what it does differently, and a default
// stands for every message it does not name (the same decayed arguments).

#include <tuple>
#include <type_traits>
#include <utility>

namespace syncfac {

namespace detail {

template <class F>
struct handler_args : handler_args<decltype(&F::operator())> {};

template <class C, class R, class... Ts>
struct handler_args<R (C::*)(Ts...) const> {
  using type = std::tuple<std::decay_t<Ts>...>;
};

template <class C, class R, class... Ts>
struct handler_args<R (C::*)(Ts...)> {
  using type = std::tuple<std::decay_t<Ts>...>;
};

/// Whether one of `Own` handles the message `Default` handles.
template <class Default, class... Own>
constexpr bool handled_by = (std::is_same_v<typename handler_args<Default>::type,
                                             typename handler_args<Own>::type>
                             || ...);

template <class... Own, class Default>
auto unless_handled(Default d) {
  if constexpr (handled_by<Default, Own...>)
    return std::tuple<>{};
  else
    return std::tuple<Default>{std::move(d)};
}

} // namespace detail

/// `Behavior` of `own` and those of `defaults` whose message no handler of
/// `own` takes.
template <class Behavior, class... Defaults, class... Own>
Behavior with_defaults(std::tuple<Defaults...> defaults, Own... own) {
  auto kept = std::apply(
    [](Defaults... d) {
      return std::tuple_cat(detail::unless_handled<Own...>(std::move(d))...);
    },
    std::move(defaults));
  return std::apply(
    [&](auto... d) { return Behavior{std::move(own)..., std::move(d)...}; },
    std::move(kept));
}

} // namespace syncfac
