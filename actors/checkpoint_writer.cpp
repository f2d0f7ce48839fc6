#include "actors/checkpoint_writer.hpp"

#include <chrono>

#include <caf/typed_event_based_actor.hpp>

#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

caf::expected<checkpoint_written> write(const checkpoint_store& store,
                                        const run_identity& run,
                                        const checkpoint_contents& contents) {
  auto t0 = std::chrono::steady_clock::now();
  parameter_set tensors;
  tensor_metadata metadata;
  if (auto err = encode_run_checkpoint(contents, run, tensors, metadata))
    return err;
  auto saved = store.save(contents.global_step, tensors, std::move(metadata));
  if (!saved)
    return saved.error();
  checkpoint_written out;
  out.global_step = contents.global_step;
  out.path = saved->path;
  out.bytes = saved->bytes;
  out.write_s = std::chrono::duration<double>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
  return out;
}

checkpointer_actor::behavior_type
checkpoint_writer(checkpointer_actor::pointer,
                  checkpoint_writer_config cfg) {
  auto store = std::make_shared<checkpoint_store>(cfg.directory,
                                                  cfg.keep_last);
  auto run = std::make_shared<run_identity>(std::move(cfg.run));
  return {
    [=](checkpoint_atom, const checkpoint_contents& contents)
      -> caf::result<checkpoint_written> {
      auto written = write(*store, *run, contents);
      if (!written)
        return written.error();
      return *written;
    },
  };
}

} // namespace

caf::error checkpoint_writer_config::validate() const {
  if (directory.empty())
    return make_error(ec::invalid_config,
                      "checkpoint writer: no checkpoint directory");
  if (keep_last < 1)
    return make_error(ec::invalid_config,
                      "checkpoint writer: keep at least 1 checkpoint");
  return caf::none;
}

caf::expected<checkpointer_actor>
spawn_checkpoint_writer(caf::actor_system& sys, checkpoint_writer_config cfg) {
  if (auto err = cfg.validate())
    return err;
  return sys.spawn<caf::detached>(checkpoint_writer, std::move(cfg));
}

} // namespace syncfac
