#define BOOST_TEST_MODULE data_idx
#include <boost/test/unit_test.hpp>

#include "data_fixtures.hpp"

#include "runtime/data/idx.hpp"
#include "runtime/base/error.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

idx_array make_array(std::vector<int64_t> dims, uint8_t salt = 0) {
  idx_array x;
  x.dims = std::move(dims);
  x.data = pattern(static_cast<size_t>(x.element_count()), salt);
  return x;
}

// Reads `path`, requires failure with `code`, and returns the rendered
// error, which must name the file.
std::string expect_failure(const std::string& path, ec code) {
  auto x = read_idx(path);
  BOOST_REQUIRE_MESSAGE(!x, path << " was read but should fail");
  BOOST_TEST_MESSAGE(render(x.error()));
  BOOST_CHECK_MESSAGE(has_code(x.error(), code), render(x.error()));
  BOOST_CHECK(mentions(x.error(), path));
  return render(x.error());
}

void check_contains(const std::string& text, const std::string& what) {
  BOOST_CHECK_MESSAGE(text.find(what) != std::string::npos,
                      "'" << text << "' lacks '" << what << "'");
}

/// The bytes of a good gzipped IDX file of make_array(dims), written to
/// good.gz in `dir`.
bytes gzipped_idx(const temp_dir& dir, std::vector<int64_t> dims) {
  auto good = dir.file("good.gz");
  BOOST_REQUIRE(!write_idx(good, make_array(std::move(dims)), true));
  return read_bytes(good);
}

} // namespace

BOOST_AUTO_TEST_CASE(round_trip_plain_and_gzip) {
  temp_dir dir;
  std::vector<std::vector<int64_t>> shapes{{7}, {3, 5}, {4, 28, 28}, {2, 3, 4, 5}};
  for (auto gzip : {false, true}) {
    for (const auto& dims : shapes) {
      auto x = make_array(dims, static_cast<uint8_t>(dims.size()));
      auto path = dir.file("a" + std::to_string(dims.size()));
      BOOST_REQUIRE(!write_idx(path, x, gzip));
      auto raw = read_bytes(path);
      BOOST_REQUIRE_GE(raw.size(), 2u);
      BOOST_CHECK_EQUAL(raw[0] == 0x1f && raw[1] == 0x8b, gzip);
      auto y = read_idx(path);
      BOOST_REQUIRE_MESSAGE(y, why(y));
      BOOST_CHECK(y->dims == x.dims);
      BOOST_CHECK_EQUAL(y->type, idx_ubyte);
      BOOST_CHECK(y->data == x.data);
    }
  }
}

BOOST_AUTO_TEST_CASE(plain_file_has_the_documented_layout) {
  temp_dir dir;
  auto x = make_array({2, 3});
  BOOST_REQUIRE(!write_idx(dir.file("x"), x, false));
  BOOST_CHECK(read_bytes(dir.file("x")) == concat(idx_header({2, 3}), x.data));
}

BOOST_AUTO_TEST_CASE(compression_is_detected_by_content_not_name) {
  temp_dir dir;
  auto x = make_array({10, 10});
  BOOST_REQUIRE(!write_idx(dir.file("looks-plain"), x, true));
  BOOST_REQUIRE(!write_idx(dir.file("looks-compressed.gz"), x, false));
  for (auto name : {"looks-plain", "looks-compressed.gz"}) {
    auto y = read_idx(dir.file(name));
    BOOST_REQUIRE_MESSAGE(y, why(y));
    BOOST_CHECK(y->data == x.data);
  }
}

BOOST_AUTO_TEST_CASE(concatenated_gzip_members_are_one_stream) {
  temp_dir dir;
  auto payload = pattern(300);
  auto path = dir.file("multi.gz");
  write_bytes(path, concat(gzip_bytes(idx_header({300})), gzip_bytes(payload)));
  auto y = read_idx(path);
  BOOST_REQUIRE_MESSAGE(y, why(y));
  BOOST_CHECK(y->data == payload);
}

BOOST_AUTO_TEST_CASE(truncated_payload_plain) {
  temp_dir dir;
  auto path = dir.file("short");
  write_bytes(path, concat(idx_header({20, 30}), pattern(590)));
  auto text = expect_failure(path, ec::bad_data);
  check_contains(text, "truncated: header says 600 bytes of data, found 590");
}

BOOST_AUTO_TEST_CASE(truncated_payload_gzip) {
  temp_dir dir;
  auto path = dir.file("short.gz");
  write_bytes(path, gzip_bytes(concat(idx_header({20, 30}), pattern(17))));
  auto text = expect_failure(path, ec::bad_data);
  check_contains(text, "truncated: header says 600 bytes of data, found 17");
}

BOOST_AUTO_TEST_CASE(truncated_gzip_file) {
  temp_dir dir;
  auto packed = gzipped_idx(dir, {50, 40});
  // Cut inside the deflate data and inside the 8-byte trailer.
  for (size_t cut : {packed.size() / 2, packed.size() - 4, packed.size() - 1}) {
    auto path = dir.file("cut" + std::to_string(cut) + ".gz");
    write_bytes(path, bytes(packed.begin(), packed.begin() + cut));
    auto text = expect_failure(path, ec::bad_data);
    check_contains(text, "truncated");
  }
}

BOOST_AUTO_TEST_CASE(truncated_header) {
  temp_dir dir;
  auto cases = std::vector<bytes>{{},
                                  {0, 0},
                                  {0, 0, 8, 3, 0, 0, 0, 2},
                                  {0, 0, 8, 1, 0, 0}};
  for (size_t i = 0; i < cases.size(); ++i) {
    auto path = dir.file("head" + std::to_string(i));
    write_bytes(path, cases[i]);
    auto text = expect_failure(path, ec::bad_data);
    check_contains(text, "truncated");
  }
}

BOOST_AUTO_TEST_CASE(wrong_magic) {
  temp_dir dir;
  auto path = dir.file("magic");
  write_bytes(path, bytes{0x01, 0x02, 0x08, 0x01, 0, 0, 0, 1, 42});
  auto text = expect_failure(path, ec::bad_data);
  check_contains(text, "not an IDX file");
  check_contains(text, "0x01 0x02");
}

BOOST_AUTO_TEST_CASE(wrong_type) {
  temp_dir dir;
  auto floats = dir.file("floats");
  write_bytes(floats, concat(idx_header({2}, 0x0D), pattern(8)));
  check_contains(expect_failure(floats, ec::bad_data), "0x0D (float32)");
  auto unknown = dir.file("unknown");
  write_bytes(unknown, concat(idx_header({2}, 0x42), pattern(2)));
  check_contains(expect_failure(unknown, ec::bad_data),
                 "unknown element type 0x42");
}

BOOST_AUTO_TEST_CASE(bad_rank) {
  temp_dir dir;
  auto rank0 = dir.file("rank0");
  write_bytes(rank0, bytes{0, 0, 8, 0, 1});
  check_contains(expect_failure(rank0, ec::bad_data), "rank 0");
  auto rank5 = dir.file("rank5");
  write_bytes(rank5, concat(idx_header({1, 1, 1, 1, 1}), pattern(1)));
  check_contains(expect_failure(rank5, ec::bad_data), "rank 5");
}

BOOST_AUTO_TEST_CASE(bad_dims) {
  temp_dir dir;
  auto zero = dir.file("zero");
  write_bytes(zero, idx_header({3, 0}));
  check_contains(expect_failure(zero, ec::bad_data), "dimension 1 is 0");
  // 65536^2 = 2^32 elements: refused before anything is allocated.
  auto huge = dir.file("huge");
  write_bytes(huge, concat(idx_header({65536, 65536}), pattern(16)));
  check_contains(expect_failure(huge, ec::bad_data), "more than");
  auto max = dir.file("max");
  write_bytes(max, idx_header({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}));
  expect_failure(max, ec::bad_data);
}

BOOST_AUTO_TEST_CASE(trailing_bytes) {
  temp_dir dir;
  auto plain = dir.file("long");
  write_bytes(plain, concat(idx_header({10}), pattern(12)));
  check_contains(expect_failure(plain, ec::bad_data),
                 "trailing garbage: header says 10 bytes of data, found 12");
  auto packed = dir.file("long.gz");
  write_bytes(packed, gzip_bytes(concat(idx_header({10}), pattern(11))));
  check_contains(expect_failure(packed, ec::bad_data),
                 "header says 10 bytes of data, found 11");
  auto after = dir.file("after.gz");
  write_bytes(after, concat(gzip_bytes(concat(idx_header({10}), pattern(10))),
                            bytes{'j', 'u', 'n', 'k'}));
  check_contains(expect_failure(after, ec::bad_data),
                 "trailing garbage after the gzip stream");
}

BOOST_AUTO_TEST_CASE(corrupt_gzip) {
  temp_dir dir;
  auto packed = gzipped_idx(dir, {64, 64});
  BOOST_REQUIRE_GT(packed.size(), 40u);
  // Garbled deflate data, a wrong CRC-32, and a wrong length in the trailer.
  for (size_t at : {size_t{12}, packed.size() / 2, packed.size() - 8,
                    packed.size() - 2}) {
    auto bad = packed;
    bad[at] ^= 0x5A;
    auto path = dir.file("bad" + std::to_string(at) + ".gz");
    write_bytes(path, bad);
    check_contains(expect_failure(path, ec::bad_data), "gzip stream");
  }
  auto crc = packed;
  crc[crc.size() - 8] ^= 0xFF;
  write_bytes(dir.file("crc.gz"), crc);
  check_contains(expect_failure(dir.file("crc.gz"), ec::bad_data),
                 "corrupt gzip stream");
}

BOOST_AUTO_TEST_CASE(missing_file_and_directory) {
  temp_dir dir;
  auto missing = dir.file("nope");
  check_contains(expect_failure(missing, ec::io_error), "cannot open");
  expect_failure(dir.path(), ec::io_error);
}

BOOST_AUTO_TEST_CASE(write_refuses_what_read_would_refuse) {
  temp_dir dir;
  auto check = [&](idx_array x, const std::string& what) {
    auto err = write_idx(dir.file("w"), x, false);
    BOOST_CHECK_MESSAGE(has_code(err, ec::invalid_argument), render(err));
    BOOST_CHECK_MESSAGE(mentions(err, what), render(err));
  };
  auto x = make_array({4});
  x.data.pop_back();
  check(x, "dims say 4 bytes, data has 3");
  check(idx_array{}, "rank 0");
  auto wide = make_array({1, 1, 1, 1});
  wide.dims.push_back(1);
  check(wide, "rank 5");
  auto typed = make_array({2});
  typed.type = 0x0D;
  check(typed, "0x0D");
  idx_array zero;
  zero.dims = {0};
  check(zero, "out of range");
  BOOST_CHECK(!std::filesystem::exists(dir.file("w")));
}

BOOST_AUTO_TEST_CASE(write_reports_io_errors) {
  temp_dir dir;
  auto x = make_array({4});
  for (auto gzip : {false, true}) {
    auto path = dir.file("no/such/dir/x");
    auto err = write_idx(path, x, gzip);
    BOOST_CHECK_MESSAGE(has_code(err, ec::io_error), render(err));
    BOOST_CHECK(mentions(err, path));
  }
}
