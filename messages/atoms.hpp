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

/// A worker's gradients for a PS shard.
using push_atom = caf::atom_constant<caf::atom("push")>;
/// Read a PS shard's variables.
using pull_atom = caf::atom_constant<caf::atom("pull")>;
/// Worker to PS shard: it no longer needs the pull it left waiting.
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
/// A PS shard's own timer: answer the waiting pulls whose wait ran out.
using expire_atom = caf::atom_constant<caf::atom("expire")>;
/// Chief to PS shard: average R gradients per variable and apply them.
using apply_atom = caf::atom_constant<caf::atom("apply")>;
/// --clip_norm: a shard's part of the round's global gradient norm.
using norm_atom = caf::atom_constant<caf::atom("gradnorm")>;
/// Chief to PS shard: set every accumulator's global step.
using set_step_atom = caf::atom_constant<caf::atom("setstep")>;
/// Ask any role for its counters.
using status_atom = caf::atom_constant<caf::atom("status")>;
/// Worker to chief: take a token from the queue.
using token_atom = caf::atom_constant<caf::atom("token")>;
/// Run one training step (a worker) for tests and tools.
using step_atom = caf::atom_constant<caf::atom("step")>;
/// Variable moving averages: update them (chief to shard), or pull them.
using average_atom = caf::atom_constant<caf::atom("average")>;
/// Run until training ends (chief, worker).
using run_atom = caf::atom_constant<caf::atom("run")>;
/// A worker's own deadline for being rebound after it lost its chief or a
/// PS shard.
using stall_atom = caf::atom_constant<caf::atom("stall")>;

/// K-FAC: factor statistics (worker to covariance actor; device request).
using stats_atom = caf::atom_constant<caf::atom("stats")>;
/// K-FAC: moving-average factors (covariance to inverse actor).
using factors_atom = caf::atom_constant<caf::atom("factors")>;
/// K-FAC: invert factors (inverse actor to its device actor).
using invert_atom = caf::atom_constant<caf::atom("invert")>;
/// K-FAC: inverses for a shard's layers (inverse actor to PS shard).
using inverse_atom = caf::atom_constant<caf::atom("inverse")>;

/// Checkpoints: take a snapshot (chief to shard and covariance actor),
/// write one (chief to its writer), or the chief's own grace timer.
using checkpoint_atom = caf::atom_constant<caf::atom("checkpoint")>;
/// Checkpoints: restore a role's state from a snapshot.
using restore_atom = caf::atom_constant<caf::atom("restore")>;
/// After a role came back: a role's peers from now on (an inverse actor's
/// shards, a covariance actor's inverse actors, the chief's K-FAC roles,
/// the evaluator's shards).
using rewire_atom = caf::atom_constant<caf::atom("rewire")>;
/// Chief's supervisor to chief, after a lost role paused the steps: go on
/// from a step (a new incarnation of the run).
using rollback_atom = caf::atom_constant<caf::atom("rollback")>;
/// A gradient worker task that (re)started asks the chief where it
/// resumes.
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;
/// The chief's supervisor's timer: ask the K-FAC roles if they still answer.
using probe_atom = caf::atom_constant<caf::atom("probe")>;

/// Cluster: a node introduces itself to a peer it connected to.
using hello_atom = caf::atom_constant<caf::atom("hello")>;
/// Cluster: the chief tells a node that the run is over.
using shutdown_atom = caf::atom_constant<caf::atom("shutdown")>;
/// Cluster: a role reports a record to the chief's metrics sink.
using metrics_atom = caf::atom_constant<caf::atom("metrics")>;
/// Cluster: a task that cannot join the run (its own setup refused it)
/// tells the chief's node why, before it exits.
using refuse_atom = caf::atom_constant<caf::atom("refuse")>;
/// Cluster: a node's supervisor connects again to a peer task (its
/// connector's one request).
using connect_atom = caf::atom_constant<caf::atom("connect")>;
/// Cluster: a node's supervisor hears that something it watches went away
/// (its own down handler's word to itself).
using lost_atom = caf::atom_constant<caf::atom("lost")>;
/// Cluster: a node's supervisor's own timer ran out (which wait it ends).
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
/// Cluster: the node program tells its supervisor to end the run now,
/// preempted (a SIGTERM handler's word).
using preempt_atom = caf::atom_constant<caf::atom("preempt")>;

} // namespace syncfac
