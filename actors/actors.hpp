#pragma once

// The typed interface of every syncfac role, one handler per line with the
// reason it exists. Actors of a role implement exactly this; tests mock a
// peer by implementing the same interface.

#include <cstdint>

#include <caf/atom.hpp>
#include <caf/typed_actor.hpp>

#include "messages/atoms.hpp"
#include "messages/device_messages.hpp"

namespace syncfac {

/// Owns one compute backend and the model replica on it; executes requests
/// strictly in arrival order. The only actor that touches device memory.
using device_actor = caf::typed_actor<
  // Builds a model replica (replacing any previous one) and reports its
  // initial parameters.
  caf::replies_to<load_model_atom, model_spec, uint64_t>::with<model_info>,
  // Overwrites the replica's parameters (after a pull from the PS).
  caf::replies_to<params_atom, parameter_set>::with<caf::ok_atom>,
  // Reads the replica's parameters.
  caf::replies_to<params_atom>::with<parameter_set>,
  // Configures the device-local optimizer used by train_atom.
  caf::replies_to<optimizer_atom, optimizer_config>::with<caf::ok_atom>,
  // Forward + backward: loss, accuracy and gradients of the batch.
  caf::replies_to<grads_atom, batch>::with<step_result>,
  // Forward + backward + local optimizer step (single-process training).
  caf::replies_to<train_atom, batch>::with<step_result>,
  // Forward only: loss sum and correct count of the batch.
  caf::replies_to<eval_atom, batch>::with<eval_result>,
  // A raw kernel: op(a) * op(b).
  caf::replies_to<gemm_atom, tensor, bool, tensor, bool>::with<tensor>,
  // Backend name and threads.
  caf::replies_to<info_atom>::with<device_info>>;

} // namespace syncfac
