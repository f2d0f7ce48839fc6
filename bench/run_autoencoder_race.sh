#!/usr/bin/env bash
# The deep autoencoder race, evenly run (docs/benchmarks.md, "The
# autoencoder race, evenly run"): momentum SGD with Nesterov's momentum and
# a schedule against K-FAC, each tuned over a grid of the same size by the
# same rule on a validation split, then reported on the test split with
# three other seeds at the same evaluation granularity, K-FAC in fp32 and
# (where the CPU has it) bf16. bench/autoencoder_race.py says how.
#
#   bench/run_autoencoder_race.sh [autoencoder_race.py flags...]
#   env: SYNCFAC_BIN (build/bin/autoencoder_mnist)
#
# About 20 minutes on 2 quiet cores with the defaults; for a quick check
# of the script: --kfac_steps 8 --eval_every 4 --eval_examples 256
# --extra "--fake_data --hidden 64,8".
. "$(dirname "$0")/bench_lib.sh"
bin=${SYNCFAC_BIN:-build/bin/autoencoder_mnist}
need_built "$bin"
exec python3 bench/autoencoder_race.py --bin "$bin" "$@"
