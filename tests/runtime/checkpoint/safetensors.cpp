#define BOOST_TEST_MODULE checkpoint_safetensors
#include <boost/test/unit_test.hpp>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <sys/wait.h>

#include "fixtures.hpp"

#include "runtime/checkpoint/safetensors.hpp"
#include "runtime/base/error.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

// A file from a header text (padded to 8-byte alignment unless `pad` is
// false) and raw data bytes.
std::string make_file(std::string header, const std::string& data,
                      bool pad = true) {
  if (pad)
    header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string floats(std::initializer_list<float> xs) {
  std::string out;
  for (float x : xs) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    for (int i = 0; i < 4; ++i)
      out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
  }
  return out;
}

// Decodes `bytes`, requires ec::bad_data naming the origin and `what`.
void expect_refused(const std::string& bytes, const std::string& what,
                    safetensors_read_options options = {}) {
  const std::string origin = "hostile.safetensors";
  auto x = decode_safetensors(bytes.data(), bytes.size(), origin, options);
  BOOST_REQUIRE_MESSAGE(!x, "accepted a file that should fail with '" << what
                                                                      << "'");
  BOOST_TEST_MESSAGE(render(x.error()));
  BOOST_CHECK_MESSAGE(is_code(x.error(), ec::bad_data), render(x.error()));
  BOOST_CHECK_MESSAGE(says(x.error(), origin), render(x.error()));
  BOOST_CHECK_MESSAGE(says(x.error(), what),
                      "'" << render(x.error()) << "' lacks '" << what << "'");
}

void check_same(const parameter_set& xs, const parameter_set& ys) {
  BOOST_REQUIRE_EQUAL(xs.size(), ys.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    BOOST_CHECK_EQUAL(xs[i].name, ys[i].name);
    BOOST_CHECK(xs[i].value.shape() == ys[i].value.shape());
    BOOST_CHECK(xs[i].value.values() == ys[i].value.values());
  }
}

// The header of one tensor "t" of these JSON values of its dtype, shape
// and data_offsets, with `more` fields between the last two.
std::string one_entry(const std::string& dtype, const std::string& shape,
                      const std::string& offsets,
                      const std::string& more = "") {
  return R"({"t":{"dtype":)" + dtype + R"(,"shape":)" + shape + "," + more
         + R"("data_offsets":)" + offsets + "}}";
}

const std::string f32 = R"("F32")";
const std::string one_f32 = one_entry(f32, "[1]", "[0,4]");

} // namespace

BOOST_AUTO_TEST_CASE(crc32c_known_answer) {
  // The check value of CRC-32C (RFC 3720, appendix B.4).
  BOOST_CHECK_EQUAL(crc32c(0, "123456789", 9), 0xE3069283u);
  BOOST_CHECK_EQUAL(crc32c(crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
  BOOST_CHECK_EQUAL(crc32c(0, "", 0), 0u);
  BOOST_CHECK_EQUAL(format_crc32c(0xE3069283u), "crc32c:e3069283");
  // Against a bit-at-a-time reference, at every length and alignment.
  auto reference = [](const unsigned char* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k)
        c = (c & 1) != 0 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
  };
  std::string buf(300, '\0');
  for (size_t i = 0; i < buf.size(); ++i)
    buf[i] = static_cast<char>((i * 131 + 7) & 0xFF);
  const auto* bytes = reinterpret_cast<const unsigned char*>(buf.data());
  for (size_t start = 0; start < 9; ++start)
    for (size_t n = 0; start + n <= buf.size(); n += 7)
      BOOST_REQUIRE_EQUAL(crc32c(0, bytes + start, n),
                          reference(bytes + start, n));
}

BOOST_AUTO_TEST_CASE(header_length_limit) {
  // A header over 100,000,000 bytes is refused even when the file holds it.
  const uint64_t n = safetensors_max_header + 8;
  std::string bytes(8 + n, ' ');
  for (int i = 0; i < 8; ++i)
    bytes[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  bytes[8] = '{';
  expect_refused(bytes, "exceeds the limit of 100000000");
}

BOOST_AUTO_TEST_CASE(round_trip_values_shapes_metadata) {
  auto xs = sample_tensors();
  tensor_metadata meta{{"global_step", "1200"},
                       {"topology", R"({"worker": 2, "ps": ["a", "b"]})"},
                       {"model", "convnet \"seeds\" \\ caf"},
                       {"unicode", "gr\xC3\xBC\xC3\x9F\x65"},
                       {"empty", ""}};
  auto bytes = encode_safetensors(xs, meta);
  BOOST_REQUIRE(bytes);
  BOOST_CHECK_EQUAL(bytes->size() % 8, 0u); // 8 + N aligned, 4-byte floats
  auto back = decode_safetensors(bytes->data(), bytes->size(), "mem");
  BOOST_REQUIRE_MESSAGE(back, why(back));
  check_same(xs, back->tensors);
  BOOST_CHECK(back->metadata == meta);
  BOOST_CHECK_EQUAL(back->data_bytes, (6 + 3 + 1 + 0) * 4u);
  BOOST_CHECK_EQUAL(back->data_crc32c, data_crc32c(xs));
  BOOST_CHECK_EQUAL(8 + back->header_bytes + back->data_bytes, bytes->size());
  // Through a file.
  temp_dir dir;
  auto path = dir.file("x.safetensors");
  BOOST_REQUIRE(!write_safetensors_file(path, xs, meta));
  BOOST_CHECK(slurp(path) == *bytes);
  auto from_file = read_safetensors_file(path);
  BOOST_REQUIRE_MESSAGE(from_file, why(from_file));
  check_same(xs, from_file->tensors);
  BOOST_CHECK(from_file->metadata == meta);
  // No tensors, no metadata: "{}" padded.
  auto nothing = encode_safetensors({}, {});
  BOOST_REQUIRE(nothing);
  BOOST_CHECK_EQUAL(nothing->size(), 16u);
  auto none = decode_safetensors(nothing->data(), nothing->size(), "none");
  BOOST_REQUIRE(none);
  BOOST_CHECK(none->tensors.empty());
  BOOST_CHECK(none->metadata.empty());
}

BOOST_AUTO_TEST_CASE(order_follows_data_offsets) {
  // Files from other writers (Python sorts by name) come back in the order
  // of their data.
  auto bytes = make_file(
    R"({"z":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
    floats({1, 2}));
  auto x = decode_safetensors(bytes.data(), bytes.size(), "mem");
  BOOST_REQUIRE_MESSAGE(x, why(x));
  BOOST_REQUIRE_EQUAL(x->tensors.size(), 2u);
  BOOST_CHECK_EQUAL(x->tensors[0].name, "a");
  BOOST_CHECK_EQUAL(x->tensors[0].value[0], 1.0f);
  BOOST_CHECK_EQUAL(x->tensors[1].name, "z");
  BOOST_CHECK_EQUAL(x->tensors[1].value[0], 2.0f);
}

BOOST_AUTO_TEST_CASE(byte_exact_layout) {
  parameter_set xs;
  xs.push_back({"a", tensor{{2}, {1.0f, -2.0f}}});
  xs.push_back({"b", tensor{tensor_shape{}, {0.5f}}});
  auto bytes = encode_safetensors(xs, {{"k", "v"}});
  BOOST_REQUIRE(bytes);
  // Hand-made: N = 132 + 4 spaces = 136 = 0x88, little-endian; metadata
  // first, tensors in order, compact JSON; then 1.0f, -2.0f, 0.5f LE.
  const std::string header =
    R"({"__metadata__":{"k":"v"},)"
    R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
    R"("b":{"dtype":"F32","shape":[],"data_offsets":[8,12]}})"
    "    ";
  const std::string expected = std::string("\x88\0\0\0\0\0\0\0", 8) + header
                               + std::string("\x00\x00\x80\x3f"
                                             "\x00\x00\x00\xc0"
                                             "\x00\x00\x00\x3f",
                                             12);
  BOOST_CHECK_EQUAL(header.size(), 136u);
  BOOST_CHECK(*bytes == expected);
  // No metadata: no __metadata__ entry; 56 bytes need no padding.
  parameter_set ys;
  ys.push_back({"x", tensor{tensor_shape{1, 0}}});
  auto plain = encode_safetensors(ys, {});
  BOOST_REQUIRE(plain);
  BOOST_CHECK(*plain
              == std::string("\x38\0\0\0\0\0\0\0", 8)
                   + R"({"x":{"dtype":"F32","shape":[1,0],"data_offsets":[0,0]}})");
}

BOOST_AUTO_TEST_CASE(writer_refuses_bad_names) {
  parameter_set dup{{"w", tensor{{1}}}, {"w", tensor{{2}}}};
  auto x = encode_safetensors(dup, {});
  BOOST_REQUIRE(!x);
  BOOST_CHECK(is_code(x.error(), ec::invalid_argument));
  BOOST_CHECK(says(x.error(), "'w' appears twice"));
  parameter_set reserved{{"__metadata__", tensor{{1}}}};
  auto y = encode_safetensors(reserved, {});
  BOOST_REQUIRE(!y);
  BOOST_CHECK(says(y.error(), "reserved"));
  auto z = encode_safetensors({{"bad\xff", tensor{{1}}}}, {});
  BOOST_REQUIRE(!z);
  BOOST_CHECK(says(z.error(), "UTF-8"));
  auto m = encode_safetensors({}, {{"k", "\xc3"}});
  BOOST_REQUIRE(!m);
  BOOST_CHECK(says(m.error(), "UTF-8"));
  temp_dir dir;
  auto err = write_safetensors_file(dir.file("no/such/dir/x.safetensors"),
                                    sample_tensors(), {});
  BOOST_CHECK(is_code(err, ec::io_error));
  BOOST_CHECK(says(err, "no/such/dir/x.safetensors"));
  BOOST_CHECK(says(err, "No such file or directory"));
}

BOOST_AUTO_TEST_CASE(every_corruption_refused_by_name) {
  auto four = floats({1});
  // Structure of the file.
  expect_refused("", "truncated");
  expect_refused(std::string(7, '\0'), "truncated");
  expect_refused(make_file(one_f32, four).substr(0, 40), "beyond the end");
  {
    std::string huge(16, ' ');
    for (int i = 0; i < 8; ++i)
      huge[static_cast<size_t>(i)] = '\xff';
    expect_refused(huge, "beyond the end");
  }
  expect_refused(make_file("", ""), "cannot hold a JSON object");
  expect_refused(make_file("not json at all", ""), "not a JSON object");
  expect_refused(make_file("[1, 2, 3]", ""), "not a JSON object");
  expect_refused(make_file(R"({"t": {"dtype": "F32",)", ""), "not valid JSON");
  expect_refused(make_file("{\"t\": 1}\x01", ""), "not valid JSON");
  expect_refused(make_file(one_f32 + "xyz", four, false), "not valid JSON");
  // Entries.
  expect_refused(make_file(R"({"t": 5})", ""), "not an object");
  expect_refused(make_file(one_entry(R"("F99")", "[1]", "[0,4]"), four),
                 "unknown dtype 'F99'");
  expect_refused(
    make_file(one_entry(R"("F64")", "[1]", "[0,8]"), floats({1, 2})),
    "unsupported dtype 'F64'");
  expect_refused(make_file(one_entry("7", "[1]", "[0,4]"), four),
                 "dtype is not a string");
  expect_refused(make_file(R"({"t":{"dtype":"F32","shape":[1]}})", four),
                 "lacks dtype, shape or data_offsets");
  expect_refused(make_file(one_entry(f32, "[1]", "[0,4]", R"("x":1,)"), four),
                 "unknown header field 'x'");
  // One F32 tensor whose shape or data_offsets are wrong for its 4 bytes.
  // A product of dimensions beyond 2^64 is a mismatch, not an overflow.
  const std::vector<std::array<std::string, 3>> bad_extents{
    {"[2]", "[0,4]", "shape [2] needs 8 bytes but data_offsets [0,4] hold 4"},
    {"[-1]", "[0,4]", "non-negative integer"},
    {"[1.5]", "[0,4]", "non-negative integer"},
    {"{}", "[0,4]", "shape is not an array"},
    {"[1]", "[0,4,8]", "not a pair"},
    {"[1]", "[4,0]", "end before they begin"},
    {"[4294967296,4294967296,16]", "[0,4]", "more than 2^64"},
    {"[4611686018427387904]", "[0,4]", "hold 4"},
    {"[1]", "[4,8]", "beyond the data section of 4 bytes"},
  };
  for (const auto& [shape, offsets, needle] : bad_extents)
    expect_refused(make_file(one_entry(f32, shape, offsets), four), needle);
  // Offsets.
  expect_refused(make_file(R"({"t":{"dtype":"F32","shape":[1],)"
                           R"("data_offsets":[0,4]},)"
                           R"("u":{"dtype":"F32","shape":[2],)"
                           R"("data_offsets":[0,8]}})",
                           floats({1, 2})),
                 "overlaps");
  expect_refused(make_file(one_entry(f32, "[1]", "[4,8]"), floats({1, 2})),
                 "gap in the data section: bytes 0 to 4");
  expect_refused(make_file(one_f32, floats({1, 2})),
                 "4 trailing bytes after the last tensor");
  expect_refused(make_file(one_f32, four + "x"), "1 trailing bytes");
  // Metadata.
  expect_refused(make_file(R"({"__metadata__": [1]})", ""),
                 "__metadata__ is not an object");
  expect_refused(make_file(R"({"__metadata__": {"step": 7}})", ""),
                 "__metadata__ entry 'step' is not a string");
  // Duplicates, nesting, long arrays (refused while parsing).
  expect_refused(make_file(one_f32.substr(0, one_f32.size() - 1) + ","
                             + one_f32.substr(1),
                           four),
                 "names 't' twice");
  expect_refused(make_file(R"({"__metadata__": {"a": "1", "a": "2"}})", ""),
                 "key 'a' twice");
  expect_refused(make_file(R"({"t": {"x": [[1]]}})", ""), "nests deeper");
  expect_refused(make_file("{\"t\": " + std::string(100000, '[')
                             + std::string(100000, ']') + "}",
                           ""),
                 "nests deeper");
  {
    std::string shape = "[1";
    for (int i = 0; i < 100; ++i)
      shape += ",1";
    expect_refused(make_file(one_entry(f32, shape + "]", "[0,4]"), four),
                   "longer than 64 entries");
  }
  // Values.
  auto nan = std::numeric_limits<float>::quiet_NaN();
  auto inf = std::numeric_limits<float>::infinity();
  auto two = one_entry(f32, "[2]", "[0,8]");
  expect_refused(make_file(two, floats({1, nan})),
                 "tensor 't' holds a non-finite value");
  expect_refused(make_file(two, floats({-inf, 1})), "at index 0");
  safetensors_read_options lax;
  lax.require_finite = false;
  auto bytes = make_file(two, floats({1, nan}));
  auto ok = decode_safetensors(bytes.data(), bytes.size(), "lax", lax);
  BOOST_REQUIRE(ok);
  BOOST_CHECK(std::isnan(ok->tensors[0].value[1]));
}

BOOST_AUTO_TEST_CASE(truncation_at_every_byte_refused) {
  auto bytes = encode_safetensors(sample_tensors(), {{"global_step", "5"}});
  BOOST_REQUIRE(bytes);
  BOOST_TEST_MESSAGE("file of " << bytes->size() << " bytes");
  for (size_t n = 0; n < bytes->size(); ++n) {
    // Copy, so that a read past `n` would be caught by sanitizers.
    std::string cut = bytes->substr(0, n);
    auto x = decode_safetensors(cut.data(), cut.size(), "cut");
    BOOST_REQUIRE_MESSAGE(!x, "a file cut to " << n << " bytes was accepted");
    BOOST_CHECK_MESSAGE(is_code(x.error(), ec::bad_data), render(x.error()));
  }
  // The same through files.
  temp_dir dir;
  auto path = dir.file("cut.safetensors");
  for (size_t n = 0; n < bytes->size(); ++n) {
    spit(path, bytes->substr(0, n));
    auto x = read_safetensors_file(path);
    BOOST_REQUIRE_MESSAGE(!x, "a file cut to " << n << " bytes was accepted");
    BOOST_CHECK(is_code(x.error(), ec::bad_data));
    BOOST_CHECK(says(x.error(), path));
  }
}

BOOST_AUTO_TEST_CASE(every_byte_changed_never_crashes) {
  auto bytes = encode_safetensors(sample_tensors(), {{"global_step", "5"}});
  BOOST_REQUIRE(bytes);
  size_t refused = 0;
  for (size_t i = 0; i < bytes->size(); ++i)
    for (unsigned char v : {0x00, 0x7f, 0xff, 0x22, 0x5d}) {
      std::string bad = *bytes;
      bad[i] = static_cast<char>(v);
      auto x = decode_safetensors(bad.data(), bad.size(), "flip");
      if (!x) {
        ++refused;
        BOOST_CHECK_MESSAGE(is_code(x.error(), ec::bad_data),
                            render(x.error()));
      }
    }
  BOOST_TEST_MESSAGE(refused << " of " << 5 * bytes->size()
                             << " changed files refused");
  BOOST_CHECK(refused > 0);
}

BOOST_AUTO_TEST_CASE(unreadable_paths) {
  temp_dir dir;
  auto missing = read_safetensors_file(dir.file("missing.safetensors"));
  BOOST_REQUIRE(!missing);
  BOOST_CHECK(is_code(missing.error(), ec::io_error));
  BOOST_CHECK(says(missing.error(), "missing.safetensors"));
  auto a_dir = read_safetensors_file(dir.path());
  BOOST_REQUIRE(!a_dir);
  BOOST_CHECK(is_code(a_dir.error(), ec::io_error));
}

// The reference implementation, Python's safetensors from the tests' venv
// (scripts/test-venv.sh; SYNCFAC_PYTHON names another interpreter): its
// reader opens our file and we open its file.
BOOST_AUTO_TEST_CASE(python_safetensors_interoperates) {
  const char* env = std::getenv("SYNCFAC_PYTHON");
  std::string python = env != nullptr
                         ? env
                         : SYNCFAC_BINARY_DIR "/test-venv/bin/python";
  temp_dir dir;
  auto ours = dir.file("ours.safetensors");
  auto theirs = dir.file("theirs.safetensors");
  BOOST_REQUIRE(!write_safetensors_file(ours, sample_tensors(),
                                        {{"global_step", "7"}, {"m", "x"}}));
  auto script = dir.file("check.py");
  spit(script, R"(import sys
import numpy as np
from safetensors.numpy import load_file, save_file
from safetensors import safe_open
ours, theirs = sys.argv[1], sys.argv[2]
t = load_file(ours)
assert t["conv1/weights"].shape == (2, 3), t["conv1/weights"].shape
assert t["conv1/weights"].dtype == np.float32
assert list(t["conv1/weights"].ravel()) == [1, -2, 3.5, 0, np.float32(1e-30), 7]
assert t["global_scale"].shape == () and float(t["global_scale"]) == 42.0
assert t["empty"].shape == (4, 0, 2)
with safe_open(ours, "np") as f:
    assert f.metadata() == {"global_step": "7", "m": "x"}, f.metadata()
save_file({"b": np.arange(6, dtype=np.float32).reshape(3, 2),
           "a": np.array(-1.5, dtype=np.float32)}, theirs,
          metadata={"who": "python"})
)");
  auto cmd = python + " " + script + " " + ours + " " + theirs;
  int status = std::system(cmd.c_str());
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  BOOST_REQUIRE_MESSAGE(code != 127, python << " is missing: scripts/"
                        "test-venv.sh makes the tests' venv (scripts/test.sh "
                        "does)");
  BOOST_REQUIRE_MESSAGE(code == 0, "python's safetensors refused our file: "
                                   << cmd);
  auto x = read_safetensors_file(theirs);
  BOOST_REQUIRE_MESSAGE(x, why(x));
  BOOST_CHECK_EQUAL(x->metadata.at("who"), "python");
  BOOST_REQUIRE_EQUAL(x->tensors.size(), 2u);
  const auto& a = x->tensors[0].name == "a" ? x->tensors[0] : x->tensors[1];
  const auto& b = x->tensors[0].name == "b" ? x->tensors[0] : x->tensors[1];
  BOOST_CHECK(a.value == (tensor{tensor_shape{}, {-1.5f}}));
  BOOST_CHECK(b.value == (tensor{{3, 2}, {0, 1, 2, 3, 4, 5}}));
}
