#include "runtime/checkpoint/safetensors.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

// -- little-endian helpers ---------------------------------------------------

constexpr bool host_is_little_endian() {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return false;
#else
  return true;
#endif
}

void put_u64_le(unsigned char* out, uint64_t x) {
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<unsigned char>(x >> (8 * i));
}

uint64_t get_u64_le(const unsigned char* in) {
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i)
    x |= static_cast<uint64_t>(in[i]) << (8 * i);
  return x;
}

// Byte-swaps 4-byte words in place (big-endian hosts only).
void swap_words(void* data, size_t count) {
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < count; ++i, p += 4) {
    std::swap(p[0], p[3]);
    std::swap(p[1], p[2]);
  }
}

// -- CRC-32C -----------------------------------------------------------------

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) != 0 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

[[maybe_unused]] const std::array<uint32_t, 256>& crc_table() {
  static const auto table = make_crc_table();
  return table;
}

// The little-endian bytes of a tensor's values, in chunks.
template <class F>
caf::error for_each_le_chunk(const tensor& x, F&& f) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(x.data());
  const size_t total = static_cast<size_t>(x.size()) * sizeof(float);
  if (host_is_little_endian())
    return total == 0 ? caf::error{} : f(bytes, total);
  std::vector<unsigned char> buf;
  constexpr size_t chunk = size_t{1} << 16;
  for (size_t at = 0; at < total; at += chunk) {
    auto n = std::min(chunk, total - at);
    buf.assign(bytes + at, bytes + at + n);
    swap_words(buf.data(), n / 4);
    if (auto err = f(buf.data(), n))
      return err;
  }
  return caf::error{};
}

std::string errno_text(int code) {
  return std::strerror(code);
}

// -- reading -----------------------------------------------------------------

// Random access to the bytes of a file or a buffer.
class byte_source {
public:
  virtual ~byte_source() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly `n` bytes at `offset` (checked to be within size()).
  virtual caf::error read(uint64_t offset, void* dst, size_t n) = 0;
};

class memory_source : public byte_source {
public:
  memory_source(const void* data, size_t size)
    : data_(static_cast<const unsigned char*>(data)), size_(size) {
  }
  uint64_t size() const override {
    return size_;
  }
  caf::error read(uint64_t offset, void* dst, size_t n) override {
    if (n > 0)
      std::memcpy(dst, data_ + offset, n);
    return caf::error{};
  }

private:
  const unsigned char* data_;
  size_t size_;
};

class fd_source : public byte_source {
public:
  fd_source(int fd, uint64_t size, std::string path)
    : fd_(fd), size_(size), path_(std::move(path)) {
  }
  uint64_t size() const override {
    return size_;
  }
  caf::error read(uint64_t offset, void* dst, size_t n) override {
    auto* out = static_cast<char*>(dst);
    while (n > 0) {
      auto got = ::pread(fd_, out, std::min(n, size_t{1} << 30),
                         static_cast<off_t>(offset));
      if (got < 0) {
        if (errno == EINTR)
          continue;
        return make_error(ec::io_error, "cannot read " + path_ + ": "
                                          + errno_text(errno));
      }
      if (got == 0)
        return make_error(ec::bad_data,
                          path_ + ": truncated (the file shrank while it was "
                                  "being read)");
      out += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
    return caf::error{};
  }

private:
  int fd_;
  uint64_t size_;
  std::string path_;
};

// Thrown by the parser callback to stop on a structural problem.
struct header_refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct entry {
  std::string name;
  tensor_shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

using json = nlohmann::json;

// Parses the header, refusing nesting deeper than the format needs, long
// arrays and duplicate keys while parsing (before they cost memory).
json parse_header(const std::string& text) {
  std::set<std::string> top_keys;
  std::set<std::string> inner_keys;
  size_t array_length = 0;
  auto cb = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    using ev = json::parse_event_t;
    switch (event) {
      case ev::object_start:
      case ev::array_start:
        if (depth >= 3)
          throw header_refused("header nests deeper than the format allows");
        if (depth == 1)
          inner_keys.clear();
        if (depth == 2 && event == ev::array_start)
          array_length = 0;
        break;
      case ev::key:
        if (depth == 1) {
          auto key = parsed.get<std::string>();
          if (!top_keys.insert(key).second)
            throw header_refused("header names '" + key + "' twice");
        } else if (depth == 2) {
          auto key = parsed.get<std::string>();
          if (!inner_keys.insert(key).second)
            throw header_refused("header entry has key '" + key + "' twice");
        }
        break;
      case ev::value:
        if (depth == 3 && ++array_length > safetensors_max_rank)
          throw header_refused("header array longer than "
                               + std::to_string(safetensors_max_rank)
                               + " entries");
        break;
      default:
        break;
    }
    return true;
  };
  return json::parse(text, cb);
}

caf::error bad(const std::string& origin, const std::string& what) {
  return make_error(ec::bad_data, origin + ": " + what);
}

// Reads a non-negative integer that fits int64.
bool get_count(const json& x, uint64_t& out) {
  if (x.is_number_unsigned()) {
    out = x.get<uint64_t>();
    return out <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  }
  if (x.is_number_integer()) {
    auto v = x.get<int64_t>();
    if (v < 0)
      return false;
    out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

const char* known_dtypes[] = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
                              "I16",  "U16", "F16", "BF16",    "I32",
                              "U32",  "F32", "F64", "I64",     "U64"};

caf::expected<entry> parse_entry(const std::string& origin,
                                 const std::string& name, const json& x) {
  auto where = "tensor '" + name + "'";
  if (!x.is_object())
    return bad(origin, where + ": header entry is not an object");
  for (auto it = x.begin(); it != x.end(); ++it)
    if (it.key() != "dtype" && it.key() != "shape"
        && it.key() != "data_offsets")
      return bad(origin, where + ": unknown header field '" + it.key() + "'");
  auto dtype = x.find("dtype");
  auto shape = x.find("shape");
  auto offsets = x.find("data_offsets");
  if (dtype == x.end() || shape == x.end() || offsets == x.end())
    return bad(origin, where + ": header entry lacks dtype, shape or "
                               "data_offsets");
  if (!dtype->is_string())
    return bad(origin, where + ": dtype is not a string");
  auto type = dtype->get<std::string>();
  if (type != "F32") {
    bool known = std::find(std::begin(known_dtypes), std::end(known_dtypes),
                           type)
                 != std::end(known_dtypes);
    return bad(origin, where + ": " + (known ? "unsupported" : "unknown")
                         + " dtype '" + type + "' (syncfac reads F32 only)");
  }
  entry result;
  result.name = name;
  if (!shape->is_array())
    return bad(origin, where + ": shape is not an array");
  uint64_t elements = 1;
  bool overflow = false;
  for (const auto& d : *shape) {
    uint64_t dim = 0;
    if (!get_count(d, dim))
      return bad(origin, where + ": shape " + shape->dump()
                           + " holds something other than a non-negative "
                             "integer");
    result.shape.push_back(static_cast<int64_t>(dim));
    if (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / 4 / dim)
      overflow = true;
    else
      elements *= dim;
  }
  if (!offsets->is_array() || offsets->size() != 2
      || !get_count((*offsets)[0], result.begin)
      || !get_count((*offsets)[1], result.end))
    return bad(origin, where + ": data_offsets " + offsets->dump()
                         + " is not a pair of non-negative integers");
  if (result.end < result.begin)
    return bad(origin, where + ": data_offsets " + offsets->dump()
                         + " end before they begin");
  // A product that overflows cannot match any offsets within a file.
  if (overflow || elements * 4 != result.end - result.begin)
    return bad(origin, where + ": shape " + to_string(result.shape)
                         + " needs "
                         + (overflow ? std::string{"more than 2^64"}
                                     : std::to_string(elements * 4))
                         + " bytes but data_offsets " + offsets->dump()
                         + " hold " + std::to_string(result.end - result.begin));
  return result;
}

caf::expected<safetensors_contents>
decode(byte_source& src, const std::string& origin,
       const safetensors_read_options& options) {
  const uint64_t file_size = src.size();
  if (file_size < 8)
    return bad(origin, "truncated: " + std::to_string(file_size)
                         + " bytes, shorter than the 8-byte header length");
  unsigned char prefix[8];
  if (auto err = src.read(0, prefix, 8))
    return err;
  const uint64_t n = get_u64_le(prefix);
  if (n > file_size - 8)
    return bad(origin, "header length " + std::to_string(n)
                         + " goes beyond the end of the file ("
                         + std::to_string(file_size)
                         + " bytes): truncated or not a safetensors file");
  if (n > safetensors_max_header)
    return bad(origin, "header length " + std::to_string(n)
                         + " exceeds the limit of "
                         + std::to_string(safetensors_max_header));
  if (n < 2)
    return bad(origin, "header of " + std::to_string(n)
                         + " bytes cannot hold a JSON object");
  std::string text(static_cast<size_t>(n), '\0');
  if (auto err = src.read(8, text.data(), text.size()))
    return err;
  if (text[0] != '{')
    return bad(origin, "header is not a JSON object (it does not start with "
                       "'{'): not a safetensors file");
  json header;
  try {
    header = parse_header(text);
  } catch (const header_refused& e) {
    return bad(origin, e.what());
  } catch (const json::exception& e) {
    return bad(origin, std::string{"header is not valid JSON: "} + e.what());
  }
  if (!header.is_object())
    return bad(origin, "header is not a JSON object");
  safetensors_contents result;
  result.header_bytes = n;
  result.data_bytes = file_size - 8 - n;
  std::vector<entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object())
        return bad(origin, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          return bad(origin, "__metadata__ entry '" + m.key()
                               + "' is not a string");
        result.metadata.emplace(m.key(), m->get<std::string>());
      }
      continue;
    }
    auto e = parse_entry(origin, it.key(), *it);
    if (!e)
      return std::move(e.error());
    if (e->end > result.data_bytes)
      return bad(origin, "tensor '" + e->name + "': data_offsets ["
                           + std::to_string(e->begin) + ", "
                           + std::to_string(e->end)
                           + "] beyond the data section of "
                           + std::to_string(result.data_bytes) + " bytes");
    entries.push_back(std::move(*e));
  }
  header = json{};
  std::sort(entries.begin(), entries.end(),
            [](const entry& x, const entry& y) {
              return std::tie(x.begin, x.end) < std::tie(y.begin, y.end);
            });
  uint64_t at = 0;
  const entry* previous = nullptr;
  for (const auto& e : entries) {
    if (e.begin < at)
      return bad(origin, "tensor '" + e.name + "' overlaps tensor '"
                           + previous->name + "' (data_offsets begin at "
                           + std::to_string(e.begin) + ", before "
                           + std::to_string(at) + ")");
    if (e.begin > at)
      return bad(origin, "gap in the data section: bytes "
                           + std::to_string(at) + " to "
                           + std::to_string(e.begin) + " before tensor '"
                           + e.name + "' belong to no tensor");
    at = e.end;
    previous = &e;
  }
  if (at != result.data_bytes)
    return bad(origin, std::to_string(result.data_bytes - at)
                         + " trailing bytes after the last tensor (data "
                           "section of "
                         + std::to_string(result.data_bytes)
                         + " bytes, tensors end at " + std::to_string(at)
                         + ")");
  // Every size is now bounded by the file's: allocate and read.
  result.tensors.reserve(entries.size());
  uint32_t crc = 0;
  for (auto& e : entries) {
    tensor value{e.shape};
    auto bytes = static_cast<size_t>(e.end - e.begin);
    if (auto err = src.read(8 + n + e.begin, value.data(), bytes))
      return err;
    crc = crc32c(crc, value.data(), bytes);
    if (!host_is_little_endian())
      swap_words(value.data(), bytes / 4);
    if (options.require_finite && !value.all_finite()) {
      int64_t i = 0;
      while (i < value.size() && std::isfinite(value[i]))
        ++i;
      return bad(origin, "tensor '" + e.name + "' holds a non-finite value ("
                           + std::to_string(value[i]) + " at index "
                           + std::to_string(i) + ")");
    }
    result.tensors.push_back(named_tensor{std::move(e.name), std::move(value)});
  }
  result.data_crc32c = crc;
  return result;
}

} // namespace

uint32_t crc32c(uint32_t crc, const void* data, size_t size) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__SSE4_2__) && defined(__x86_64__)
  // The CPU's CRC32 instruction computes CRC-32C, 8 bytes at a time.
  uint64_t c = crc;
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  crc = static_cast<uint32_t>(c);
  for (; size > 0; --size, ++p)
    crc = __builtin_ia32_crc32qi(crc, *p);
#else
  const auto& table = crc_table();
  for (size_t i = 0; i < size; ++i)
    crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
#endif
  return ~crc;
}

uint32_t data_crc32c(const parameter_set& xs) noexcept {
  uint32_t crc = 0;
  for (const auto& x : xs)
    static_cast<void>(for_each_le_chunk(x.value, [&](const void* p, size_t n) {
      crc = crc32c(crc, p, n);
      return caf::error{};
    }));
  return crc;
}

std::string format_crc32c(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", static_cast<unsigned>(crc));
  return std::string{"crc32c:"} + buf;
}

caf::expected<std::string> safetensors_header(const parameter_set& tensors,
                                              const tensor_metadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& meta = header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata)
      meta[key] = value;
  }
  std::set<std::string> names;
  uint64_t at = 0;
  for (const auto& x : tensors) {
    if (x.name == "__metadata__")
      return make_error(ec::invalid_argument,
                        "safetensors: '__metadata__' is reserved and cannot "
                        "name a tensor");
    if (!names.insert(x.name).second)
      return make_error(ec::invalid_argument,
                        "safetensors: tensor name '" + x.name
                          + "' appears twice");
    const auto& shape = x.value.shape();
    if (shape.size() > safetensors_max_rank)
      return make_error(ec::invalid_argument,
                        "safetensors: tensor '" + x.name + "' has rank "
                          + std::to_string(shape.size()) + ", more than "
                          + std::to_string(safetensors_max_rank));
    if (element_count(shape) != x.value.size())
      return make_error(ec::internal, "safetensors: tensor '" + x.name
                                        + "' has " + std::to_string(x.value.size())
                                        + " values for shape "
                                        + to_string(shape));
    auto bytes = static_cast<uint64_t>(x.value.size()) * sizeof(float);
    auto& e = header[x.name];
    e["dtype"] = "F32";
    e["shape"] = shape;
    e["data_offsets"] = {at, at + bytes};
    at += bytes;
  }
  std::string text;
  try {
    text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  } catch (const nlohmann::json::exception& e) {
    return make_error(ec::invalid_argument,
                      std::string{"safetensors: a tensor name or metadata "
                                  "string is not valid UTF-8: "}
                        + e.what());
  }
  // 8 + N must be a multiple of 8, i.e. N too.
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > safetensors_max_header)
    return make_error(ec::invalid_argument,
                      "safetensors: header of " + std::to_string(text.size())
                        + " bytes exceeds the limit of "
                        + std::to_string(safetensors_max_header));
  return text;
}

caf::error write_safetensors(const byte_sink& sink,
                             const parameter_set& tensors,
                             const tensor_metadata& metadata) {
  auto header = safetensors_header(tensors, metadata);
  if (!header)
    return std::move(header.error());
  unsigned char prefix[8];
  put_u64_le(prefix, header->size());
  if (auto err = sink(prefix, 8))
    return err;
  if (auto err = sink(header->data(), header->size()))
    return err;
  for (const auto& x : tensors)
    if (auto err = for_each_le_chunk(x.value, sink))
      return err;
  return caf::error{};
}

caf::expected<std::string> encode_safetensors(const parameter_set& tensors,
                                              const tensor_metadata& metadata) {
  std::string out;
  auto err = write_safetensors(
    [&](const void* p, size_t n) {
      out.append(static_cast<const char*>(p), n);
      return caf::error{};
    },
    tensors, metadata);
  if (err)
    return err;
  return out;
}

caf::error write_safetensors_file(const std::string& path,
                                  const parameter_set& tensors,
                                  const tensor_metadata& metadata) {
  // Parameters: owner-only (docs/checkpoints.md).
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return make_error(ec::io_error, "cannot create " + path + ": "
                                      + errno_text(errno));
  auto err = write_safetensors(
    [&](const void* p, size_t n) -> caf::error {
      const auto* bytes = static_cast<const char*>(p);
      while (n > 0) {
        auto put = ::write(fd, bytes, std::min(n, size_t{1} << 30));
        if (put < 0) {
          if (errno == EINTR)
            continue;
          return make_error(ec::io_error, "cannot write " + path + ": "
                                            + errno_text(errno));
        }
        bytes += put;
        n -= static_cast<size_t>(put);
      }
      return caf::error{};
    },
    tensors, metadata);
  if (::close(fd) != 0 && !err)
    err = make_error(ec::io_error, "cannot write " + path + ": "
                                     + errno_text(errno));
  return err;
}

caf::expected<safetensors_contents>
decode_safetensors(const void* data, size_t size, const std::string& origin,
                   safetensors_read_options options) {
  memory_source src{data, size};
  return decode(src, origin, options);
}

caf::expected<safetensors_contents>
read_safetensors_file(const std::string& path,
                      safetensors_read_options options) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return make_error(ec::io_error, "cannot open " + path + ": "
                                      + errno_text(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    auto code = errno;
    ::close(fd);
    return make_error(ec::io_error, "cannot stat " + path + ": "
                                      + errno_text(code));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(ec::io_error, path + " is not a regular file");
  }
  fd_source src{fd, static_cast<uint64_t>(st.st_size), path};
  auto result = decode(src, path, options);
  ::close(fd);
  return result;
}

} // namespace syncfac
