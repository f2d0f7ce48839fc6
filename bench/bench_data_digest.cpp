// The cost of the nodes' data digest (runtime/data/content_digest.hpp)
// against the load it is part of: Fashion-MNIST's train and test splits
// loaded with load_mnist, each load timed with and apart from its digest
// (digest_of over every example and label), every round printed, then the
// median share. docs/distributed.md keeps it under 5 %.
//
//   build/bin/bench_data_digest [data_dir] [rounds=7]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/data/content_digest.hpp"
#include "runtime/data/dataset.hpp"

using namespace syncfac;
using clock_type = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : default_mnist_dir;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  std::vector<double> shares;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = clock_type::now();
    auto train = load_mnist(dir, split::train);
    auto test = load_mnist(dir, split::test);
    auto t1 = clock_type::now();
    if (!train || !test) {
      std::fprintf(stderr, "bench_data_digest: cannot load '%s'\n",
                   dir.c_str());
      return 1;
    }
    // The loaders digest as they load; digesting again times that part.
    auto d = digest_of(*train) ^ digest_of(*test);
    auto t2 = clock_type::now();
    double load_s = std::chrono::duration<double>(t1 - t0).count();
    double digest_s = std::chrono::duration<double>(t2 - t1).count();
    double bytes = static_cast<double>(train->pixels.size()
                                       + test->pixels.size());
    shares.push_back(digest_s / load_s);
    std::printf("round %d: load %.1f ms (digest included), digest %.2f ms "
                "(%.2f GB/s), %.2f %% of the load [%016llx]\n",
                r, load_s * 1e3, digest_s * 1e3, bytes / digest_s / 1e9,
                100 * digest_s / load_s,
                static_cast<unsigned long long>(d));
  }
  std::sort(shares.begin(), shares.end());
  std::printf("median: the digest is %.2f %% of the load time\n",
              100 * shares[shares.size() / 2]);
  return 0;
}
