#pragma once

// What one node of a cluster says about the run it was configured for
// (runtime/cluster/config_fingerprint.hpp): everything that must agree
// across the nodes, as named fields. Left out because it may differ per
// node: the task, addresses and ports, threads, the device (but not its
// kind: real or the benchmark-only delay device), timeouts, log,
// metrics, summary and checkpoint paths, the chief's schedule (steps,
// epochs, evaluations) and the data directory's path (its contents are
// compared: counts, shapes and a digest of every example and label). The list is
// in docs/distributed.md ("One configuration across every node").

#include "actors/sync_trainer.hpp"
#include "actors/topology.hpp"
#include "runtime/cluster/config_fingerprint.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/model.hpp"

namespace syncfac {

/// The record of a run: `sync` with its derived topology, the model as
/// built (`init`), the variables' placement on the shards, and the data
/// sets when this node loaded them (else the record omits "data.").
config_fingerprint make_run_fingerprint(const sync_training_config& sync,
                                        const model& init,
                                        const shard_layout& layout,
                                        const dataset* train,
                                        const dataset* test);

/// The record of a task that only evaluates the run's variables (an
/// evaluator written outside the library): the model as built, which is
/// all it must agree on. Everything else is omitted (compared only where
/// both records have it), its initialisation too: an evaluator reads the
/// variables, it never initialises them.
config_fingerprint make_model_fingerprint(const model& init);

} // namespace syncfac
