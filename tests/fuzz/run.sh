#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (tests/fuzz/targets, apart from
# the g++ build) and runs one of them on its corpus for a bounded time.
#
#   tests/fuzz/run.sh BUILD_DIR TARGET SECONDS [libFuzzer flags...]
#       builds into BUILD_DIR (once; later calls find it up to date), then
#       fuzzes TARGET for SECONDS. New inputs go to BUILD_DIR/work/TARGET,
#       crashes to BUILD_DIR/artifacts/TARGET/; the repository's corpus
#       (tests/fuzz/corpus/TARGET) is only read.
#   tests/fuzz/run.sh --seeds [BUILD_DIR]
#       regenerates the seed files of every corpus (make_seeds.cpp).
#
# Fails (1), naming the package, when clang or libFuzzer is missing
# (scripts/install-deps.sh installs them); otherwise exits with libFuzzer's
# status (0: no crash, leak, timeout or out-of-memory).
# SYNCFAC_FUZZ_CXX names the compiler (default: clang++-14, else clang++).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
corpus_root="$here/corpus"

find_compiler() {
  local c
  for c in "${SYNCFAC_FUZZ_CXX:-}" clang++-14 clang++; do
    if [ -n "$c" ] && command -v "$c" >/dev/null; then
      echo "$c"
      return 0
    fi
  done
  return 1
}

missing() {
  echo "fuzz: FAILED: $* (scripts/install-deps.sh installs it)" >&2
  exit 1
}

cxx="$(find_compiler)" \
  || missing "no clang++ (Debian's clang-14)"

# libFuzzer ships apart from clang (libclang-rt-14-dev): link a trivial
# target to find out rather than guessing the library's path.
probe_dir="$(mktemp -d)"
trap 'rm -rf "$probe_dir"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, '\
'unsigned long) { return 0; }\n' > "$probe_dir/probe.cpp"
"$cxx" -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cpp" \
  -o "$probe_dir/probe" >/dev/null 2>&1 \
  || missing "$cxx cannot link -fsanitize=fuzzer (Debian's libclang-rt-14-dev)"

build() {
  local dir="$1"
  shift
  mkdir -p "$dir"
  # CTest may run several fuzz entries at once: one builds, the others wait.
  (
    flock 9
    if [ ! -f "$dir/CMakeCache.txt" ]; then
      cmake -S "$here/targets" -B "$dir" -DCMAKE_CXX_COMPILER="$cxx" \
        -DCMAKE_BUILD_TYPE= >"$dir/configure.log" 2>&1 \
        || { cat "$dir/configure.log" >&2; exit 1; }
    fi
    cmake --build "$dir" -j"$(nproc)" "$@"
  ) 9>"$dir.lock"
}

if [ "${1:-}" = "--seeds" ]; then
  dir="${2:-$here/../../build/fuzz}"
  build "$dir" --target make_seeds
  "$dir/make_seeds" "$corpus_root"
  echo "fuzz: seeds written under $corpus_root"
  exit 0
fi

if [ $# -lt 3 ]; then
  echo "usage: $0 BUILD_DIR TARGET SECONDS [libFuzzer flags...]" >&2
  echo "       $0 --seeds [BUILD_DIR]" >&2
  exit 2
fi
dir="$1"
target="$2"
seconds="$3"
shift 3

build "$dir"
work="$dir/work/$target"
artifacts="$dir/artifacts/$target"
mkdir -p "$work" "$artifacts"

# The seeds and reproducers run first (libFuzzer executes the corpus
# before mutating), so a fixed bug that comes back fails at once.
# -timeout: one input taking longer is a hang; -rss_limit_mb also caps
# single allocations (libFuzzer's malloc limit defaults to it).
echo "fuzz: $target for ${seconds}s on $corpus_root/$target"
status=0
"$dir/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 \
  -max_len=4096 -print_final_stats=1 -artifact_prefix="$artifacts/" "$@" \
  "$work" "$corpus_root/$target" || status=$?
if [ "$status" -ne 0 ]; then
  echo "fuzz: $target failed (status $status); the input is in" \
       "$artifacts/. Reproduce with: $dir/$target <file>; once fixed," \
       "add the file to $corpus_root/$target/" >&2
fi
exit "$status"
