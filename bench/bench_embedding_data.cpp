// The data of the large-embedding benchmark (bench/run_big_embedding.sh,
// docs/benchmarks.md "A large embedding table"): recommendation-style
// examples of --ids feature ids each, drawn from a Zipf distribution
// (exponent --zipf) over --vocabulary ids and hashed (a multiplicative
// permutation of the ranks, so popular ids spread over the shards' row
// ranges), and a label a hidden linear model gives them: 1 when the sum of
// the ids' hidden weights (N(0, 1) each, from a hash of the id) is
// positive. Writes
//   - FILE.npz: x_train/x_test int32 [N, ids], y_train/y_test uint8 [N];
//   - the model (--model_out): embedding_bag (sum) of --width over the
//     vocabulary -> dense 2 -> softmax cross-entropy.
//
//   build/bin/bench_embedding_data --out big.npz --model_out big.json

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/data/npz.hpp"
#include "runtime/model_builder.hpp"

using namespace syncfac;

namespace {

struct options {
  int64_t vocabulary = 10'000'000;
  int64_t ids = 16;
  int64_t width = 16;
  int64_t train = 400'000;
  int64_t test = 20'000;
  double zipf = 1.05;
  uint64_t seed = 1;
  std::string out = "big_embedding.npz";
  std::string model_out = "big_embedding.json";
};

uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// The hidden weight of `id`: N(0, 1) by Box-Muller from its hash.
double hidden_weight(int64_t id, uint64_t seed) {
  auto h = mix(static_cast<uint64_t>(id) ^ mix(seed));
  double u1 = (static_cast<double>(h >> 11) + 0.5) / 9007199254740992.0;
  double u2 = static_cast<double>(mix(h) >> 11) / 9007199254740992.0;
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
}

int fail(const std::string& what) {
  std::cerr << "bench_embedding_data: " << what << "\n";
  return EXIT_FAILURE;
}

/// The flags that take a whole number, and the field each sets.
const std::map<std::string, int64_t options::*> count_flags{
  {"--vocabulary", &options::vocabulary},
  {"--ids", &options::ids},
  {"--width", &options::width},
  {"--train", &options::train},
  {"--test", &options::test},
};

bool parse(int argc, char** argv, options& o, std::string& error) {
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    if (i + 1 >= argc) {
      error = flag + " needs a value";
      return false;
    }
    std::string v = argv[i + 1];
    try {
      if (auto count = count_flags.find(flag); count != count_flags.end())
        o.*(count->second) = std::stoll(v);
      else if (flag == "--zipf")
        o.zipf = std::stod(v);
      else if (flag == "--seed")
        o.seed = std::stoull(v);
      else if (flag == "--out")
        o.out = v;
      else if (flag == "--model_out")
        o.model_out = v;
      else {
        error = "unknown flag " + flag
                + " (expected --vocabulary, --ids, --width, --train, --test,"
                  " --zipf, --seed, --out, --model_out)";
        return false;
      }
    } catch (const std::exception&) {
      error = flag + " " + v + ": not a number";
      return false;
    }
  }
  if (o.vocabulary < 2 || o.vocabulary > (int64_t{1} << 24))
    error = "--vocabulary must be 2 to 2^24 (ids travel as exact floats)";
  else if (o.ids < 1 || o.width < 1 || o.train < 1 || o.test < 1)
    error = "--ids, --width, --train and --test must be positive";
  else if (!(o.zipf > 0))
    error = "--zipf must be positive";
  return error.empty();
}

} // namespace

int main(int argc, char** argv) {
  options o;
  std::string error;
  if (!parse(argc, argv, o, error))
    return fail(error);
  // The Zipf distribution over ranks 1..V by its cumulative weights.
  std::vector<double> cdf(static_cast<size_t>(o.vocabulary));
  double total = 0;
  for (int64_t r = 0; r < o.vocabulary; ++r) {
    total += std::pow(static_cast<double>(r + 1), -o.zipf);
    cdf[static_cast<size_t>(r)] = total;
  }
  // Rank -> id: multiplication by an odd multiplier that 5 does not
  // divide permutes any range [0, 10^k), and near enough any other.
  const auto multiplier = static_cast<uint64_t>(2654435761ULL);
  std::mt19937_64 rng{o.seed};
  std::uniform_real_distribution<double> uniform(0.0, total);
  auto draw = [&] {
    auto rank = static_cast<int64_t>(
      std::lower_bound(cdf.begin(), cdf.end(), uniform(rng)) - cdf.begin());
    rank = std::min(rank, o.vocabulary - 1);
    return static_cast<int32_t>((static_cast<uint64_t>(rank) * multiplier)
                                % static_cast<uint64_t>(o.vocabulary));
  };
  auto make = [&](int64_t n, std::vector<int32_t>& x,
                  std::vector<uint8_t>& y) {
    x.resize(static_cast<size_t>(n * o.ids));
    y.resize(static_cast<size_t>(n));
    for (int64_t e = 0; e < n; ++e) {
      double score = 0;
      for (int64_t j = 0; j < o.ids; ++j) {
        auto id = draw();
        x[static_cast<size_t>(e * o.ids + j)] = id;
        score += hidden_weight(id, o.seed);
      }
      y[static_cast<size_t>(e)] = score > 0 ? 1 : 0;
    }
  };
  std::vector<int32_t> x_train, x_test;
  std::vector<uint8_t> y_train, y_test;
  make(o.train, x_train, y_train);
  make(o.test, x_test, y_test);
  std::map<std::string, npy_array> arrays;
  arrays["x_train"] = npy_of(x_train, {o.train, o.ids});
  arrays["y_train"] = npy_of(y_train, {o.train});
  arrays["x_test"] = npy_of(x_test, {o.test, o.ids});
  arrays["y_test"] = npy_of(y_test, {o.test});
  auto bytes = write_npz(arrays);
  std::ofstream out{o.out, std::ios::binary};
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out)
    return fail("cannot write " + o.out);
  auto model = model_builder{"big_embedding", {o.ids}}
                 .embedding_bag(o.vocabulary, o.width, bag_combiner::sum,
                                "items")
                 .dense(2)
                 .build();
  if (!model)
    return fail(render(model.error()));
  std::ofstream{o.model_out} << model->to_json();
  std::cout << "bench_embedding_data: " << o.train << " + " << o.test
            << " examples of " << o.ids << " ids over " << o.vocabulary
            << " (Zipf " << o.zipf << ") -> " << o.out << ", "
            << o.model_out << "\n";
  return 0;
}
