#include "runtime/data/idx.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <zlib.h>

#include "runtime/base/error.hpp"

namespace syncfac {

int64_t idx_array::element_count() const noexcept {
  int64_t result = 1;
  for (auto d : dims)
    result *= d;
  return result;
}

namespace {

// zlib counts in uInt; chunking keeps multi-GiB buffers safe.
constexpr size_t max_zlib_chunk = size_t{1} << 30;

struct file_closer {
  void operator()(FILE* f) const noexcept {
    fclose(f);
  }
};

using file_ptr = std::unique_ptr<FILE, file_closer>;

std::string errno_text() {
  return std::strerror(errno);
}

std::string hex_byte(unsigned value) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%02X", value & 0xFFu);
  return buf;
}

// A stream of bytes that only reads short at the real end of the data, so
// callers can tell "truncated" from "more to come" by the count alone.
class byte_source {
public:
  virtual ~byte_source() = default;
  virtual caf::expected<size_t> read(uint8_t* buf, size_t n) = 0;

  /// Checks the integrity of whatever is left to read, if the format can
  /// (gzip's CRC can); an error if the rest is corrupt.
  virtual caf::error verify_rest() {
    return caf::none;
  }
};

class plain_source : public byte_source {
public:
  plain_source(std::string path, file_ptr file)
    : path_(std::move(path)), file_(std::move(file)) {
  }

  caf::expected<size_t> read(uint8_t* buf, size_t n) override {
    auto got = fread(buf, 1, n, file_.get());
    if (got < n && ferror(file_.get()))
      return make_error(ec::io_error, path_ + ": read failed: " + errno_text());
    return got;
  }

private:
  std::string path_;
  file_ptr file_;
};

// Inflates gzip members with zlib's raw stream API rather than gzread:
// gzread silently ignores garbage after the last member, and we want every
// malformation reported.
class gzip_source : public byte_source {
public:
  gzip_source(std::string path, file_ptr file)
    : path_(std::move(path)), file_(std::move(file)), in_(64 * 1024) {
  }

  ~gzip_source() override {
    if (initialised_)
      inflateEnd(&zs_);
  }

  gzip_source(const gzip_source&) = delete;
  gzip_source& operator=(const gzip_source&) = delete;

  caf::error init() {
    // 16 + MAX_WBITS: expect a gzip header and trailer (CRC-32, length).
    auto rc = inflateInit2(&zs_, 16 + MAX_WBITS);
    if (rc != Z_OK)
      return make_error(ec::internal,
                        path_ + ": cannot initialise zlib: " + zError(rc));
    initialised_ = true;
    return caf::none;
  }

  caf::expected<size_t> read(uint8_t* buf, size_t n) override {
    size_t produced = 0;
    while (produced < n) {
      if (auto err = refill())
        return err;
      if (member_done_) {
        if (zs_.avail_in == 0)
          return produced; // the real end
        if (auto err = start_next_member())
          return err;
      }
      auto step = inflate_some(buf + produced, n - produced);
      if (!step)
        return std::move(step.error());
      produced += *step;
    }
    return produced;
  }

  caf::error verify_rest() override {
    // Bounded: an error path must not inflate a decompression bomb forever.
    constexpr size_t limit = size_t{4} << 30;
    std::vector<uint8_t> buf(64 * 1024);
    for (size_t total = 0; total < limit; total += buf.size()) {
      auto got = read(buf.data(), buf.size());
      if (!got)
        return std::move(got.error());
      if (*got < buf.size())
        break;
    }
    return caf::none;
  }

private:
  caf::error refill() {
    if (zs_.avail_in > 0 || eof_)
      return caf::none;
    auto got = fread(in_.data(), 1, in_.size(), file_.get());
    if (got < in_.size()) {
      if (ferror(file_.get()))
        return make_error(ec::io_error,
                          path_ + ": read failed: " + errno_text());
      eof_ = true;
    }
    zs_.next_in = in_.data();
    zs_.avail_in = static_cast<uInt>(got);
    return caf::none;
  }

  // gzip allows concatenated members (gunzip accepts them), so only bytes
  // that cannot start one are garbage.
  caf::error start_next_member() {
    if (zs_.next_in[0] != 0x1f)
      return make_error(ec::bad_data,
                        path_ + ": trailing garbage after the gzip stream");
    inflateReset(&zs_);
    member_done_ = false;
    return caf::none;
  }

  // Inflate may still hold output when all input is consumed, so a stream
  // counts as truncated only once zlib makes no progress at end of file.
  caf::expected<size_t> inflate_some(uint8_t* out, size_t n) {
    auto chunk = std::min(n, max_zlib_chunk);
    auto avail_in_before = zs_.avail_in;
    zs_.next_out = out;
    zs_.avail_out = static_cast<uInt>(chunk);
    auto rc = inflate(&zs_, Z_NO_FLUSH);
    auto produced = chunk - zs_.avail_out;
    if (rc == Z_STREAM_END) {
      member_done_ = true;
      return produced;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      return corrupt(rc);
    if (produced == 0 && zs_.avail_in == avail_in_before) {
      if (zs_.avail_in == 0 && eof_)
        return make_error(ec::bad_data,
                          path_ + ": truncated gzip stream: the compressed "
                                  "data ends early");
      // Input and output space but no progress: never loop on it.
      return corrupt(rc);
    }
    return produced;
  }

  caf::error corrupt(int rc) const {
    std::string why = zs_.msg != nullptr ? zs_.msg : zError(rc);
    return make_error(ec::bad_data, path_ + ": corrupt gzip stream: " + why);
  }

  std::string path_;
  file_ptr file_;
  std::vector<uint8_t> in_;
  z_stream zs_{};
  bool initialised_ = false;
  bool eof_ = false;
  bool member_done_ = false;
};

caf::expected<std::unique_ptr<byte_source>> open_source(const std::string& path) {
  file_ptr file{fopen(path.c_str(), "rb")};
  if (!file)
    return make_error(ec::io_error, path + ": cannot open: " + errno_text());
  uint8_t magic[2] = {0, 0};
  auto got = fread(magic, 1, 2, file.get());
  if (got < 2 && ferror(file.get()))
    return make_error(ec::io_error, path + ": read failed: " + errno_text());
  if (fseek(file.get(), 0, SEEK_SET) != 0)
    return make_error(ec::io_error, path + ": cannot rewind: " + errno_text());
  if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    auto src = std::make_unique<gzip_source>(path, std::move(file));
    if (auto err = src->init())
      return err;
    return std::unique_ptr<byte_source>{std::move(src)};
  }
  return std::unique_ptr<byte_source>{
    std::make_unique<plain_source>(path, std::move(file))};
}

const char* idx_type_name(uint8_t type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return nullptr;
  }
}

caf::error check_type(const std::string& path, uint8_t type) {
  if (type == idx_ubyte)
    return caf::none;
  auto name = idx_type_name(type);
  auto what = name != nullptr ? std::string{"unsupported element type "}
                                  + hex_byte(type) + " (" + name + ")"
                              : "unknown element type " + hex_byte(type);
  return make_error(ec::bad_data,
                    path + ": " + what
                      + "; only 0x08 (unsigned byte) is supported");
}

caf::error truncated_header(const std::string& path, size_t need,
                            size_t found) {
  return make_error(ec::bad_data, path + ": truncated: the IDX header needs "
                                    + std::to_string(need) + " bytes, found "
                                    + std::to_string(found));
}

// Reads magic, type, rank and dims; leaves `src` at the first element.
caf::error read_header(const std::string& path, byte_source& src,
                       idx_array& out) {
  uint8_t head[4];
  auto got = src.read(head, 4);
  if (!got)
    return std::move(got.error());
  if (*got < 4)
    return truncated_header(path, 4, *got);
  if (head[0] != 0 || head[1] != 0)
    return make_error(ec::bad_data,
                      path + ": not an IDX file: magic bytes are "
                        + hex_byte(head[0]) + " " + hex_byte(head[1])
                        + ", expected 0x00 0x00");
  if (auto err = check_type(path, head[2]))
    return err;
  auto ndim = head[3];
  if (ndim < 1 || ndim > 4)
    return make_error(ec::bad_data, path + ": unsupported rank "
                                      + std::to_string(ndim)
                                      + " (IDX arrays here have 1 to 4 dims)");
  uint8_t raw[16];
  got = src.read(raw, 4u * ndim);
  if (!got)
    return std::move(got.error());
  if (*got < 4u * ndim)
    return truncated_header(path, 4 + 4u * ndim, 4 + *got);
  out.type = head[2];
  out.dims.clear();
  int64_t count = 1;
  for (int i = 0; i < ndim; ++i) {
    const uint8_t* p = raw + 4 * i;
    int64_t dim = (int64_t{p[0]} << 24) | (int64_t{p[1]} << 16)
                  | (int64_t{p[2]} << 8) | int64_t{p[3]};
    if (dim == 0)
      return make_error(ec::bad_data,
                        path + ": dimension " + std::to_string(i) + " is 0");
    count *= dim; // < 2^31 * 2^32 before the check: no overflow
    if (count > max_idx_elements)
      return make_error(ec::bad_data,
                        path + ": dims describe more than "
                          + std::to_string(max_idx_elements) + " elements");
    out.dims.push_back(dim);
  }
  return caf::none;
}

// Counts what is left after the payload; bounded so that a huge (or
// decompression-bomb) tail cannot keep us reading forever.
caf::expected<size_t> count_trailing(byte_source& src) {
  constexpr size_t limit = size_t{16} << 20;
  std::vector<uint8_t> buf(64 * 1024);
  size_t total = 0;
  while (total <= limit) {
    auto got = src.read(buf.data(), buf.size());
    if (!got)
      return std::move(got.error());
    total += *got;
    if (*got < buf.size())
      break;
  }
  return total;
}

// Reads `count` bytes into `out`, growing it with what actually arrives
// (reads of 1 MiB, then as much as read so far): a 20-byte file whose
// header claims 2 GiB must not make us allocate 2 GiB. Returns the number
// of bytes read, short only at the end of the data.
caf::expected<size_t> read_growing(byte_source& src, size_t count,
                                   std::vector<uint8_t>& out) {
  constexpr size_t first_read = size_t{1} << 20;
  out.clear();
  size_t total = 0;
  while (total < count) {
    auto n = std::min(count - total, std::max(first_read, total));
    out.resize(total + n);
    auto got = src.read(out.data() + total, n);
    if (!got)
      return std::move(got.error());
    total += *got;
    if (*got < n)
      break;
  }
  out.resize(total);
  return total;
}

caf::error read_payload(const std::string& path, byte_source& src,
                        idx_array& out) {
  auto count = static_cast<size_t>(out.element_count());
  auto got = read_growing(src, count, out.data);
  if (!got)
    return std::move(got.error());
  if (*got < count)
    return make_error(ec::bad_data, path + ": truncated: header says "
                                      + std::to_string(count)
                                      + " bytes of data, found "
                                      + std::to_string(*got));
  // Reading past the payload also makes zlib verify the gzip trailer.
  auto extra = count_trailing(src);
  if (!extra)
    return std::move(extra.error());
  if (*extra > 0)
    return make_error(ec::bad_data,
                      path + ": trailing garbage: header says "
                        + std::to_string(count) + " bytes of data, found "
                        + std::to_string(count + *extra)
                        + (*extra > (size_t{16} << 20) ? " or more" : ""));
  return caf::none;
}

caf::error check_writable(const std::string& path, const idx_array& x) {
  auto fail = [&](const std::string& why) {
    return make_error(ec::invalid_argument, path + ": cannot write IDX: " + why);
  };
  if (x.type != idx_ubyte)
    return fail("element type " + hex_byte(x.type)
                + " is not 0x08 (unsigned byte)");
  if (x.dims.empty() || x.dims.size() > 4)
    return fail("rank " + std::to_string(x.dims.size()) + " is not 1 to 4");
  int64_t count = 1;
  for (auto d : x.dims) {
    if (d < 1 || d > max_idx_elements)
      return fail("dimension " + std::to_string(d) + " is out of range");
    count *= d;
    if (count > max_idx_elements)
      return fail("too many elements");
  }
  if (static_cast<int64_t>(x.data.size()) != count)
    return fail("dims say " + std::to_string(count) + " bytes, data has "
                + std::to_string(x.data.size()));
  return caf::none;
}

std::vector<uint8_t> encode_header(const idx_array& x) {
  std::vector<uint8_t> head{0, 0, x.type, static_cast<uint8_t>(x.dims.size())};
  for (auto d : x.dims) {
    auto v = static_cast<uint32_t>(d);
    head.insert(head.end(), {static_cast<uint8_t>(v >> 24),
                             static_cast<uint8_t>(v >> 16),
                             static_cast<uint8_t>(v >> 8),
                             static_cast<uint8_t>(v)});
  }
  return head;
}

caf::error write_plain(const std::string& path,
                       const std::vector<uint8_t>& head, const idx_array& x) {
  file_ptr file{fopen(path.c_str(), "wb")};
  if (!file)
    return make_error(ec::io_error, path + ": cannot create: " + errno_text());
  auto ok = fwrite(head.data(), 1, head.size(), file.get()) == head.size()
            && fwrite(x.data.data(), 1, x.data.size(), file.get())
                 == x.data.size();
  // fclose flushes: its failure is a write failure too.
  auto closed = fclose(file.release()) == 0;
  if (!ok || !closed)
    return make_error(ec::io_error, path + ": write failed: " + errno_text());
  return caf::none;
}

bool gz_write_all(gzFile gz, const uint8_t* data, size_t n) {
  while (n > 0) {
    auto chunk = static_cast<unsigned>(std::min(n, max_zlib_chunk));
    if (gzwrite(gz, data, chunk) != static_cast<int>(chunk))
      return false;
    data += chunk;
    n -= chunk;
  }
  return true;
}

caf::error write_gzip(const std::string& path,
                      const std::vector<uint8_t>& head, const idx_array& x) {
  auto gz = gzopen(path.c_str(), "wb");
  if (gz == nullptr)
    return make_error(ec::io_error, path + ": cannot create: " + errno_text());
  auto ok = gz_write_all(gz, head.data(), head.size())
            && gz_write_all(gz, x.data.data(), x.data.size());
  std::string why;
  if (!ok) {
    int errnum = 0;
    why = gzerror(gz, &errnum);
  }
  auto rc = gzclose(gz);
  if (ok && rc != Z_OK)
    why = rc == Z_ERRNO ? errno_text() : zError(rc);
  if (!ok || rc != Z_OK)
    return make_error(ec::io_error, path + ": write failed: " + why);
  return caf::none;
}

} // namespace

caf::expected<idx_array> read_idx(const std::string& path) {
  auto src = open_source(path);
  if (!src)
    return std::move(src.error());
  idx_array result;
  auto err = read_header(path, **src, result);
  if (!err)
    err = read_payload(path, **src, result);
  if (!err)
    return result;
  // A damaged gzip stream can inflate to plausible but wrong bytes that fail
  // an IDX check first; the corruption is the real cause, so report it.
  if (auto deeper = (*src)->verify_rest())
    return deeper;
  return err;
}

caf::error write_idx(const std::string& path, const idx_array& x, bool gzip) {
  if (auto err = check_writable(path, x))
    return err;
  auto head = encode_header(x);
  return gzip ? write_gzip(path, head, x) : write_plain(path, head, x);
}

} // namespace syncfac
