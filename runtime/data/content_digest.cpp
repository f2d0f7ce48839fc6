#include "runtime/data/content_digest.hpp"

#include <algorithm>
#include <cstring>

#include "runtime/data/dataset.hpp"

namespace syncfac {

namespace {

constexpr uint64_t p1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t p2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t p3 = 0x165667B19E3779F9ULL;
constexpr uint64_t p4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t p5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotl(uint64_t x, int r) noexcept {
  return (x << r) | (x >> (64 - r));
}

inline uint64_t round(uint64_t acc, uint64_t word) noexcept {
  acc += word * p2;
  acc = rotl(acc, 31);
  return acc * p1;
}

inline uint64_t merge(uint64_t acc, uint64_t lane) noexcept {
  acc ^= round(0, lane);
  return acc * p1 + p4;
}

inline uint64_t load64(const uint8_t* p) noexcept {
  uint64_t x;
  std::memcpy(&x, p, 8); // little-endian hosts only (as the wire format)
  return x;
}

} // namespace

content_digest::content_digest() noexcept
  : lanes_{p1 + p2, p2, 0, 0 - p1} {
}

void content_digest::block(const uint8_t* p) noexcept {
  lanes_[0] = round(lanes_[0], load64(p));
  lanes_[1] = round(lanes_[1], load64(p + 8));
  lanes_[2] = round(lanes_[2], load64(p + 16));
  lanes_[3] = round(lanes_[3], load64(p + 24));
}

void content_digest::add(const void* bytes, size_t n) noexcept {
  auto p = static_cast<const uint8_t*>(bytes);
  total_ += n;
  if (tail_size_ > 0) {
    auto take = std::min(n, sizeof(tail_) - tail_size_);
    std::memcpy(tail_ + tail_size_, p, take);
    tail_size_ += take;
    p += take;
    n -= take;
    if (tail_size_ < sizeof(tail_))
      return;
    block(tail_);
    tail_size_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32)
    block(p);
  std::memcpy(tail_, p, n);
  tail_size_ = n;
}

uint64_t content_digest::value() const noexcept {
  uint64_t h = rotl(lanes_[0], 1) + rotl(lanes_[1], 7) + rotl(lanes_[2], 12)
               + rotl(lanes_[3], 18);
  for (auto lane : lanes_)
    h = merge(h, lane);
  h += total_;
  size_t i = 0;
  for (; i + 8 <= tail_size_; i += 8)
    h = rotl(h ^ round(0, load64(tail_ + i)), 27) * p1 + p4;
  for (; i < tail_size_; ++i)
    h = rotl(h ^ (tail_[i] * p5), 11) * p1;
  h ^= h >> 33;
  h *= p2;
  h ^= h >> 29;
  h *= p3;
  h ^= h >> 32;
  return h;
}

uint64_t digest_of(const dataset& data) noexcept {
  content_digest d;
  const int64_t shape[] = {data.count, data.height, data.width,
                           data.channels};
  d.add(shape, sizeof(shape));
  auto n = static_cast<size_t>(data.element_count());
  if (data.float_inputs())
    d.add(data.value_data(), n * sizeof(float));
  else
    d.add(data.pixel_data(), n);
  d.add(data.labels.data(), data.labels.size());
  return d.value();
}

} // namespace syncfac
