#!/usr/bin/env bash
# ResNet-20 on Fashion-MNIST, K-FAC against momentum SGD, evenly run
# (docs/benchmarks.md, "ResNet-20: K-FAC against momentum"; issue 35
# item 4): each tuned over a grid of eight by the same rule on a validation
# split, then reported on the test split with seeds 1-3, in one process or
# (--runtime cluster) a loopback cluster. bench/resnet_race.py says how.
#
#   bench/run_resnet_race.sh [resnet_race.py flags...]
#   env: SYNCFAC_BIN_DIR (build/bin)
#
# Hours on 2 quiet cores with the defaults (22 runs of 3 epochs); a check
# of the script in minutes: --epochs 0.02 --eval_every 4 --seeds 1
# --validation_examples 512 --warmup_steps 2.
. "$(dirname "$0")/bench_lib.sh"
bin_dir=${SYNCFAC_BIN_DIR:-build/bin}
need_built "$bin_dir/convnet_mnist_single" "$bin_dir/convnet_mnist_distributed" "$bin_dir/syncfac-launch"
exec python3 bench/resnet_race.py --bin_dir "$bin_dir" "$@"
