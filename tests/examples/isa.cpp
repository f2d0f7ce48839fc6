#define BOOST_TEST_MODULE examples_isa
#include <boost/test/unit_test.hpp>

// --isa on a real program (convnet_mnist_single): the level in the
// summary's "isa", every level the CPU has computing the baseline's first
// three losses within 1e-5 (relative) and training (its loss falls), and
// the refusals by name: an unknown level, one the CPU lacks
// (SYNCFAC_MAX_ISA hides AVX-512), a bad SYNCFAC_MAX_ISA.

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/isa.hpp"
#include "tests/examples/process.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

const std::string short_run
  = " --fake_data --runtime plain --steps 20 --batch_size 32 --threads 2"
    " --warmup 2 --no_final_eval --no_progress --log_every 1 --seed 3";

} // namespace

BOOST_AUTO_TEST_CASE(every_level_trains_alike_and_says_so) {
  // The levels sum in other orders, so their parameters differ by rounding
  // from the first update on. The first three losses (the forward pass
  // from the initial parameters, then after one and two updates) stay
  // within 1e-7 relative (measured, seeds 1-8). Later ones are not
  // compared: once a max-pool window's two best values lie within that
  // rounding, the levels pick different ones, and from then on the losses
  // part by up to 0.2 after 20 steps (seed 2 with the direct conv,
  // docs/kernels.md, "Winograd").
  temp_dir tmp;
  std::vector<double> base;
  for (const auto& level : cpu::supported_isas()) {
    auto summary = tmp.file("summary_" + level + ".json");
    auto metrics = tmp.file("metrics_" + level + ".jsonl");
    auto res = run_ok(single + short_run + " --isa " + level
                      + " --summary " + summary + " --metrics " + metrics);
    BOOST_TEST(json_string(read_file(summary), "isa") == level);
    auto loss = json_numbers(read_file(metrics), "loss");
    BOOST_REQUIRE_EQUAL(loss.size(), 20u);
    BOOST_TEST(loss.back() < 0.9 * loss.front(),
               level << " loss fell from " << loss.front() << " to "
                     << loss.back());
    if (base.empty()) {
      base = loss;
      continue;
    }
    for (size_t i = 0; i < 3; ++i)
      BOOST_TEST(std::abs(loss[i] - base[i]) <= 1e-5 * base[i],
                 level << " step " << i + 1 << " loss " << loss[i]
                       << " vs baseline " << base[i]);
  }
  // Without --isa: the best level.
  auto summary = tmp.file("summary_auto.json");
  auto res = run_program(single + short_run + " --summary " + summary);
  require_success(res);
  BOOST_TEST(json_string(read_file(summary), "isa")
             == cpu::supported_isas().back());
}

BOOST_AUTO_TEST_CASE(levels_are_refused_by_name) {
  check_refused(single + short_run + " --isa avx1024", {"--isa 'avx1024'"});
  check_refused("SYNCFAC_MAX_ISA=sse9 " + single + short_run,
                {"SYNCFAC_MAX_ISA='sse9'"});
  auto built = cpu::built_isas();
  if (built.back() == "avx512") {
    check_refused("SYNCFAC_MAX_ISA=avx2"
                  " " + single + short_run + " --isa avx512",
                  {"--isa 'avx512': this CPU or its OS lacks"});
  }
}
