#!/usr/bin/env bash
# The CPU this runs on and the instruction-set levels the kernels and the
# tests can use on it (docs/kernels.md, "Which tests run at which level"),
# so that a test run says which machine it tested. Printed by .ci/run first,
# by scripts/install-deps.sh --check and at the end of scripts/test.sh.
set -euo pipefail
model=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//' || true)
flags=" $(grep -m1 '^flags' /proc/cpuinfo | sed 's/^[^:]*: *//' || true) "
has() { [[ "$flags" == *" $1 "* ]] && echo yes || echo no; }
echo "syncfac: CPU ${model:-unknown}, $(nproc) cores; avx2+fma $(has avx2)," \
     "avx512 $(has avx512f), avx512_bf16 $(has avx512_bf16)," \
     "amx $(has amx_tile)${SYNCFAC_MAX_ISA:+; capped by SYNCFAC_MAX_ISA=$SYNCFAC_MAX_ISA}"
