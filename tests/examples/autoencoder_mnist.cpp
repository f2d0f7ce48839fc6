#define BOOST_TEST_MODULE examples_autoencoder_mnist
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>

#include "kernels/cpu/bf16_gemm.hpp"
#include "tests/examples/process.hpp"

using namespace syncfac::test;
namespace fs = std::filesystem;

namespace {

const std::string program = SYNCFAC_BINARY_DIR "/bin/autoencoder_mnist";

/// The reconstruction errors the log reports, in order.
std::vector<double> reconstruction_errors(const std::string& output) {
  std::vector<double> result;
  std::regex line{"reconstruction_error: ([0-9.eE+-]+)"};
  for (std::sregex_iterator i{output.begin(), output.end(), line}, end;
       i != end; ++i)
    result.push_back(std::stod((*i)[1]));
  return result;
}

// Small widths keep the suite fast; the classic 784-1000-500-250-30 model
// is the default (and the benchmark's).
const std::string small = " --fake_data --fake_train_size 2048"
                          " --hidden 128,64,16 --threads 2 --no_progress"
                          " --eval_examples 512 --batch_size 64";

void check_training(const std::string& flags, int64_t steps,
                    double factor) {
  temp_dir tmp;
  auto metrics = tmp.file("metrics.jsonl");
  auto summary = tmp.file("summary.json");
  auto res = run_ok(program + small + flags + " --steps "
                    + std::to_string(steps) + " --log_every "
                    + std::to_string(steps / 4) + " --eval_every "
                    + std::to_string(steps / 2) + " --metrics " + metrics
                    + " --summary " + summary);
  check_loss_fell(metrics, 4, factor);
  // One evaluation halfway and one at the end, on the training subset.
  auto errors = reconstruction_errors(res.output);
  BOOST_REQUIRE_EQUAL(errors.size(), 2u);
  BOOST_TEST(errors[1] <= errors[0]);
  BOOST_TEST(said(res.output, "(512 examples)"));
  auto text = read_file(summary);
  check_counters(text, {{"steps", steps}, {"eval_examples", 512}});
  auto final_error = json_numbers(text, "reconstruction_error").at(0);
  BOOST_TEST(std::abs(final_error - errors[1]) <= 1e-4 * errors[1]);
  BOOST_TEST(final_error > 0);
}

} // namespace

// The fake images are class prototypes plus noise: the loss falls fast to
// that of the mean image (~530) and then slowly.
BOOST_AUTO_TEST_CASE(momentum_reduces_the_loss) {
  check_training(" --optimizer momentum", 120, 0.9);
}

BOOST_AUTO_TEST_CASE(kfac_reduces_the_loss) {
  check_training(" --optimizer kfac --invert_every 5", 80, 0.9);
}

/// The final reconstruction error of a short K-FAC run with `flags`.
double kfac_final_error(const std::string& flags) {
  temp_dir tmp;
  auto summary = tmp.file("summary.json");
  auto res = run_program(program + small + " --optimizer kfac --steps 12"
                         " --invert_every 4" + flags + " --summary "
                         + summary);
  case_output::keep("the run", res.output);
  require_success(res);
  return json_numbers(read_file(summary), "reconstruction_error").at(0);
}

// Statistics every third step (steps 0, 3, 6, ...): still converges, and
// the flag reaches the step (the same seed without it ends elsewhere).
BOOST_AUTO_TEST_CASE(kfac_with_statistics_every_third_step_reduces_the_loss) {
  check_training(" --optimizer kfac --invert_every 5 --stats_every 3", 80,
                 0.9);
  auto every = kfac_final_error("");
  auto third = kfac_final_error(" --stats_every 3");
  BOOST_TEST(std::abs(third - every) > 1e-6 * every);
}

// Momentum on the preconditioned step (regular, the default) or on the
// gradient before it (adam): both converge, and the flag reaches the step.
BOOST_AUTO_TEST_CASE(kfac_momentum_adam_reduces_the_loss_elsewhere) {
  check_training(" --optimizer kfac --invert_every 5 --kfac_momentum adam",
                 80, 0.9);
  auto regular = kfac_final_error("");
  auto adam = kfac_final_error(" --kfac_momentum adam");
  BOOST_TEST(std::abs(adam - regular) > 1e-6 * regular);
}

// The explicit inverses in float with their products in bfloat16 on AMX
// tiles or AVX512-BF16: converges, and the flag reaches the step (fp32 ends
// elsewhere). Without either the flag is refused by name before training.
BOOST_AUTO_TEST_CASE(kfac_bfloat16_products_reduce_the_loss_elsewhere) {
  if (!syncfac::cpu::bf16_products_backend()) {
    check_refused(program + " --fake_data --optimizer kfac --inverse explicit"
                            " --kfac_precision bf16",
                  {"--kfac_precision bf16", "AMX", "AVX512-BF16"});
    return;
  }
  check_training(" --optimizer kfac --invert_every 5 --inverse explicit"
                 " --kfac_precision bf16",
                 80, 0.9);
  // As on a CPU without AVX-512 (and so without AMX or AVX512-BF16), or
  // with the kernels held below it: refused by name.
  check_refused("SYNCFAC_MAX_ISA=avx2 " + program
                  + " --fake_data --optimizer kfac --inverse explicit"
                    " --kfac_precision bf16",
                {"--kfac_precision bf16", "they need the avx512 level",
                 "SYNCFAC_MAX_ISA=avx2 hides it"});
  check_refused(program + " --fake_data --optimizer kfac --inverse explicit"
                          " --kfac_precision bf16 --isa avx2",
                {"--kfac_precision bf16", "avx512 level", "--isa 'avx2'"});
  auto fp32 = kfac_final_error(" --inverse explicit");
  auto bf16 = kfac_final_error(" --inverse explicit --kfac_precision bf16");
  BOOST_TEST(std::abs(bf16 - fp32) > 1e-6 * fp32);
  // Within a few percent: the same K-FAC, at lower precision.
  BOOST_TEST(std::abs(bf16 - fp32) < 0.05 * fp32);
}

BOOST_FIXTURE_TEST_CASE(sync_runtime_trains_first_order, run_files) {
  auto res = run_ok(program + small + " --runtime sync --optimizer adam"
                    " --steps 40 --summary " + summary);
  auto text = read_file(summary);
  BOOST_TEST(json_numbers(text, "global_step").at(0) == 40);
  BOOST_TEST(json_numbers(text, "reconstruction_error").at(0) > 0);
}

BOOST_AUTO_TEST_CASE(bad_flags_are_clear_errors) {
  temp_dir tmp;
  struct bad_case {
    std::string flags;
    std::string mention;
  };
  for (const auto& c : std::vector<bad_case>{
         {" --fake_data --optimizer rmsprop", "rmsprop"},
         {" --fake_data --hidden 100,x,30", "100,x,30"},
         {" --fake_data --hidden 100,0", "100,0"},
         {" --fake_data --batch_size 0", "batch_size"},
         {" --fake_data --steps 0", "steps"},
         {" --fake_data --runtime magic", "magic"},
         {" --fake_data --fisher nope", "nope"},
         {" --fake_data --activation softmax", "softmax"},
         {" --fake_data --optimizer kfac --stats_every 0", "stats_every"},
         {" --fake_data --optimizer kfac --stats_every x", "stats_every"},
         {" --fake_data --optimizer kfac --runtime sync --stats_every 2",
          "stats_every 2"},
         {" --fake_data --optimizer kfac --kfac_momentum heavy", "heavy"},
         {" --fake_data --optimizer kfac --kfac_precision fp16", "fp16"},
         {" --fake_data --optimizer kfac --kfac_precision bf16",
          "--inverse explicit"},
         {" --fake_data --eval_split holdout", "holdout"},
         {" --fake_data --fake_train_size 600 --eval_split validation"
          " --eval_examples 600", "--eval_examples < 600"},
         {" --fake_data --eval_split validation --eval_examples 0",
          "--eval_split validation"},
         {" --no_such_flag=1", "no_such_flag"},
         {" --data_dir " + tmp.file("nope"), tmp.file("nope")}}) {
    BOOST_TEST_CONTEXT(c.flags) {
      check_refused(program + c.flags,
                    {c.mention, "autoencoder_mnist: "});
    }
  }
  auto help = run_program(program + " --help");
  BOOST_TEST(help.exit_code == 0);
  BOOST_TEST(said(help.output, "eval_examples"));
  BOOST_TEST(said(help.output, "stats_every"));
  BOOST_TEST(said(help.output, "kfac_momentum"));
  BOOST_TEST(said(help.output, "kfac_precision"));
  BOOST_TEST(said(help.output, "eval_split"));
}

// --eval_split: the same training run measured on the first training
// images, on held-out ones (which then do not train) and on the test
// split gives three different errors, each named in the summary.
BOOST_AUTO_TEST_CASE(eval_split_measures_the_images_it_names) {
  std::map<std::string, double> errors;
  for (std::string which : {"train", "validation", "test"}) {
    temp_dir tmp;
    auto summary = tmp.file("summary.json");
    auto res = run_ok(program + small + " --optimizer momentum --steps 8"
                      " --eval_split " + which + " --summary " + summary);
    auto text = read_file(summary);
    BOOST_TEST(json_string(text, "eval_split") == which, text);
    check_counters(text, {{"eval_examples", 512}});
    BOOST_TEST(said(res.output, which + " reconstruction error"), res.output);
    errors[which] = json_numbers(text, "reconstruction_error").at(0);
  }
  BOOST_TEST(errors["train"] != errors["validation"]);
  BOOST_TEST(errors["train"] != errors["test"]);
  BOOST_TEST(errors["validation"] != errors["test"]);
}
