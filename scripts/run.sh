#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build,
# and train the seeds' ConvNet on Fashion-MNIST (Debian's
# dataset-fashion-mnist). Extra arguments go to the training program.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/bin/convnet_mnist_single "$@"
