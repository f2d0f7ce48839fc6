#define BOOST_TEST_MODULE sync_push_parts
#include <boost/test/unit_test.hpp>

// A gradient push split into parts for the network and assembled again:
// the assembly equals the whole push, on its own and through a real PS
// shard, whatever order the parts come in; malformed parts are refused
// naming what is wrong, and drop the worker's push.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <malloc.h>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/ps_shard.hpp"
#include "runtime/allocator.hpp"
#include "runtime/base/error.hpp"
#include "actors/program_config.hpp"
#include "messages/push_parts.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;
using namespace std::chrono_literals;

namespace {

tensor ramp(tensor_shape shape, float salt) {
  tensor t{std::move(shape)};
  for (int64_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<float>(i % 97) * 0.25f + salt;
  return t;
}

/// A big matrix (4,000 floats), a small one, a vector.
gradient_push sample_push(int32_t worker, int64_t step, float salt = 0) {
  gradient_push p;
  p.worker = worker;
  p.local_step = step;
  p.dense = {{"fc/weights", ramp({40, 100}, salt)},
             {"fc/biases", ramp({100}, salt)},
             {"conv/weights", ramp({3, 3, 2, 4}, salt)}};
  return p;
}

const tensor_shape* shape_of(const std::string& name) {
  static const auto whole = sample_push(0, 0);
  for (const auto& g : whole.dense)
    if (g.name == name)
      return &g.value.shape();
  return nullptr;
}

/// The assembled push's values of every variable, whole or from its
/// slices (which must cover it exactly once).
parameter_set values_of(const gradient_push& p) {
  auto result = p.dense;
  for (auto& [name, pieces] : pieces_by_variable(p)) {
    tensor t{*shape_of(name)};
    int64_t covered = 0;
    for (const auto& piece : pieces) {
      std::copy(piece.values, piece.values + piece.count,
                t.data() + piece.offset);
      covered += piece.count;
    }
    BOOST_REQUIRE_EQUAL(covered, t.size());
    result.push_back({name, std::move(t)});
  }
  return result;
}

bool same_dense(const gradient_push& a, const gradient_push& b) {
  auto xs = values_of(a);
  auto ys = values_of(b);
  if (xs.size() != ys.size())
    return false;
  for (const auto& x : xs) {
    auto y = std::find_if(ys.begin(), ys.end(), [&](const named_tensor& t) {
      return t.name == x.name;
    });
    if (y == ys.end() || y->value != x.value)
      return false;
  }
  return true;
}

/// The bytes of dense values one part carries, whole or sliced.
int64_t part_bytes(const gradient_push& p) {
  int64_t bytes = 0;
  for (const auto& g : p.dense)
    bytes += g.value.size() * 4;
  for (const auto& s : p.slices)
    bytes += s.size() * 4;
  return bytes;
}

std::string refusal(push_assembler& a, gradient_push part) {
  auto r = a.add(std::move(part));
  return r ? std::string{"accepted"} : render(r.error());
}

} // namespace

BOOST_AUTO_TEST_CASE(a_small_push_stays_whole) {
  auto parts = split_push(sample_push(0, 3), 1 << 20);
  BOOST_REQUIRE_EQUAL(parts.size(), 1u);
  BOOST_TEST(parts[0].parts == 1);
  BOOST_TEST(parts[0].slices.empty());
  BOOST_TEST(split_push(sample_push(0, 3), 0).size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_push_of_more_than_half_a_part_goes_as_two_halves) {
  // 16,688 bytes: whole up to 33,376-byte parts, two halves below that.
  auto whole = sample_push(1, 4);
  BOOST_TEST(split_push(whole, 2 * 16688).size() == 1u);
  auto parts = split_push(whole, 20000);
  BOOST_REQUIRE_EQUAL(parts.size(), 2u);
  for (const auto& p : parts) {
    BOOST_TEST(part_bytes(p) <= 8344); // half, rounded up to a whole float
    BOOST_TEST(part_bytes(p) >= 8000);
  }
  push_assembler a{shape_of};
  BOOST_REQUIRE(a.add(parts[1]));
  auto r = a.add(parts[0]);
  BOOST_REQUIRE_MESSAGE(r, test::why(r));
  BOOST_REQUIRE(r->has_value());
  BOOST_TEST(same_dense(**r, whole));
  // An odd number of floats: halves of whole floats, not three parts.
  gradient_push odd;
  odd.dense = {{"v", tensor{{5}}}};
  auto halves = split_push(odd, 32);
  BOOST_REQUIRE_EQUAL(halves.size(), 2u);
  BOOST_TEST(halves[0].slices.at(0).count == 3);
  BOOST_TEST(halves[1].slices.at(0).count == 2);
}

BOOST_AUTO_TEST_CASE(parts_in_any_order_assemble_to_the_whole_push) {
  auto whole = sample_push(2, 5);
  // 1 KiB parts: the 16,000-byte matrix in 16 slices, the small ones
  // packed.
  auto parts = split_push(whole, 1024);
  BOOST_REQUIRE_GT(parts.size(), 16u);
  for (const auto& p : parts) {
    BOOST_TEST(p.parts == static_cast<int32_t>(parts.size()));
    BOOST_TEST(part_bytes(p) <= 1024);
  }
  std::reverse(parts.begin(), parts.end());
  std::swap(parts[1], parts[5]);
  push_assembler a{shape_of};
  for (size_t i = 0; i < parts.size(); ++i) {
    auto r = a.add(parts[i]);
    BOOST_REQUIRE_MESSAGE(r, test::why(r));
    if (i + 1 < parts.size()) {
      BOOST_TEST(!r->has_value());
    } else {
      BOOST_REQUIRE(r->has_value());
      BOOST_TEST((*r)->worker == 2);
      BOOST_TEST((*r)->local_step == 5);
      BOOST_TEST(same_dense(**r, whole));
      // The big matrix stays in its 16 slices: nothing is copied into a
      // whole tensor.
      BOOST_TEST((*r)->slices.size() == 16u);
      BOOST_TEST((*r)->dense.size() == 2u);
    }
  }
  BOOST_TEST(a.in_assembly() == 0u);
}

BOOST_AUTO_TEST_CASE(malformed_parts_are_refused_and_drop_the_push) {
  auto parts = split_push(sample_push(0, 5), 1024);
  push_assembler a{shape_of};
  BOOST_REQUIRE(a.add(parts[0]));
  BOOST_TEST(refusal(a, parts[0]).find("part sent twice")
             != std::string::npos);
  BOOST_TEST(a.in_assembly() == 0u);
  auto wrong_count = parts[1];
  wrong_count.parts += 1;
  BOOST_REQUIRE(a.add(parts[0]));
  BOOST_TEST(refusal(a, wrong_count).find("earlier parts said")
             != std::string::npos);
  auto index = parts[1];
  index.part = index.parts;
  BOOST_TEST(refusal(a, index).find("part index out of range")
             != std::string::npos);
  // A slice beyond the variable, one overlapping another, one of a
  // variable the shard lacks.
  auto sliced = std::find_if(parts.begin(), parts.end(),
                             [](const gradient_push& p) {
                               return !p.slices.empty();
                             });
  BOOST_REQUIRE(sliced != parts.end());
  auto beyond = *sliced;
  beyond.slices[0].offset = 3990;
  BOOST_TEST(refusal(a, beyond).find("is not a 1-D range within its 4000")
             != std::string::npos);
  auto first = *sliced;
  auto overlap = *sliced;
  overlap.part = (sliced->part + 1) % sliced->parts;
  overlap.slices[0].offset += 10;
  BOOST_REQUIRE(a.add(first));
  BOOST_TEST(refusal(a, overlap).find("overlaps an earlier one")
             != std::string::npos);
  auto unknown = *sliced;
  unknown.slices[0].variable = "nope";
  BOOST_TEST(refusal(a, unknown).find("'nope', which the shard does not hold")
             != std::string::npos);
  // Missing elements show when the last part is in.
  auto gap = split_push(sample_push(0, 6), 1024);
  for (auto& p : gap)
    for (auto& s : p.slices)
      if (s.offset == 0) {
        s.source.reset();
        s.values = tensor{tensor_shape{10}};
      }
  push_assembler b{shape_of};
  caf::expected<std::optional<gradient_push>> r{std::optional<gradient_push>{}};
  for (auto& p : gap)
    r = b.add(p);
  BOOST_REQUIRE(!r);
  BOOST_TEST(render(r.error()).find("cover") != std::string::npos,
             render(r.error()));
}

BOOST_AUTO_TEST_CASE(a_newer_step_replaces_an_unfinished_push) {
  auto old_parts = split_push(sample_push(1, 5), 1024);
  auto new_parts = split_push(sample_push(1, 6, 1.0f), 1024);
  push_assembler a{shape_of};
  BOOST_REQUIRE(a.add(old_parts[0]));
  caf::expected<std::optional<gradient_push>> r{std::optional<gradient_push>{}};
  for (auto& p : new_parts)
    r = a.add(p);
  BOOST_REQUIRE(r);
  BOOST_REQUIRE(r->has_value());
  BOOST_TEST((*r)->local_step == 6);
  BOOST_TEST(a.abandoned() == 1);
  // The rest of the older push is refused, not mixed in.
  BOOST_TEST(refusal(a, new_parts[0]) == "accepted");
  BOOST_TEST(refusal(a, old_parts[1]).find("older than the push in assembly")
             != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_shard_applies_a_push_in_parts_as_the_whole_push) {
  program_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto make_shard = [&] {
    ps_shard_config sc;
    auto vars = sample_push(0, 0, 3.0f).dense;
    sc.variables = vars;
    sc.optimizer = test::optimizer_of(optimizer_kind::sgd, 0.5f);
    auto shard = spawn_ps_shard(sys, sc);
    BOOST_REQUIRE(shard);
    return *shard;
  };
  auto push_all = [&](const ps_actor& shard, std::vector<gradient_push> ps) {
    bool fresh = false;
    for (auto& p : ps)
      self->request(shard, 10s, push_atom::value, std::move(p))
        .receive([&](push_ack& ack) { fresh = ack.accepted; },
                 [&](caf::error& err) { BOOST_FAIL(render(err)); });
    self->request(shard, 10s, apply_atom::value, int64_t{0}, int64_t{1})
      .receive([](applied&) {},
               [&](caf::error& err) { BOOST_FAIL(render(err)); });
    shard_params out;
    self->request(shard, 10s, pull_atom::value)
      .receive([&](shard_params& p) { out = std::move(p); },
               [&](caf::error& err) { BOOST_FAIL(render(err)); });
    BOOST_TEST(fresh);
    return out;
  };
  auto whole = push_all(make_shard(), {sample_push(0, 0)});
  auto in_parts = push_all(make_shard(), split_push(sample_push(0, 0), 512));
  BOOST_REQUIRE_EQUAL(whole.values.size(), in_parts.values.size());
  for (size_t i = 0; i < whole.values.size(); ++i)
    BOOST_TEST((whole.values[i].value == in_parts.values[i].value),
               whole.values[i].name);
}

BOOST_AUTO_TEST_CASE(a_shard_refuses_a_push_in_parts_with_nan_whole) {
  program_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  ps_shard_config sc;
  sc.variables = sample_push(0, 0, 3.0f).dense;
  sc.optimizer = test::optimizer_of(optimizer_kind::sgd, 0.5f);
  auto shard = spawn_ps_shard(sys, sc);
  BOOST_REQUIRE(shard);
  // NaN in the last slice of the big matrix: the parts before it were
  // taken, but nothing of the push may reach the accumulators.
  auto parts = split_push(sample_push(0, 0), 1024);
  int64_t nan_at = -1;
  for (auto it = parts.rbegin(); it != parts.rend() && nan_at < 0; ++it)
    for (auto& s : it->slices) {
      tensor copy{tensor_shape{s.size()}};
      std::copy(s.data(), s.data() + s.size(), copy.data());
      copy[3] = std::nanf("");
      nan_at = s.offset + 3;
      s.source.reset();
      s.values = std::move(copy);
      break;
    }
  BOOST_REQUIRE_GE(nan_at, 0);
  std::string refused;
  for (auto& p : parts)
    self->request(*shard, 10s, push_atom::value, std::move(p))
      .receive([](push_ack&) {},
               [&](caf::error& err) { refused = render(err); });
  BOOST_TEST(refused.find("'fc/weights'") != std::string::npos, refused);
  BOOST_TEST(refused.find("NaN or Inf (first at element "
                          + std::to_string(nan_at) + ")")
               != std::string::npos,
             refused);
  // The same push without the NaN is then accepted and applied alone.
  for (auto& p : split_push(sample_push(0, 0), 1024))
    self->request(*shard, 10s, push_atom::value, std::move(p))
      .receive([](push_ack&) {},
               [&](caf::error& err) { BOOST_FAIL(render(err)); });
  applied done;
  self->request(*shard, 10s, apply_atom::value, int64_t{0}, int64_t{1})
    .receive([&](applied& a) { done = a; },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  shard_params out;
  self->request(*shard, 10s, pull_atom::value)
    .receive([&](shard_params& p) { out = std::move(p); },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  auto start = sample_push(0, 0, 3.0f).dense;
  auto grad = sample_push(0, 0).dense;
  for (size_t i = 0; i < out.values.size(); ++i) {
    const auto& v = out.values[i];
    auto g = std::find_if(grad.begin(), grad.end(),
                          [&](const named_tensor& t) {
                            return t.name == v.name;
                          });
    auto s = std::find_if(start.begin(), start.end(),
                          [&](const named_tensor& t) {
                            return t.name == v.name;
                          });
    BOOST_REQUIRE(g != grad.end());
    for (int64_t k = 0; k < v.value.size(); ++k)
      BOOST_REQUIRE_EQUAL(v.value[k], s->value[k] - 0.5f * g->value[k]);
  }
}

BOOST_AUTO_TEST_CASE(part_buffers_come_from_the_heap_and_stay_after_free) {
  // What makes parts pay (runtime/allocator.hpp): the 16 buffers of a
  // 16 MiB push in 1 MiB parts neither get pages of their own from the
  // kernel nor give them back when the push is done.
  BOOST_REQUIRE(keep_freed_memory());
  auto before = mallinfo2();
  std::vector<std::vector<float>> parts;
  for (int i = 0; i < 16; ++i)
    parts.emplace_back(size_t{1} << 18, 1.0f);
  auto during = mallinfo2();
  BOOST_TEST(during.hblks == before.hblks);
  parts.clear();
  auto after = mallinfo2();
  // Other threads of the process (actor systems of earlier cases winding
  // down) may take a few KiB of the freed bytes meanwhile: the check
  // allows 1 MiB of the 16, against the 16 MiB that go back to the kernel
  // without keep_freed_memory.
  constexpr size_t others = size_t{1} << 20;
  BOOST_TEST(after.fordblks + others >= before.fordblks + (size_t{16} << 20),
             "free bytes kept in the heap: " << before.fordblks << " -> "
                                             << after.fordblks);
}
