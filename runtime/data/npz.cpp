#include "runtime/data/npz.hpp"

#include <cstring>
#include <fstream>
#include <iterator>

#include <zlib.h>

#include "runtime/base/error.hpp"
#include "runtime/host_limits.hpp"
#include "runtime/input_file.hpp"

namespace syncfac {

namespace {

uint32_t u16(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
}

uint32_t u32(const uint8_t* p) {
  return u16(p) | (u16(p + 2) << 16);
}

void put16(std::vector<uint8_t>& out, uint32_t x) {
  out.push_back(static_cast<uint8_t>(x));
  out.push_back(static_cast<uint8_t>(x >> 8));
}

void put32(std::vector<uint8_t>& out, uint32_t x) {
  put16(out, x & 0xffff);
  put16(out, x >> 16);
}

constexpr uint32_t local_magic = 0x04034b50;
constexpr uint32_t central_magic = 0x02014b50;
constexpr uint32_t end_magic = 0x06054b50;

/// Inflates a raw deflate stream of exactly `expected` bytes.
caf::expected<std::vector<uint8_t>> inflate_member(const uint8_t* in,
                                                   size_t in_size,
                                                   size_t expected,
                                                   const std::string& where) {
  std::vector<uint8_t> out(expected);
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
    return make_error(ec::bad_data, where + ": cannot initialise zlib");
  zs.next_in = const_cast<Bytef*>(in);
  zs.avail_in = static_cast<uInt>(in_size);
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  auto rc = inflate(&zs, Z_FINISH);
  auto produced = zs.total_out;
  inflateEnd(&zs);
  if (rc != Z_STREAM_END || produced != expected)
    return make_error(ec::bad_data,
                      where + ": corrupt deflate data ("
                        + (rc == Z_STREAM_END ? std::string{"wrong size"}
                                              : std::string{zError(rc)})
                        + ")");
  return out;
}

} // namespace

caf::expected<std::map<std::string, npy_array>>
parse_npz(const uint8_t* bytes, size_t size, const std::string& name) {
  auto bad = [&](const std::string& what) {
    return make_error(ec::bad_data, name + ": " + what);
  };
  if (size < 22)
    return bad("not a .npz file (too short for a zip archive)");
  // The end-of-central-directory record: the last 22 bytes, or earlier
  // behind an archive comment of up to 64 KiB.
  size_t end = size - 22;
  size_t lowest = size > 22 + 65535 ? size - 22 - 65535 : 0;
  while (u32(bytes + end) != end_magic) {
    if (end == lowest)
      return bad("not a .npz file (no zip end-of-directory record)");
    --end;
  }
  auto entries = u16(bytes + end + 10);
  auto dir_size = u32(bytes + end + 12);
  auto dir_at = u32(bytes + end + 16);
  if (dir_at == 0xffffffff || entries == 0xffff)
    return bad("zip64 archives are not supported");
  if (static_cast<uint64_t>(dir_at) + dir_size > end)
    return bad("the zip directory lies outside the file (truncated?)");
  std::map<std::string, npy_array> result;
  size_t at = dir_at;
  for (uint32_t i = 0; i < entries; ++i) {
    if (at + 46 > end || u32(bytes + at) != central_magic)
      return bad("zip directory entry " + std::to_string(i) + " is corrupt");
    const uint8_t* e = bytes + at;
    auto flags = u16(e + 8);
    auto method = u16(e + 10);
    auto crc = u32(e + 16);
    auto packed = u32(e + 20);
    auto unpacked = u32(e + 24);
    auto name_len = u16(e + 28);
    auto extra_len = u16(e + 30);
    auto comment_len = u16(e + 32);
    auto local_at = u32(e + 42);
    if (at + 46 + name_len > end)
      return bad("zip directory entry " + std::to_string(i) + " is truncated");
    std::string member(reinterpret_cast<const char*>(e + 46), name_len);
    at += 46 + name_len + extra_len + comment_len;
    auto where = name + " member '" + member + "'";
    if (packed == 0xffffffff || unpacked == 0xffffffff
        || local_at == 0xffffffff)
      return make_error(ec::bad_data, where + ": zip64 members are not "
                                              "supported");
    if (flags & 1)
      return make_error(ec::bad_data, where + ": encrypted");
    if (method != 0 && method != 8)
      return make_error(ec::bad_data,
                        where + ": compression method "
                          + std::to_string(method)
                          + " is not supported (stored or deflated only)");
    if (static_cast<uint64_t>(local_at) + 30 > size
        || u32(bytes + local_at) != local_magic)
      return make_error(ec::bad_data, where + ": local header is corrupt");
    auto data_at = static_cast<uint64_t>(local_at) + 30
                   + u16(bytes + local_at + 26) + u16(bytes + local_at + 28);
    if (data_at + packed > size)
      return make_error(ec::bad_data, where + ": truncated (" +
                                        std::to_string(packed) +
                                        " bytes claimed)");
    if (unpacked > (uint64_t{1} << 32) - 1 || (method == 0 && packed != unpacked))
      return make_error(ec::bad_data, where + ": sizes do not agree");
    // Deflate expands at most ~1032:1; a bigger claim is a lie that would
    // cost memory before the stream shows it.
    if (method == 8 && unpacked / 1032 > packed + 1)
      return make_error(ec::bad_data, where + ": claims " +
                                        std::to_string(unpacked) +
                                        " bytes from " + std::to_string(packed));
    std::vector<uint8_t> inflated;
    const uint8_t* content = bytes + data_at;
    if (method == 8) {
      auto out = inflate_member(content, packed, unpacked, where);
      if (!out)
        return out.error();
      inflated = std::move(*out);
      content = inflated.data();
    }
    auto sum = crc32(0L, Z_NULL, 0);
    sum = crc32(sum, content, unpacked);
    if (sum != crc)
      return make_error(ec::bad_data, where + ": CRC-32 mismatch (corrupt)");
    auto suffix = std::string{".npy"};
    if (member.size() <= suffix.size()
        || member.compare(member.size() - suffix.size(), suffix.size(),
                          suffix)
             != 0)
      continue; // not an array (numpy writes nothing else, others might)
    auto key = member.substr(0, member.size() - suffix.size());
    auto array = parse_npy(content, unpacked,
                           name + " array '" + key + "'");
    if (!array)
      return array.error();
    if (!result.emplace(key, std::move(*array)).second)
      return make_error(ec::bad_data, where + ": appears twice");
  }
  return result;
}

caf::expected<std::map<std::string, npy_array>>
read_npz(const std::string& path) {
  // A regular file only (a device would be read for ever), and one the
  // process can hold: the whole archive is read into memory.
  auto label = "'" + path + "'";
  auto memory = usable_memory();
  auto size = input_file_size(path, label, memory.amount);
  if (!size)
    return size.error();
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return make_error(ec::io_error, label + ": cannot be read");
  std::vector<uint8_t> bytes{std::istreambuf_iterator<char>{in},
                             std::istreambuf_iterator<char>{}};
  if (in.bad())
    return make_error(ec::io_error, "'" + path + "': read failed");
  return parse_npz(bytes.data(), bytes.size(), "'" + path + "'");
}

std::vector<uint8_t>
write_npz(const std::map<std::string, npy_array>& arrays) {
  std::vector<uint8_t> out;
  std::vector<uint8_t> dir;
  uint32_t count = 0;
  for (const auto& [key, array] : arrays) {
    auto content = write_npy(array);
    auto member = key + ".npy";
    auto crc = static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), content.data(),
            static_cast<uInt>(content.size())));
    auto size = static_cast<uint32_t>(content.size());
    auto offset = static_cast<uint32_t>(out.size());
    put32(out, local_magic);
    put16(out, 20); // version needed
    put16(out, 0);  // flags
    put16(out, 0);  // stored
    put32(out, 0);  // time, date
    put32(out, crc);
    put32(out, size);
    put32(out, size);
    put16(out, static_cast<uint32_t>(member.size()));
    put16(out, 0);
    out.insert(out.end(), member.begin(), member.end());
    out.insert(out.end(), content.begin(), content.end());
    put32(dir, central_magic);
    put16(dir, 20);
    put16(dir, 20);
    put16(dir, 0);
    put16(dir, 0);
    put32(dir, 0);
    put32(dir, crc);
    put32(dir, size);
    put32(dir, size);
    put16(dir, static_cast<uint32_t>(member.size()));
    put16(dir, 0);
    put16(dir, 0);
    put16(dir, 0);
    put16(dir, 0);
    put32(dir, 0);
    put32(dir, offset);
    dir.insert(dir.end(), member.begin(), member.end());
    ++count;
  }
  auto dir_at = static_cast<uint32_t>(out.size());
  out.insert(out.end(), dir.begin(), dir.end());
  put32(out, end_magic);
  put16(out, 0);
  put16(out, 0);
  put16(out, count);
  put16(out, count);
  put32(out, static_cast<uint32_t>(dir.size()));
  put32(out, dir_at);
  put16(out, 0);
  return out;
}

} // namespace syncfac
