#define BOOST_TEST_MODULE examples_isa
#include <boost/test/unit_test.hpp>

// --isa on a real program (convnet_mnist_single): the level in the
// summary's "isa", every level the CPU has training to the same loss as the
// baseline within 1e-3 (relative; 20 steps of FP32 at other summation
// orders drift ~1e-5), and the refusals by name: an unknown level, one the
// CPU lacks (SYNCFAC_MAX_ISA hides AVX-512), a bad SYNCFAC_MAX_ISA.

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
    " --warmup 2 --no_final_eval --no_progress --log_every 10 --seed 3";

} // namespace

BOOST_AUTO_TEST_CASE(every_level_trains_alike_and_says_so) {
  temp_dir tmp;
  double base_loss = NAN;
  for (const auto& level : cpu::supported_isas()) {
    auto summary = tmp.file("summary_" + level + ".json");
    auto res = run_ok(single + short_run + " --isa " + level
                      + " --summary " + summary);
    auto text = read_file(summary);
    BOOST_TEST(json_string(text, "isa") == level);
    auto loss = json_numbers(text, "last_loss");
    BOOST_REQUIRE_EQUAL(loss.size(), 1u);
    BOOST_TEST(std::isfinite(loss[0]));
    if (std::isnan(base_loss))
      base_loss = loss[0];
    else
      BOOST_TEST(std::abs(loss[0] - base_loss) <= 1e-3 * std::abs(base_loss),
                 level << " loss " << loss[0] << " vs baseline " << base_loss);
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
