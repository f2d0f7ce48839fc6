#define BOOST_TEST_MODULE tensorboard_event_file
#include <boost/test/unit_test.hpp>

// TensorBoard event files: CRC32C against published vectors, the mask, the
// hand-encoded Event protocol buffers byte by byte, the record framing, and
// a file read back record by record. TensorBoard's own reader checks the
// files of real runs (tests/examples/tensorboard_reader.sh).

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "../../temp_dir.hpp"

#include "runtime/base/error.hpp"
#include "runtime/tensorboard/crc32c.hpp"
#include "runtime/tensorboard/event_file.hpp"
#include "runtime/tensorboard/event_record.hpp"

using namespace syncfac;
using namespace syncfac::tensorboard;
namespace fs = std::filesystem;

namespace {

std::string bytes(std::initializer_list<int> xs) {
  std::string out;
  for (int x : xs)
    out.push_back(static_cast<char>(x));
  return out;
}

uint64_t read_le(const std::string& s, size_t pos, int n) {
  uint64_t x = 0;
  for (int i = n - 1; i >= 0; --i)
    x = (x << 8) | static_cast<unsigned char>(s[pos + static_cast<size_t>(i)]);
  return x;
}

/// The records of an event file's contents, every CRC checked.
std::vector<std::string> records_of(const std::string& contents) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < contents.size()) {
    BOOST_REQUIRE_GE(contents.size() - pos, 12u);
    auto len = read_le(contents, pos, 8);
    BOOST_REQUIRE_EQUAL(read_le(contents, pos + 8, 4),
                        mask_crc(crc32c(contents.data() + pos, 8)));
    BOOST_REQUIRE_GE(contents.size() - pos - 12, len + 4);
    auto data = contents.substr(pos + 12, len);
    BOOST_REQUIRE_EQUAL(read_le(contents, pos + 12 + len, 4),
                        mask_crc(crc32c(data)));
    out.push_back(data);
    pos += 12 + len + 4;
  }
  return out;
}

template <class T>
std::string why(const caf::expected<T>& x) {
  return x ? std::string{} : render(x.error());
}

std::string slurp(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

} // namespace

BOOST_AUTO_TEST_CASE(crc32c_matches_the_published_vectors) {
  BOOST_TEST(crc32c("123456789") == 0xE3069283u);
  BOOST_TEST(crc32c("") == 0u);
  // RFC 3720 (iSCSI) appendix B.4.
  BOOST_TEST(crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  BOOST_TEST(crc32c(std::string(32, '\xff')) == 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i)
    ascending.push_back(static_cast<char>(i));
  BOOST_TEST(crc32c(ascending) == 0x46DD794Eu);
}

BOOST_AUTO_TEST_CASE(the_mask_rotates_and_adds_tensorflows_constant) {
  BOOST_TEST(mask_crc(0) == 0xa282ead8u);
  uint32_t crc = 0xE3069283u;
  BOOST_TEST(mask_crc(crc) == ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

BOOST_AUTO_TEST_CASE(file_version_event_is_wall_time_and_the_version) {
  auto ev = file_version_event(1.0);
  // wall_time=1 (fixed64 1.0), file_version=3 "brain.Event:2"; no step.
  auto want = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x1a, 13})
              + "brain.Event:2";
  BOOST_TEST(ev == want);
}

BOOST_AUTO_TEST_CASE(scalars_event_is_a_summary_of_tagged_floats) {
  auto ev = scalars_event(1.0, 300, {{"loss", 1.0f}, {"acc", 0.5f}});
  auto value = [](const std::string& tag, std::string f) {
    auto v = bytes({0x0a, static_cast<int>(tag.size())}) + tag
             + bytes({0x15}) + f;
    return bytes({0x0a, static_cast<int>(v.size())}) + v;
  };
  auto summary = value("loss", bytes({0, 0, 0x80, 0x3f}))
                 + value("acc", bytes({0, 0, 0, 0x3f}));
  // step 300 as a varint: 0xac 0x02.
  auto want = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x10, 0xac, 0x02,
                     0x2a, static_cast<int>(summary.size())})
              + summary;
  BOOST_TEST(ev == want);
}

BOOST_AUTO_TEST_CASE(text_event_carries_the_text_plugin_and_a_string_tensor) {
  auto ev = text_event(1.0, 0, "hparams", "hi");
  auto tensor = bytes({0x08, 7, 0x12, 0, 0x42, 2}) + "hi";
  auto metadata = bytes({0x0a, 6, 0x0a, 4}) + "text";
  auto v = bytes({0x0a, 7}) + "hparams" + bytes({0x42,
                                                 static_cast<int>(tensor.size())})
           + tensor + bytes({0x4a, static_cast<int>(metadata.size())})
           + metadata;
  auto summary = bytes({0x0a, static_cast<int>(v.size())}) + v;
  auto want = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x2a,
                     static_cast<int>(summary.size())})
              + summary;
  BOOST_TEST(ev == want);
}

BOOST_AUTO_TEST_CASE(session_start_event_is_a_session_log_with_status_start) {
  auto ev = session_start_event(1.0, 40);
  // session_log is field 7 (0x3a); 6 is the deprecated log_message.
  auto want = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x10, 40, 0x3a, 2,
                     0x08, 1});
  BOOST_TEST(ev == want);
}

BOOST_AUTO_TEST_CASE(negative_steps_are_ten_byte_varints) {
  auto ev = scalars_event(0.0, -1, {});
  // wall_time (9 bytes), then key 0x10 and ten bytes of -1.
  BOOST_REQUIRE_GE(ev.size(), 20u);
  BOOST_TEST(static_cast<unsigned char>(ev[9]) == 0x10u);
  BOOST_TEST(static_cast<unsigned char>(ev[19]) == 0x01u);
}

BOOST_AUTO_TEST_CASE(a_record_is_length_crc_data_crc) {
  std::string data = "123456789";
  auto rec = frame_record(data);
  BOOST_REQUIRE_EQUAL(rec.size(), 8u + 4 + data.size() + 4);
  BOOST_TEST(read_le(rec, 0, 8) == data.size());
  BOOST_TEST(read_le(rec, 8, 4) == mask_crc(crc32c(rec.data(), 8)));
  BOOST_TEST(rec.substr(12, data.size()) == data);
  BOOST_TEST(read_le(rec, 12 + data.size(), 4) == mask_crc(0xE3069283u));
}

BOOST_AUTO_TEST_CASE(an_event_file_reads_back_record_by_record) {
  test::temp_dir dir;
  auto logdir = dir.file("logs/run");
  auto file = event_file::create(logdir, 1700000000.5);
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(file), why(file));
  auto name = fs::path{(*file)->path()}.filename().string();
  BOOST_TEST(name.rfind("events.out.tfevents.1700000000.", 0) == 0u);
  BOOST_REQUIRE(!(*file)->scalars(1700000001.0, 1, {{"loss", 2.5f}}));
  BOOST_REQUIRE(!(*file)->text(1700000001.0, 0, "hparams", "| a | b |"));
  auto records = records_of(slurp((*file)->path()));
  BOOST_REQUIRE_EQUAL(records.size(), 3u);
  BOOST_TEST(records[0] == file_version_event(1700000000.5));
  BOOST_TEST(records[1] == scalars_event(1700000001.0, 1, {{"loss", 2.5f}}));
  // A second file in the same second does not overwrite the first.
  auto second = event_file::create(logdir, 1700000000.5);
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(second), why(second));
  BOOST_TEST((*second)->path() != (*file)->path());
  BOOST_TEST((*second)->path() > (*file)->path());
}

BOOST_AUTO_TEST_CASE(an_event_file_is_the_owners_alone) {
  // Summaries describe the parameters: 0600 whatever the umask (0 here,
  // so that a wider mode would show).
  test::temp_dir dir;
  auto old_mask = ::umask(0);
  auto file = event_file::create(dir.file("logs"), 1700000000.0);
  ::umask(old_mask);
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(file), why(file));
  struct stat st;
  BOOST_REQUIRE(::stat((*file)->path().c_str(), &st) == 0);
  BOOST_CHECK_EQUAL(st.st_mode & 07777, 0600u);
}

BOOST_AUTO_TEST_CASE(an_unusable_logdir_is_named) {
  test::temp_dir dir;
  auto blocker = dir.file("not_a_dir");
  std::ofstream{blocker} << "x";
  auto file = event_file::create(blocker + "/sub", 1.0);
  BOOST_REQUIRE(!file);
  BOOST_TEST(render(file.error()).find(blocker + "/sub") != std::string::npos);
  if (geteuid() != 0) {
    auto ro = dir.file("read_only");
    fs::create_directory(ro);
    chmod(ro.c_str(), 0500);
    auto denied = event_file::create(ro, 1.0);
    BOOST_REQUIRE(!denied);
    BOOST_TEST(render(denied.error()).find(ro) != std::string::npos);
  }
}
