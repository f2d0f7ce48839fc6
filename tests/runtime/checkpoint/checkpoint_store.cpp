#define BOOST_TEST_MODULE checkpoint_store
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixtures.hpp"

#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/base/error.hpp"
#include "runtime/comma_list.hpp"

using namespace syncfac;
using namespace syncfac::test;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool any_says(const std::vector<std::string>& lines,
              std::initializer_list<std::string> parts) {
  for (const auto& line : lines) {
    bool all = true;
    for (const auto& p : parts)
      all = all && line.find(p) != std::string::npos;
    if (all)
      return true;
  }
  return false;
}

void save_steps(const checkpoint_store& store,
                std::initializer_list<int64_t> steps) {
  for (auto step : steps) {
    auto r = store.save(step, sample_tensors(static_cast<float>(step)),
                        {{"model", "convnet"}});
    BOOST_REQUIRE_MESSAGE(r, "saving step " << step << ": "
                                            << why(r));
  }
}

// Flips one byte of the data section (the last byte of the file).
void corrupt_data(const std::string& path) {
  auto bytes = slurp(path);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x01);
  spit(path, bytes);
}

} // namespace

BOOST_AUTO_TEST_CASE(save_and_load_round_trip) {
  temp_dir dir;
  checkpoint_store store{dir.file("ckpts/"), 3};
  auto xs = sample_tensors();
  tensor_metadata meta{{"topology", "worker:2,ps:1"},
                       {"model", "convnet"},
                       {"data_order", "epoch=3 seed=7 position=128"}};
  auto saved = store.save(120, xs, meta);
  BOOST_REQUIRE_MESSAGE(saved, why(saved));
  BOOST_CHECK_EQUAL(saved->path, dir.file("ckpts/ckpt-120.safetensors"));
  BOOST_CHECK_EQUAL(saved->bytes, fs::file_size(saved->path));
  BOOST_CHECK(listing(dir.file("ckpts"))
              == std::vector<std::string>{"ckpt-120.safetensors"});
  auto loaded = store.load_latest();
  BOOST_REQUIRE_MESSAGE(loaded, why(loaded));
  BOOST_CHECK_MESSAGE(loaded->warnings.empty(), comma_joined(loaded->warnings));
  BOOST_REQUIRE(loaded->latest);
  const auto& ckpt = *loaded->latest;
  BOOST_CHECK_EQUAL(ckpt.global_step, 120);
  BOOST_CHECK_EQUAL(ckpt.path, saved->path);
  BOOST_REQUIRE_EQUAL(ckpt.tensors.size(), xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    BOOST_CHECK_EQUAL(ckpt.tensors[i].name, xs[i].name);
    BOOST_CHECK(ckpt.tensors[i].value == xs[i].value);
  }
  for (const auto& [k, v] : meta)
    BOOST_CHECK_EQUAL(ckpt.metadata.at(k), v);
  BOOST_CHECK_EQUAL(ckpt.metadata.at("global_step"), "120");
  BOOST_CHECK_EQUAL(ckpt.metadata.at("checksum"),
                    format_crc32c(data_crc32c(xs)));
  // A plain safetensors reader sees the same file.
  auto plain = read_safetensors_file(saved->path);
  BOOST_REQUIRE(plain);
  BOOST_CHECK_EQUAL(plain->metadata.at("checksum"),
                    format_crc32c(plain->data_crc32c));
  // Saving the same step again replaces it.
  BOOST_REQUIRE(store.save(120, sample_tensors(1.0f), meta));
  auto again = store.load(120);
  BOOST_REQUIRE(again);
  BOOST_CHECK(again->tensors[0].value == sample_tensors(1.0f)[0].value);
}

BOOST_AUTO_TEST_CASE(checkpoints_are_the_owners_alone) {
  // Parameters: a directory the store creates is 0700, each checkpoint
  // 0600, whatever the umask (0 here, so that a wider mode would show).
  temp_dir dir;
  auto old_mask = ::umask(0);
  checkpoint_store store{dir.file("made/ckpts"), 3};
  auto saved = store.save(7, sample_tensors(), {});
  auto exported = dir.file("export.safetensors");
  auto export_err = write_safetensors_file(exported, sample_tensors(), {});
  ::umask(old_mask);
  BOOST_REQUIRE_MESSAGE(saved, why(saved));
  BOOST_REQUIRE(!export_err);
  auto mode = [](const std::string& path) {
    struct stat st;
    BOOST_REQUIRE(::stat(path.c_str(), &st) == 0);
    return st.st_mode & 07777;
  };
  BOOST_CHECK_EQUAL(mode(saved->path), 0600u);
  BOOST_CHECK_EQUAL(mode(dir.file("made/ckpts")), 0700u);
  BOOST_CHECK_EQUAL(mode(exported), 0600u);
  // An existing directory (a volume the nodes share) keeps its mode.
  fs::create_directory(dir.file("shared"));
  ::chmod(dir.file("shared").c_str(), 0750);
  checkpoint_store shared{dir.file("shared"), 3};
  BOOST_REQUIRE(shared.save(8, sample_tensors(), {}));
  BOOST_CHECK_EQUAL(mode(dir.file("shared")), 0750u);
  BOOST_CHECK_EQUAL(mode(dir.file("shared/ckpt-8.safetensors")), 0600u);
}

BOOST_AUTO_TEST_CASE(missing_directory_is_empty) {
  temp_dir dir;
  checkpoint_store store{dir.file("not/yet")};
  auto steps = store.list_steps();
  BOOST_REQUIRE(steps);
  BOOST_CHECK(steps->empty());
  auto loaded = store.load_latest();
  BOOST_REQUIRE(loaded);
  BOOST_CHECK(!loaded->latest);
  BOOST_CHECK(any_says(loaded->warnings, {"does not exist"}));
}

BOOST_AUTO_TEST_CASE(keep_last_k) {
  temp_dir dir;
  checkpoint_store store{dir.path(), 3};
  save_steps(store, {10, 20, 30});
  auto r = store.save(40, sample_tensors(), {});
  BOOST_REQUIRE(r);
  BOOST_CHECK(r->removed == std::vector<std::string>{store.path_of(10)});
  save_steps(store, {50, 60});
  auto steps = store.list_steps();
  BOOST_REQUIRE(steps);
  BOOST_CHECK(*steps == (std::vector<int64_t>{40, 50, 60}));
  // Unrelated files stay.
  spit(dir.file("notes.txt"), "mine");
  spit(dir.file("ckpt-007.safetensors"), "not canonical, not ours");
  save_steps(store, {70});
  BOOST_CHECK(listing(dir.path())
              == (std::vector<std::string>{"ckpt-007.safetensors",
                                           "ckpt-50.safetensors",
                                           "ckpt-60.safetensors",
                                           "ckpt-70.safetensors",
                                           "notes.txt"}));
  // keep_last 1.
  checkpoint_store one{dir.file("one"), 1};
  save_steps(one, {1, 2, 3});
  BOOST_CHECK(listing(dir.file("one"))
              == std::vector<std::string>{"ckpt-3.safetensors"});
  // A save below newer steps makes it the latest: the newer ones (a
  // rolled-back timeline) go.
  auto back = store.save(55, sample_tensors(), {});
  BOOST_REQUIRE(back);
  BOOST_CHECK(std::count(back->removed.begin(), back->removed.end(),
                         store.path_of(70)) == 1);
  steps = store.list_steps();
  BOOST_REQUIRE(steps);
  BOOST_CHECK(*steps == (std::vector<int64_t>{50, 55}));
  auto latest = store.load_latest();
  BOOST_REQUIRE(latest && latest->latest);
  BOOST_CHECK_EQUAL(latest->latest->global_step, 55);
}

BOOST_AUTO_TEST_CASE(load_latest_skips_corrupt_newest) {
  temp_dir dir;
  checkpoint_store store{dir.path(), 5};
  save_steps(store, {10, 20, 30});
  // A flipped data bit: the checksum catches it.
  corrupt_data(store.path_of(30));
  auto loaded = store.load_latest();
  BOOST_REQUIRE_MESSAGE(loaded, why(loaded));
  BOOST_REQUIRE(loaded->latest);
  BOOST_CHECK_EQUAL(loaded->latest->global_step, 20);
  BOOST_CHECK(loaded->latest->tensors[0].value
              == sample_tensors(20.0f)[0].value);
  BOOST_TEST_MESSAGE(comma_joined(loaded->warnings));
  BOOST_CHECK(any_says(loaded->warnings,
                       {store.path_of(30), "checksum mismatch"}));
  // A truncated newest file (a crash mid-write without the temp-file
  // dance), then garbage, then a file whose name and step disagree.
  auto bytes = slurp(store.path_of(20));
  spit(store.path_of(40), bytes.substr(0, bytes.size() / 2));
  spit(store.path_of(50), "garbage");
  spit(store.path_of(60), bytes);
  loaded = store.load_latest();
  BOOST_REQUIRE_MESSAGE(loaded, why(loaded));
  BOOST_REQUIRE(loaded->latest);
  BOOST_CHECK_EQUAL(loaded->latest->global_step, 20);
  BOOST_TEST_MESSAGE(comma_joined(loaded->warnings));
  BOOST_CHECK(any_says(loaded->warnings,
                       {store.path_of(60), "differs from the step in its "
                                           "name"}));
  BOOST_CHECK(any_says(loaded->warnings, {store.path_of(50), "truncated"}));
  BOOST_CHECK(any_says(loaded->warnings, {store.path_of(40), "beyond"}));
  BOOST_CHECK(any_says(loaded->warnings, {store.path_of(30), "checksum"}));
  // Every checkpoint corrupt: an error listing each, not a silent start.
  corrupt_data(store.path_of(20));
  corrupt_data(store.path_of(10));
  auto none = store.load_latest();
  check_error(none, ec::bad_data,
              {"no checkpoint in " + dir.path(), store.path_of(10)});
  // load() of one step reports its own problem.
  auto one = store.load(10);
  check_error(one, ec::bad_data, {"checksum mismatch"});
}

BOOST_AUTO_TEST_CASE(foreign_safetensors_without_checksum_refused) {
  temp_dir dir;
  checkpoint_store store{dir.path()};
  BOOST_REQUIRE(!write_safetensors_file(store.path_of(5), sample_tensors(),
                                        {{"global_step", "5"}}));
  auto x = store.load(5);
  check_error(x, ec::bad_data, {"no checksum"});
}

BOOST_AUTO_TEST_CASE(stray_temporary_ignored_and_cleaned) {
  temp_dir dir;
  checkpoint_store store{dir.path(), 3};
  save_steps(store, {10});
  // A save that crashed before its rename leaves only its temporary file.
  auto full = slurp(store.path_of(10));
  auto stray = dir.file(".ckpt-20.safetensors.4242.tmp");
  spit(stray, full.substr(0, full.size() - 3));
  auto loaded = store.load_latest();
  BOOST_REQUIRE_MESSAGE(loaded, why(loaded));
  BOOST_REQUIRE(loaded->latest);
  BOOST_CHECK_EQUAL(loaded->latest->global_step, 10);
  BOOST_CHECK(any_says(loaded->warnings, {stray, "interrupted save"}));
  BOOST_CHECK(!fs::exists(stray));
  // save() cleans them too.
  spit(stray, "x");
  auto r = store.save(20, sample_tensors(), {});
  BOOST_REQUIRE(r);
  BOOST_CHECK(std::count(r->removed.begin(), r->removed.end(), stray) == 1);
  BOOST_CHECK(listing(dir.path())
              == (std::vector<std::string>{"ckpt-10.safetensors",
                                           "ckpt-20.safetensors"}));
}

BOOST_AUTO_TEST_CASE(full_disk_keeps_previous_checkpoints) {
  temp_dir dir;
  checkpoint_store store{dir.path(), 2};
  save_steps(store, {10, 20});
  auto before_10 = slurp(store.path_of(10));
  auto before_20 = slurp(store.path_of(20));
  auto report = dir.file("child-report.txt");
  // A forked child with a 64 KiB file-size limit (SIGXFSZ ignored: writes
  // fail with EFBIG) saves a 1 MiB checkpoint.
  pid_t pid = ::fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim;
    lim.rlim_cur = lim.rlim_max = 64 * 1024;
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0)
      ::_exit(3);
    parameter_set big{{"big", tensor{tensor_shape{256, 1024}}}};
    auto r = store.save(30, big, {});
    std::string text = r ? std::string{"saved"} : render(r.error());
    spit(report, text);
    ::_exit(r ? 1 : 0);
  }
  int status = 0;
  BOOST_REQUIRE(::waitpid(pid, &status, 0) == pid);
  BOOST_REQUIRE(WIFEXITED(status));
  auto text = slurp(report);
  BOOST_TEST_MESSAGE("child: " << text);
  BOOST_CHECK_EQUAL(WEXITSTATUS(status), 0);
  BOOST_CHECK(text.find("io_error") == 0);
  BOOST_CHECK(text.find("File too large") != std::string::npos);
  BOOST_CHECK(text.find(".ckpt-30.safetensors") != std::string::npos);
  BOOST_CHECK(text.find(store.path_of(30)) != std::string::npos);
  fs::remove(report);
  // No temporary left, nothing rotated, the previous files intact.
  BOOST_CHECK(listing(dir.path())
              == (std::vector<std::string>{"ckpt-10.safetensors",
                                           "ckpt-20.safetensors"}));
  BOOST_CHECK(slurp(store.path_of(10)) == before_10);
  BOOST_CHECK(slurp(store.path_of(20)) == before_20);
  auto loaded = store.load_latest();
  BOOST_REQUIRE(loaded && loaded->latest);
  BOOST_CHECK_EQUAL(loaded->latest->global_step, 20);
}

BOOST_AUTO_TEST_CASE(unreadable_directory) {
  temp_dir dir;
  // A path under a regular file: refused whoever runs the test.
  spit(dir.file("plain-file"), "x");
  checkpoint_store store{dir.file("plain-file/ckpts")};
  auto loaded = store.load_latest();
  check_error(loaded, ec::io_error,
              {dir.file("plain-file/ckpts"), "Not a directory"});
  BOOST_CHECK(!store.list_steps());
  auto saved = store.save(1, sample_tensors(), {});
  check_error(saved, ec::io_error, {dir.file("plain-file/ckpts")});
  // Permissions: only meaningful when not root.
  if (::geteuid() == 0) {
    BOOST_TEST_MESSAGE("running as root, where directory permissions do not "
                       "apply: the mode-000 case is skipped");
    return;
  }
  checkpoint_store locked{dir.file("locked")};
  save_steps(locked, {1});
  fs::permissions(dir.file("locked"), fs::perms::none);
  auto denied = locked.load_latest();
  fs::permissions(dir.file("locked"), fs::perms::owner_all);
  check_error(denied, ec::io_error, {"Permission denied"});
}

BOOST_AUTO_TEST_CASE(save_refusals) {
  temp_dir dir;
  checkpoint_store store{dir.path()};
  auto xs = sample_tensors();
  xs[1].value[2] = std::numeric_limits<float>::quiet_NaN();
  auto nan = store.save(1, xs, {});
  check_error(nan, ec::non_finite, {"conv1/biases"});
  auto sum = store.save(1, sample_tensors(), {{"checksum", "mine"}});
  check_error(sum, ec::invalid_argument, {});
  auto step = store.save(1, sample_tensors(), {{"global_step", "2"}});
  check_error(step, ec::invalid_argument, {});
  BOOST_CHECK(store.save(1, sample_tensors(), {{"global_step", "1"}}));
  BOOST_CHECK(!store.save(-1, sample_tensors(), {}));
  parameter_set dup{{"w", tensor{{1}}}, {"w", tensor{{1}}}};
  auto d = store.save(2, dup, {});
  check_error(d, ec::invalid_argument, {"appears twice"});
  BOOST_CHECK(listing(dir.path())
              == std::vector<std::string>{"ckpt-1.safetensors"});
}

BOOST_AUTO_TEST_CASE(validate_compatible_names_first_difference) {
  temp_dir dir;
  checkpoint_store store{dir.path()};
  save_steps(store, {3});
  auto ckpt = store.load(3);
  BOOST_REQUIRE(ckpt);
  auto model = sample_tensors();
  BOOST_CHECK(!validate_compatible(model, *ckpt));
  // A different shape.
  auto wider = model;
  wider[1].value = tensor{{4}};
  auto err = validate_compatible(wider, *ckpt);
  check_error(err, ec::shape_mismatch,
              {"'conv1/biases' has shape [3] in the checkpoint but [4] in "
               "the model",
               ckpt->path});
  // A variable the checkpoint lacks.
  std::vector<expected_variable> more{{"conv1/weights", {2, 3}},
                                      {"fc/weights", {10, 3}}};
  err = validate_compatible(more, *ckpt, true);
  check_error(err, ec::unknown_name, {"lacks variable 'fc/weights' [10, 3]"});
  // Variables the model lacks.
  std::vector<expected_variable> fewer{{"conv1/weights", {2, 3}}};
  err = validate_compatible(fewer, *ckpt);
  check_error(err, ec::unknown_name, {"holds variable 'conv1/biases'"});
  BOOST_CHECK(!validate_compatible(fewer, *ckpt, true));
}

BOOST_AUTO_TEST_CASE(autoencoder_sized_round_trip) {
  // About the deep autoencoder's 2.8 M parameters, in a few large tensors.
  temp_dir dir;
  checkpoint_store store{dir.path(), 2};
  parameter_set xs;
  for (int i = 0; i < 4; ++i) {
    tensor t{tensor_shape{784, 1000}};
    for (int64_t k = 0; k < t.size(); ++k)
      t[k] = static_cast<float>((k * 7 + i) % 1000) * 1e-3f - 0.5f;
    xs.push_back({"layer" + std::to_string(i) + "/weights", std::move(t)});
  }
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  auto saved = store.save(1000, xs, {{"model", "autoencoder"}});
  auto t1 = clock::now();
  BOOST_REQUIRE_MESSAGE(saved, why(saved));
  auto loaded = store.load_latest();
  auto t2 = clock::now();
  BOOST_REQUIRE_MESSAGE(loaded, why(loaded));
  BOOST_REQUIRE(loaded->latest);
  BOOST_REQUIRE_EQUAL(loaded->latest->tensors.size(), xs.size());
  for (size_t i = 0; i < xs.size(); ++i)
    BOOST_CHECK(loaded->latest->tensors[i].value == xs[i].value);
  auto ms = [](auto d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  BOOST_TEST_MESSAGE(saved->bytes << " bytes: save (with fsync) "
                                  << ms(t1 - t0) << " ms, load and verify "
                                  << ms(t2 - t1) << " ms");
}
