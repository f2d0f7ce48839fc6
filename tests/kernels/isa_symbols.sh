#!/usr/bin/env bash
# The AVX-512 kernel objects (and the bfloat16 ones) define nothing that other objects could define
# under the same name (kernels/cpu/isa_kernels.hpp): every symbol they
# export or define weakly (inline functions, template instances) names the
# level's namespace or its renamed Eigen. One that does not could be the
# copy the linker keeps for baseline code, and crash an AVX2-only CPU.
#
#   tests/kernels/isa_symbols.sh OBJECT...   (CTest passes ;-separated
#                                            lists, one per kernel target)
set -euo pipefail
objects=()
for arg in "$@"; do
  IFS=';' read -ra part <<< "$arg"
  objects+=("${part[@]}")
done
set -- "${objects[@]}"
[ $# -gt 0 ] || { echo "isa_symbols: no object files given" >&2; exit 2; }
command -v nm >/dev/null || { echo "isa_symbols: nm (binutils) missing" >&2; exit 2; }
bad=0
checked=0
for obj in "$@"; do
  [ -f "$obj" ] || { echo "isa_symbols: object '$obj' not found" >&2; exit 2; }
  # Defined, not local (upper-case type, or u/V/W/i), demangled.
  while IFS= read -r line; do
    checked=$((checked + 1))
    case "$line" in
      *"syncfac::cpu::avx512::"*|*"syncfac_eigen_avx512::"*) ;;
      *"syncfac::cpu::amx::"*) ;;  # the AMX kernel (kernels/cpu/bf16_gemm_kernel.cpp)
      *"syncfac::cpu::avx512bf16::"*) ;;  # the AVX512-BF16 one (kernels/cpu/bf16_gemm_avx512bf16.cpp)
      *"DW.ref.__gxx_personality_v0") ;;  # a pointer to libstdc++'s, no code
      *) echo "isa_symbols: $obj: shared symbol: $line" >&2; bad=$((bad + 1)) ;;
    esac
  done < <(nm -C --defined-only "$obj" | awk '$2 ~ /^[A-Zuvwi]$/ {sub(/^[0-9a-f]+ /, ""); print}')
done
echo "isa_symbols: $checked exported or weak symbols in $# objects, $bad shared"
[ "$checked" -gt 0 ] || { echo "isa_symbols: no symbols at all: wrong objects?" >&2; exit 1; }
[ "$bad" -eq 0 ]
