#define BOOST_TEST_MODULE data_npy
#include <boost/test/unit_test.hpp>

// NumPy .npy and .npz files (runtime/data/npy.*, npz.*, load_npz): what
// numpy writes reads back; every malformation is refused naming the file,
// the array and the problem.

#include <cmath>
#include <cstring>
#include <memory>
#include <map>
#include <string>

#include <zlib.h>

#include "runtime/data/batcher.hpp"
#include "runtime/data/dataset.hpp"
#include "runtime/data/npz.hpp"
#include "tests/runtime/data_fixtures.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

npy_array u8_array(std::vector<int64_t> shape) {
  npy_array x;
  x.descr = "|u1";
  x.shape = std::move(shape);
  x.data.resize(static_cast<size_t>(x.element_count()));
  for (size_t i = 0; i < x.data.size(); ++i)
    x.data[i] = static_cast<uint8_t>(i * 7);
  return x;
}

npy_array f4_array(std::vector<int64_t> shape, float first = 0.5f) {
  npy_array x;
  x.kind = npy_kind::floating;
  x.item_size = 4;
  x.descr = "<f4";
  x.shape = std::move(shape);
  std::vector<float> values(static_cast<size_t>(x.element_count()));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = first + static_cast<float>(i);
  x.data.resize(values.size() * 4);
  std::memcpy(x.data.data(), values.data(), x.data.size());
  return x;
}

npy_array ints(std::vector<int64_t> values, const char* descr = "<i4") {
  npy_array x;
  x.kind = npy_kind::signed_int;
  x.item_size = descr[2] - '0';
  x.descr = descr;
  x.shape = {static_cast<int64_t>(values.size())};
  for (auto v : values)
    for (int64_t b = 0; b < x.item_size; ++b)
      x.data.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * b)));
  return x;
}

/// Labels as 8-byte integers (little-endian, whatever `descr` says).
npy_array labels(std::vector<int64_t> ys, const char* descr = "<i8") {
  return ints(std::move(ys), descr);
}

std::string error_of(const bytes& file) {
  auto res = parse_npy(file.data(), file.size(), "'a.npy'");
  return res ? std::string{} : render(res.error());
}

/// A .npy file with `header` (the dict literal) and `payload`.
bytes npy_with(const std::string& header, const bytes& payload) {
  bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.push_back(static_cast<uint8_t>(header.size()));
  out.push_back(static_cast<uint8_t>(header.size() >> 8));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

/// `stored` (an archive of write_npz) with its one member deflated, as
/// numpy.savez_compressed writes it.
bytes deflate_single_member(const std::string& member, const bytes& content) {
  bytes packed(compressBound(content.size()) + 64);
  z_stream zs{};
  BOOST_REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8,
                             Z_DEFAULT_STRATEGY)
                == Z_OK);
  zs.next_in = const_cast<Bytef*>(content.data());
  zs.avail_in = static_cast<uInt>(content.size());
  zs.next_out = packed.data();
  zs.avail_out = static_cast<uInt>(packed.size());
  BOOST_REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  packed.resize(zs.total_out);
  deflateEnd(&zs);
  auto crc = static_cast<uint32_t>(
    crc32(crc32(0L, Z_NULL, 0), content.data(),
          static_cast<uInt>(content.size())));
  bytes out;
  auto put16 = [&](bytes& b, uint32_t x) {
    b.push_back(static_cast<uint8_t>(x));
    b.push_back(static_cast<uint8_t>(x >> 8));
  };
  auto put32 = [&](bytes& b, uint32_t x) {
    put16(b, x & 0xffff);
    put16(b, x >> 16);
  };
  auto header = [&](bytes& b, bool central) {
    put32(b, central ? 0x02014b50 : 0x04034b50);
    if (central)
      put16(b, 20);
    put16(b, 20);
    put16(b, 0);
    put16(b, 8);
    put32(b, 0);
    put32(b, crc);
    put32(b, static_cast<uint32_t>(packed.size()));
    put32(b, static_cast<uint32_t>(content.size()));
    put16(b, static_cast<uint32_t>(member.size()));
    put16(b, 0);
    if (central) {
      put16(b, 0);
      put16(b, 0);
      put16(b, 0);
      put32(b, 0);
      put32(b, 0); // the local header's offset
    }
    b.insert(b.end(), member.begin(), member.end());
  };
  header(out, false);
  out.insert(out.end(), packed.begin(), packed.end());
  auto dir_at = out.size();
  header(out, true);
  auto dir_size = out.size() - dir_at;
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, 1);
  put16(out, 1);
  put32(out, static_cast<uint32_t>(dir_size));
  put32(out, static_cast<uint32_t>(dir_at));
  put16(out, 0);
  return out;
}

std::string write_set(const temp_dir& tmp,
                      const std::map<std::string, npy_array>& arrays,
                      const std::string& name = "set.npz") {
  auto path = tmp.file(name);
  write_bytes(path, write_npz(arrays));
  return path;
}

std::string load_error(const std::string& path, split which = split::train,
                       npz_inputs inputs = npz_inputs::pixels) {
  auto res = load_npz(path, which, inputs);
  return res ? std::string{} : render(res.error());
}

void says(const std::string& msg, const std::vector<std::string>& needles) {
  BOOST_TEST(!msg.empty());
  for (const auto& n : needles)
    BOOST_TEST(msg.find(n) != std::string::npos,
               "'" << n << "' not in: " << msg);
}

} // namespace

BOOST_AUTO_TEST_CASE(npy_round_trips_every_supported_dtype) {
  for (auto x : {u8_array({3, 4}), f4_array({2, 2, 3}), labels({1, 5, 0})}) {
    auto file = write_npy(x);
    BOOST_TEST((file.size() - x.data.size()) % 64 == 0u); // numpy's padding
    auto back = parse_npy(file.data(), file.size(), "x");
    BOOST_REQUIRE_MESSAGE(back, why(back));
    BOOST_TEST(back->shape == x.shape);
    BOOST_TEST(back->data == x.data);
    BOOST_TEST(back->item_size == x.item_size);
  }
  // Negative values of every signed width read as themselves.
  for (auto [descr, size] : {std::pair{"|i1", 1}, std::pair{"<i2", 2},
                             std::pair{"<i4", 4}, std::pair{"<i8", 8}}) {
    npy_array n;
    n.kind = npy_kind::signed_int;
    n.item_size = size;
    n.descr = descr;
    n.shape = {1};
    n.data.assign(static_cast<size_t>(size), 0xff); // -1
    auto f = write_npy(n);
    auto r = parse_npy(f.data(), f.size(), descr);
    BOOST_REQUIRE(r);
    BOOST_TEST(r->as_integer(0) == -1, descr);
  }
  auto y = labels({4, 2});
  auto file = write_npy(y);
  auto back = parse_npy(file.data(), file.size(), "y");
  BOOST_REQUIRE(back);
  BOOST_TEST(back->as_integer(0) == 4);
  BOOST_TEST(back->as_integer(1) == 2);
}

BOOST_AUTO_TEST_CASE(npy_as_numpy_spells_its_headers) {
  // numpy's own spellings: version 2.0, '<u1', a 1-tuple "(3,)", True/False.
  std::string header = "{'descr': '<u1', 'fortran_order': False, "
                       "'shape': (3,), }          \n";
  bytes v2 = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0,
              static_cast<uint8_t>(header.size()), 0, 0, 0};
  v2.insert(v2.end(), header.begin(), header.end());
  v2.insert(v2.end(), {7, 8, 9});
  auto x = parse_npy(v2.data(), v2.size(), "v2");
  BOOST_REQUIRE_MESSAGE(x, why(x));
  BOOST_TEST(x->shape == std::vector<int64_t>{3});
  BOOST_TEST(x->as_integer(2) == 9);
}

BOOST_AUTO_TEST_CASE(npy_malformations_are_named) {
  auto good = write_npy(u8_array({2, 3}));
  says(error_of(bytes{'n', 'o', 'p', 'e', 0, 0, 0, 0, 0, 0, 0}),
       {"'a.npy'", "no \\x93NUMPY magic"});
  auto v9 = good;
  v9[6] = 9;
  says(error_of(v9), {"'a.npy'", "version 9.0"});
  auto truncated = good;
  truncated.resize(truncated.size() - 1);
  says(error_of(truncated), {"truncated", "6 bytes of data, 5"});
  auto trailing = good;
  trailing.push_back(0);
  says(error_of(trailing), {"1 bytes of trailing data"});
  auto short_header = good;
  short_header.resize(30);
  says(error_of(short_header), {"truncated header"});
  says(error_of(npy_with("{'descr': '<u1', 'fortran_order': True, "
                         "'shape': (1,), }",
                         {1})),
       {"Fortran order"});
  says(error_of(npy_with("{'descr': '>i4', 'fortran_order': False, "
                         "'shape': (1,), }",
                         {0, 0, 0, 1})),
       {"'>i4' is big-endian"});
  says(error_of(npy_with("{'descr': '<c8', 'fortran_order': False, "
                         "'shape': (1,), }",
                         bytes(8))),
       {"dtype '<c8' is not supported"});
  says(error_of(npy_with("{'descr': [('a', '<i4')], 'fortran_order': False, "
                         "'shape': (1,), }",
                         bytes(4))),
       {"structured dtypes"});
  says(error_of(npy_with("{'descr': '<u1', 'fortran_order': False, }", {})),
       {"lacks 'shape'"});
  says(error_of(npy_with("{'descr': '<u1', 'fortran_order': False, "
                         "'shape': (-1,), }",
                         {})),
       {"non-negative integers"});
  says(error_of(npy_with("{'descr': '<u1', 'fortran_order': False, "
                         "'shape': (99999999999,), }",
                         {})),
       {"larger than"});
  says(error_of(npy_with("{'descr': '<f4', 'fortran_order': False, "
                         "'shape': (65536, 65536), }",
                         {})),
       {"elements"});
  says(error_of(npy_with("{'descr': '<u1', 'fortran_order': False, "
                         "'shape': (1,), 'extra': 1}",
                         {1})),
       {"unexpected header key 'extra'"});
}

BOOST_AUTO_TEST_CASE(npz_stored_and_deflated_members_read) {
  temp_dir tmp;
  auto path = write_set(tmp, {{"x_train", u8_array({4, 2, 3})},
                              {"y_train", labels({0, 1, 2, 1})},
                              {"x_test", u8_array({2, 2, 3})},
                              {"y_test", labels({2, 0})}});
  auto train = load_npz(path, split::train, npz_inputs::pixels);
  BOOST_REQUIRE_MESSAGE(train, why(train));
  BOOST_TEST(train->count == 4);
  BOOST_TEST(train->height == 2);
  BOOST_TEST(train->width == 3);
  BOOST_TEST(train->channels == 1);
  BOOST_TEST(train->num_classes == 3);
  BOOST_TEST(train->pixels == u8_array({4, 2, 3}).data);
  BOOST_TEST(train->source.find("set.npz (train)") != std::string::npos);
  auto test = load_npz(path, split::test, npz_inputs::pixels);
  BOOST_REQUIRE_MESSAGE(test, why(test));
  BOOST_TEST(test->count == 2);
  // A deflated member, as numpy.savez_compressed writes.
  auto x = f4_array({3, 5});
  auto archive = deflate_single_member("x_train.npy", write_npy(x));
  auto arrays = parse_npz(archive.data(), archive.size(), "'c.npz'");
  BOOST_REQUIRE_MESSAGE(arrays, why(arrays));
  BOOST_TEST(arrays->at("x_train").data == x.data);
  // A flipped bit in the deflated data is found (zlib or the CRC-32).
  archive[41 + 10] ^= 0x10; // after the 30-byte header and the name
  auto broken = parse_npz(archive.data(), archive.size(), "'c.npz'");
  BOOST_REQUIRE(!broken);
  says(render(broken.error()), {"'c.npz' member 'x_train.npy'"});
}

BOOST_AUTO_TEST_CASE(float_inputs_of_rank_2_batch_as_given) {
  temp_dir tmp;
  auto path = write_set(tmp, {{"x_train", f4_array({6, 4}, -2.0f)},
                              {"y_train", labels({0, 1, 0, 1, 0, 1})}});
  auto train = load_npz(path, split::train, npz_inputs::pixels);
  BOOST_REQUIRE_MESSAGE(train, why(train));
  BOOST_TEST(train->float_inputs());
  BOOST_TEST(train->height == 1);
  BOOST_TEST(train->width == 1);
  BOOST_TEST(train->channels == 4);
  auto b = batcher::make(*train, 6, 1, 0, 1);
  BOOST_REQUIRE_MESSAGE(b, why(b));
  batch out;
  b->next(out);
  BOOST_TEST(out.images.shape() == (tensor_shape{6, 1, 1, 4}));
  // Every value is one of the file's, unscaled: -2 + k for k in [0, 24).
  for (int64_t i = 0; i < out.images.size(); ++i) {
    auto v = out.images[i];
    BOOST_TEST((v >= -2.0f && v < 22.0f && v == std::floor(v)));
  }
}

BOOST_AUTO_TEST_CASE(arrays_with_an_owner_are_borrowed_not_copied) {
  // The Python module's path (docs/python.md): uint8 and float32 inputs
  // are read where they are while the owner keeps them; the set batches,
  // digests and checks as the copied one does; other dtypes are copied.
  auto y = labels({0, 1, 2, 1, 0, 2});
  auto owner = std::make_shared<int>(0);
  array_names names{"", "x", "y", "arrays"};
  for (auto x : {f4_array({6, 2, 2}), ints({0, 9, 255, 7, 1, 2, 3, 4, 5, 6,
                                           8, 10}, "|u1")}) {
    if (x.item_size == 1) {
      x.kind = npy_kind::unsigned_int;
      x.shape = {6, 2};
    }
    auto copied = dataset_from_arrays(x.view(), y.view(), names,
                                      npz_inputs::pixels);
    auto borrowed = dataset_from_arrays(x.view(), y.view(), names,
                                        npz_inputs::pixels, owner);
    BOOST_REQUIRE_MESSAGE(copied, why(copied));
    BOOST_REQUIRE_MESSAGE(borrowed, why(borrowed));
    const void* seen = borrowed->float_inputs()
                         ? static_cast<const void*>(borrowed->value_data())
                         : static_cast<const void*>(borrowed->pixel_data());
    BOOST_TEST(seen == static_cast<const void*>(x.data.data()));
    BOOST_TEST(borrowed->pixels.empty());
    BOOST_TEST(borrowed->values.empty());
    BOOST_TEST(borrowed->borrowed.owner == owner);
    BOOST_TEST(copied->borrowed.owner == nullptr);
    BOOST_TEST(borrowed->element_count() == copied->element_count());
    BOOST_TEST(borrowed->digest == copied->digest);
    BOOST_TEST(borrowed->num_classes == 3);
    batch a;
    batch b;
    auto ba = batcher::make(*copied, 6, 1, 0, 1);
    auto bb = batcher::make(*borrowed, 6, 1, 0, 1);
    BOOST_REQUIRE(ba);
    BOOST_REQUIRE(bb);
    ba->next(a);
    bb->next(b);
    BOOST_TEST(a.images.values() == b.images.values());
  }
  // int64 pixels are converted into the set's own bytes.
  auto wide_x = ints({1, 2, 3, 4, 5, 6}, "<i8");
  wide_x.shape = {6, 1};
  auto wide = dataset_from_arrays(wide_x.view(), y.view(), names,
                                  npz_inputs::pixels, owner);
  BOOST_REQUIRE_MESSAGE(wide, why(wide));
  BOOST_TEST(wide->borrowed.owner == nullptr);
  BOOST_TEST(wide->pixels.size() == 6u);
  // The messages begin with the prefix and the array's name.
  auto nan = f4_array({6, 1});
  float bad = std::nanf("");
  std::memcpy(nan.data.data() + 4 * 3, &bad, 4);
  auto refused = dataset_from_arrays(nan.view(), y.view(), names,
                                     npz_inputs::pixels, owner);
  BOOST_REQUIRE(!refused);
  BOOST_TEST(render(refused.error()).find("array 'x': value nan at flat "
                                          "index 3 is not finite")
             != std::string::npos);
}

BOOST_AUTO_TEST_CASE(npz_problems_name_the_file_and_the_array) {
  temp_dir tmp;
  auto ok_x = u8_array({4, 2, 2});
  auto ok_y = labels({0, 1, 2, 3});
  says(load_error(write_set(tmp, {{"x_train", ok_x}}, "a.npz")),
       {"a.npz", "no array 'y_train'", "found x_train"});
  says(load_error(write_set(tmp, {{"x_train", ok_x}, {"y_train", ok_y}},
                            "b.npz"),
                  split::test),
       {"b.npz", "no array 'x_test'"});
  says(load_error(write_set(tmp, {{"x_train", ok_x},
                                  {"y_train", labels({0, 1, 2})}},
                            "c.npz")),
       {"c.npz", "'y_train'", "3 labels for 4 examples"});
  says(load_error(write_set(tmp, {{"x_train", ok_x},
                                  {"y_train", labels({0, 1, -1, 3})}},
                            "d.npz")),
       {"d.npz", "'y_train'", "label -1 at index 2"});
  says(load_error(write_set(tmp, {{"x_train", ok_x},
                                  {"y_train", labels({0, 1, 300, 3})}},
                            "e.npz")),
       {"'y_train'", "label 300"});
  says(load_error(write_set(tmp, {{"x_train", u8_array({4})},
                                  {"y_train", ok_y}},
                            "f.npz")),
       {"'x_train'", "shape (4,)", "(N, D)"});
  npy_array ints;
  ints.kind = npy_kind::signed_int;
  ints.item_size = 2;
  ints.descr = "<i2";
  ints.shape = {4, 2};
  ints.data.assign(16, 1);
  says(load_error(write_set(tmp, {{"x_train", ints}, {"y_train", ok_y}},
                            "g.npz")),
       {"'x_train'", "dtype '<i2'", "value 257 at flat index 0",
        "not a pixel", "float32"});
  says(load_error(write_set(tmp, {{"x_train", ok_x},
                                  {"y_train", f4_array({4})}},
                            "h.npz")),
       {"'y_train'", "not an integer type"});
  auto nan = f4_array({4, 2});
  float bad_value = std::nanf("");
  std::memcpy(nan.data.data() + 12, &bad_value, 4);
  says(load_error(write_set(tmp, {{"x_train", nan}, {"y_train", ok_y}},
                            "i.npz")),
       {"'x_train'", "flat index 3", "not finite"});
  // The archive itself.
  auto good = write_npz({{"x_train", ok_x}, {"y_train", ok_y}});
  auto cut = good;
  cut.resize(cut.size() / 2);
  auto cut_path = tmp.file("cut.npz");
  write_bytes(cut_path, cut);
  says(load_error(cut_path), {"cut.npz", "not a .npz file"});
  auto flipped = good;
  flipped[80] ^= 1; // inside the first member's data
  auto flipped_path = tmp.file("flipped.npz");
  write_bytes(flipped_path, flipped);
  says(load_error(flipped_path), {"flipped.npz", "CRC-32 mismatch"});
  says(load_error(tmp.file("missing.npz")), {"missing.npz", "cannot be read"});
}

// numpy's default dtype is int64: for a dense or conv model any integer
// dtype holds pixels as uint8 does (0..255, the same bytes), a value
// outside is refused by name; only an embedding_bag model reads them as
// indices (they trained silently to chance before).
BOOST_AUTO_TEST_CASE(integer_inputs_are_pixels_unless_the_model_takes_indices) {
  temp_dir tmp;
  auto y = labels({0, 1});
  std::vector<int64_t> values{0, 7, 255, 128, 1, 254};
  auto as_bytes = u8_array({2, 3});
  for (size_t i = 0; i < values.size(); ++i)
    as_bytes.data[i] = static_cast<uint8_t>(values[i]);
  for (auto descr : {"<i1", "<i2", "<i4", "<i8", "<u2", "<u4", "<u8"}) {
    BOOST_TEST_CONTEXT(descr) {
      auto x = ints(values, descr);
      if (descr[1] == 'u')
        x.kind = npy_kind::unsigned_int;
      if (std::string{descr} == "<i1") // 255 and 254 do not fit int8
        x = ints({0, 7, 127, 100, 1, 126}, descr);
      x.shape = {2, 3};
      auto path = write_set(tmp, {{"x_train", x}, {"y_train", y}},
                            std::string{"p"} + (descr + 1) + ".npz");
      auto pixels = load_npz(path, split::train, npz_inputs::pixels);
      BOOST_REQUIRE_MESSAGE(pixels, why(pixels));
      BOOST_TEST(!pixels->float_inputs());
      if (std::string{descr} != "<i1")
        BOOST_TEST(pixels->pixels == as_bytes.data);
      auto indices = load_npz(path, split::train, npz_inputs::indices);
      BOOST_REQUIRE_MESSAGE(indices, why(indices));
      BOOST_TEST(indices->float_inputs());
      BOOST_TEST(indices->values[1] == 7.0f);
    }
  }
  auto big = ints({0, 1, 2, 300, 4, 5}, "<i8");
  big.shape = {2, 3};
  says(load_error(write_set(tmp, {{"x_train", big}, {"y_train", y}},
                            "big.npz")),
       {"big.npz", "'x_train'", "dtype '<i8'", "value 300 at flat index 3",
        "not a pixel"});
  auto negative = ints({0, -1, 2, 3, 4, 5}, "<i8");
  negative.shape = {2, 3};
  says(load_error(write_set(tmp, {{"x_train", negative}, {"y_train", y}},
                            "neg.npz")),
       {"'x_train'", "value -1 at flat index 1", "not a pixel"});
  // -1 pads a bag of indices: fine for an embedding_bag model.
  auto padded = load_npz(tmp.file("neg.npz"), split::train,
                         npz_inputs::indices);
  BOOST_REQUIRE_MESSAGE(padded, why(padded));
  BOOST_TEST(padded->values[1] == -1.0f);
  // Bags with offsets belong to an embedding_bag model only.
  says(load_error(write_set(tmp, {{"x_train_indices", ints({3, 1})},
                                  {"x_train_offsets", ints({0, 1, 2})},
                                  {"y_train", y}},
                            "bags.npz")),
       {"bags.npz", "'x_train_indices'", "embedding_bag"});
}

BOOST_AUTO_TEST_CASE(archives_written_by_pythons_zipfile_read) {
  // The fuzz seeds were written by Python's zipfile (stored and deflated)
  // around .npy bytes in numpy's layout: another writer than write_npz.
  const std::string dir = SYNCFAC_SOURCE_DIR "/tests/fuzz/corpus/fuzz_npy/";
  for (auto name : {"seed-stored.npz", "seed-deflated.npz"}) {
    BOOST_TEST_CONTEXT(name) {
      auto set = load_npz(dir + name, split::train, npz_inputs::pixels);
      BOOST_REQUIRE_MESSAGE(set, why(set));
      BOOST_TEST(set->count == 2);
      BOOST_TEST(set->height == 3);
      BOOST_TEST(set->width == 4);
      BOOST_TEST(set->num_classes == 10); // labels 1 and 9
      BOOST_TEST(set->pixels[23] == 23);
    }
  }
}

BOOST_AUTO_TEST_CASE(bags_with_offsets_read_as_padded_rows) {
  temp_dir tmp;
  // Train: bags {3, 1}, {}, {7, 7, 2}; test: {5}. Every bag is padded to
  // the file's longest (3) with -1, test's too.
  auto path = write_set(tmp, {{"x_train_indices", ints({3, 1, 7, 7, 2})},
                              {"x_train_offsets", ints({0, 2, 2, 5}, "<i8")},
                              {"y_train", labels({0, 1, 0})},
                              {"x_test_indices", ints({5})},
                              {"x_test_offsets", ints({0, 1})},
                              {"y_test", labels({1})}});
  auto train = load_npz(path, split::train, npz_inputs::indices);
  BOOST_REQUIRE_MESSAGE(train, why(train));
  BOOST_TEST(train->count == 3);
  BOOST_TEST(train->channels == 3);
  BOOST_TEST(train->height == 1);
  BOOST_TEST(train->num_classes == 2);
  std::vector<float> want{3, 1, -1, -1, -1, -1, 7, 7, 2};
  BOOST_TEST(train->values == want, boost::test_tools::per_element());
  auto test = load_npz(path, split::test, npz_inputs::indices);
  BOOST_REQUIRE_MESSAGE(test, why(test));
  BOOST_TEST(test->channels == 3);
  std::vector<float> want_test{5, -1, -1};
  BOOST_TEST(test->values == want_test, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bags_with_offsets_malformations_are_named) {
  temp_dir tmp;
  auto idx = ints({3, 1, 7});
  auto y = labels({0, 1});
  auto set = [&](const std::string& name, npy_array indices, npy_array offsets,
                 npy_array labels_array) {
    return load_error(write_set(tmp, {{"x_train_indices", std::move(indices)},
                                      {"x_train_offsets", std::move(offsets)},
                                      {"y_train", std::move(labels_array)}},
                                name), split::train, npz_inputs::indices);
  };
  says(set("a.npz", idx, ints({0, 2, 1}), y),
       {"a.npz", "'x_train_offsets'", "offsets decrease at index 2",
        "2 then 1"});
  says(set("b.npz", idx, ints({1, 2, 3}), y),
       {"b.npz", "'x_train_offsets'", "the first offset is 1, not 0"});
  says(set("c.npz", idx, ints({0, 2, 4}), y),
       {"c.npz", "'x_train_offsets'", "the last offset is 4",
        "'x_train_indices' has 3 indices"});
  says(set("d.npz", idx, ints({0, 1, 2, 3}), y),
       {"d.npz", "'x_train_offsets'", "4 entries (3 bags) for 2 labels"});
  says(set("e.npz", ints({3, -1, 7}), ints({0, 2, 3}), y),
       {"e.npz", "'x_train_indices'", "index -1 at position 1",
        "outside [0, 2^24)"});
  says(set("f.npz", ints({3, 1, 7}, "<i8"), ints({0, 2, 3}), y),
       {"f.npz", "'x_train_indices'", "dtype '<i8' must be int32"});
  says(set("g.npz", idx, ints({0, 2, 3}, "<i2"), y),
       {"g.npz", "'x_train_offsets'", "must be int32 or int64"});
  says(set("h.npz", ints({}), ints({0, 0, 0}), y),
       {"h.npz", "'x_train_offsets'", "every bag is empty"});
  says(load_error(write_set(tmp, {{"x_train_indices", idx},
                                  {"y_train", y}},
                            "i.npz"), split::train, npz_inputs::indices),
       {"i.npz", "'x_train_indices' without 'x_train_offsets'"});
  says(load_error(write_set(tmp, {{"x_train_indices", idx},
                                  {"x_train_offsets", ints({0, 2, 3})},
                                  {"x_train", u8_array({2, 3})},
                                  {"y_train", y}},
                            "j.npz"), split::train, npz_inputs::indices),
       {"j.npz", "both 'x_train' and 'x_train_indices'"});
  // The test split's bags are checked when the train split is read (both
  // set the width every bag is padded to).
  says(load_error(write_set(tmp, {{"x_train_indices", idx},
                                  {"x_train_offsets", ints({0, 2, 3})},
                                  {"y_train", y},
                                  {"x_test_indices", idx},
                                  {"x_test_offsets", ints({0, 3, 2})},
                                  {"y_test", y}},
                            "k.npz"), split::train, npz_inputs::indices),
       {"k.npz", "'x_test_offsets'", "offsets decrease"});
}
