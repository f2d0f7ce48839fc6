#pragma once

// TensorBoard's Event protocol buffers, encoded by hand (Debian has no
// protobuf runtime we want in the library for three messages), and the
// record framing of TensorFlow's event files:
//
//   uint64 length (little endian) | uint32 masked crc32c(length bytes)
//   | length bytes of data        | uint32 masked crc32c(data)
//
// The fields used (tensorflow/core/util/event.proto, summary.proto):
//   Event:    wall_time=1 double, step=2 int64, file_version=3 string,
//             summary=5 Summary
//   Summary:  value=1 repeated Value
//   Value:    tag=1 string, simple_value=2 float, tensor=8 TensorProto,
//             metadata=9 SummaryMetadata
//   Event:    session_log=7 SessionLog { status=1 (START=1) } (6 is the
//             deprecated log_message)
//   SummaryMetadata: plugin_data=1 { plugin_name=1 string }
//   TensorProto: dtype=1 (DT_STRING=7), tensor_shape=2 {}, string_val=8
// Pure functions: the writer of a file is runtime/tensorboard/event_file.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace syncfac::tensorboard {

/// One scalar of a summary: a tag and its value at the event's step.
struct scalar_value {
  std::string tag;
  float value = 0;
};

/// The first event of every file: file_version "brain.Event:2".
std::string file_version_event(double wall_time);

/// An event at `step` holding a summary of `scalars`.
std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<scalar_value>& scalars);

/// An event at `step` holding one text summary (TensorBoard's text plugin
/// renders `text` as Markdown).
std::string text_event(double wall_time, int64_t step, const std::string& tag,
                       const std::string& text);

/// An event at `step` holding SessionLog{status: START} (Event.session_log=7,
/// SessionLog.status=1, START=1): a restart at `step`. TensorBoard drops
/// the events at `step` and later that came before it, so a run resumed
/// from a checkpoint older than its last logged step keeps one curve.
std::string session_start_event(double wall_time, int64_t step);

/// `data` framed as one record of an event file.
std::string frame_record(const std::string& data);

} // namespace syncfac::tensorboard
