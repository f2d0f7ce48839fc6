#pragma once

// Every atom syncfac uses, in its own namespace: caf:: already defines
// get_atom, ok_atom, ping_atom... and CAF 0.17 atoms hold at most 10
// characters.

#include <caf/atom.hpp>

namespace syncfac {

/// Load a model replica onto a device.
using load_model_atom = caf::atom_constant<caf::atom("loadmodel")>;
/// Read or write the parameters of a device's model replica.
using params_atom = caf::atom_constant<caf::atom("params")>;
/// Forward + backward on one batch, returning gradients.
using grads_atom = caf::atom_constant<caf::atom("grads")>;
/// Forward + backward + optimizer update on one batch (single process).
using train_atom = caf::atom_constant<caf::atom("train")>;
/// Configure the device-local optimizer.
using optimizer_atom = caf::atom_constant<caf::atom("optimizer")>;
/// Forward only on one batch, returning loss sum and correct count.
using eval_atom = caf::atom_constant<caf::atom("eval")>;
/// A raw GEMM kernel request.
using gemm_atom = caf::atom_constant<caf::atom("gemm")>;
/// Describe a device (backend name, threads).
using info_atom = caf::atom_constant<caf::atom("info")>;

} // namespace syncfac
