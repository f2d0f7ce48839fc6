#pragma once

// An evaluation of given variables on a whole data set on a device actor,
// in slices that bound the device's activation memory: what the library's
// evaluator and a role of a user's own (examples/evaluator_role) both do
// with the variables they gathered.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>

#include <caf/error.hpp>

#include "actors/actors.hpp"
#include "runtime/data/batcher.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/eval_result.hpp"

namespace syncfac {

/// Evaluates examples [begin, data->count) of `data` on `device`, at most
/// `slice_size` per request, one request at a time and in order (await),
/// each bounded by `timeout`; then calls `done(total)` with the sum of
/// the slices and `total`, or `failed("evaluation", err)` with the first
/// request's error.
template <class Self, class Done, class Failed>
void evaluate_slices(Self self, const device_actor& device,
                     std::chrono::milliseconds timeout,
                     std::shared_ptr<const dataset> data, int64_t slice_size,
                     Done done, Failed failed, int64_t begin = 0,
                     eval_result total = {}) {
  if (begin >= data->count) {
    done(std::move(total));
    return;
  }
  auto end = std::min(data->count, begin + slice_size);
  batch b;
  slice(*data, begin, end, b);
  self->request(device, timeout, eval_atom::value, std::move(b))
    .await(
      [=](eval_result& part) mutable {
        total += part;
        evaluate_slices(self, device, timeout, data, slice_size, done,
                        failed, end, std::move(total));
      },
      [=](caf::error& err) mutable { failed("evaluation", std::move(err)); });
}

/// Loads `params` (every variable of the model the device holds) on
/// `device`, then evaluate_slices() of the whole of `data`; a failed
/// upload is `failed("parameter upload", err)`.
template <class Self, class Done, class Failed>
void evaluate_parameters(Self self, const device_actor& device,
                         std::chrono::milliseconds timeout,
                         const parameter_set& params,
                         std::shared_ptr<const dataset> data,
                         int64_t slice_size, Done done, Failed failed) {
  self->request(device, timeout, params_atom::value, params)
    .await(
      [=](caf::ok_atom) {
        evaluate_slices(self, device, timeout, data, slice_size, done,
                        failed);
      },
      [=](caf::error& err) mutable {
        failed("parameter upload", std::move(err));
      });
}

} // namespace syncfac
