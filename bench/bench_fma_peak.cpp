// The FP32 FMA peak per instruction-set level this CPU has, on 1 and 2
// threads (bench/fma_peak.hpp): the ceiling the conv kernels are measured
// against (docs/benchmarks-history.md, "Instruction-set levels beside
// PyTorch 2.x").
//
//   build/bin/bench_fma_peak [--threads 1,2] [--seconds 0.5]

#include <cstdio>

#include "bench/bench_util.hpp"
#include "bench/fma_peak.hpp"
#include "kernels/cpu/isa.hpp"

using namespace syncfac;

int main(int argc, char** argv) {
  auto opt = bench::parse_options(argc, argv);
  std::printf("FP32 FMA peak, %d (avx2) or %d (avx512) independent chains "
              "per thread, best of 3 tries of ~%.1fs\n",
              bench::avx2_chains, bench::avx512_chains, opt.seconds);
  for (const auto& level : cpu::supported_isas()) {
    if (bench::fma_width(level) == 0)
      continue;
    for (int threads : opt.threads) {
      auto gflops = bench::fma_peak_gflops(level, threads, opt.seconds);
      std::printf("fma peak %-7s threads=%d  %8.1f GFLOP/s  (%.1f per thread)\n",
                  level.c_str(), threads, gflops, gflops / threads);
    }
  }
  return 0;
}
