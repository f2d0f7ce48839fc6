#!/usr/bin/env bash
# Flags that cannot lie, on the real programs: every numeric flag shows its
# range in --help and a value outside it is refused naming the flag
# ("--learning_rate -3: must be > 0"), the value derived here from the
# range --help prints, so a flag added without a range fails this test;
# --config-file / --config_file read the repository's own .flags files
# (examples/main_job/); the old spellings of renamed flags still work.
#
#   tests/observability/flag_ranges.sh BUILD_DIR SOURCE_DIR
set -euo pipefail

bin="${1:?usage: flag_ranges.sh BUILD_DIR SOURCE_DIR}/bin"
src="${2:?usage: flag_ranges.sh BUILD_DIR SOURCE_DIR}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Whatever a program writes by default (langid_data's langid.npz) goes here.
cd "$work"
fail() { echo "FAIL: $*"; for f in "$work"/out "$work"/err; do [ -f "$f" ] && { echo "--- $f"; head -20 "$f"; }; done; exit 1; }

# run PROGRAM ARGS...: stdout to $work/out, stderr to $work/err, rc in $rc.
run() { set +e; timeout 120 "$bin/$1" "${@:2}" > "$work/out" 2> "$work/err"; rc=$?; set -e; }

# outside RANGE: a value the range (as --help prints it) refuses.
outside() {
  case "$1" in
    ">= "*" and < "*) echo "${1##* }" ;;
    ">= "*) awk -v x="${1#>= }" 'BEGIN { print x - 1 }' ;;
    "> "*) echo "${1#> }" ;;
    *" to "*) awk -v x="${1##* to }" 'BEGIN { print x + 1 }' ;;
    *) return 1 ;;
  esac
}

checked=0
for prog in convnet_mnist_single convnet_mnist_multi_tower autoencoder_mnist \
            convnet_mnist_distributed syncfac_evaluator langid_data; do
  run "$prog" --help
  [ "$rc" -eq 0 ] || fail "$prog --help exited $rc"
  cp "$work/out" "$work/help"
  # "  --name N >= 1   meaning [default]" or "  --name X > 0 ...": the
  # numeric flags, each with its range (the help's flag column).
  grep -E '^  --[a-z_0-9]+ (N|X)( |$)' "$work/help" | sed -E 's/^  --([a-z_0-9]+) .*/\1/' > "$work/names"
  [ -s "$work/names" ] || fail "$prog --help: no numeric flags found"
  while read -r name; do
    line=$(grep -E "^  --$name (N|X)( |$)" "$work/help")
    # The range sits between the kind and the two-blank gap before the
    # meaning (or alone on the line when the flag column is full).
    range=$(printf '%s\n' "$line" | sed -E "s/^  --$name (N|X) ?//; s/  +.*//")
    [ -n "$range" ] || fail "$prog --$name: no range in --help: '$line'"
    value=$(outside "$range") || fail "$prog --$name: range '$range' not understood"
    run "$prog" "--$name" "$value"
    [ "$rc" -ne 0 ] || fail "$prog --$name $value (outside '$range') accepted"
    grep -qF -- "--$name $value: must be $range" "$work/err" \
      || grep -qF -- "--$name '$value' is not" "$work/err" \
      || fail "$prog --$name $value: not refused by name ($(cat "$work/err"))"
    checked=$((checked + 1))
  done < "$work/names"
done
[ "$checked" -ge 100 ] || fail "only $checked numeric flags checked"

# The issue's own example, word for word.
run convnet_mnist_single --learning_rate -3
[ "$rc" -ne 0 ] && grep -qF -- "--learning_rate -3: must be > 0" "$work/err" || fail "--learning_rate -3"
# A value in range is taken, in a file as on the command line.
printf 'learning_rate = -3\n' > "$work/bad.ini"
run convnet_mnist_single --config-file "$work/bad.ini"
[ "$rc" -ne 0 ] && grep -qF -- "$work/bad.ini:1: --learning_rate -3: must be > 0" "$work/err" || fail "a range in a file"

# The repository's own .flags files (one line of flags) through
# --config-file and --config_file; the command line wins.
small="--fake_data --fake_train_size 256 --fake_test_size 100 --batch_size 16 --threads 1 --no_progress"
run convnet_mnist_single --config-file "$src/examples/main_job/kfac.flags" $small --steps 2 --eval_every 0 --worker_replicas 1
[ "$rc" -eq 0 ] || fail "kfac.flags through --config-file exited $rc"
grep -q '^optimizer: kfac, learning_rate 0.0003,' "$work/out" || fail "kfac.flags: not K-FAC at its learning rate"
grep -q '^SUMMARY {"steps": 2,' "$work/out" || fail "the command line's --steps 2 did not win over the file's 800"
run convnet_mnist_single --config_file="$src/examples/main_job/momentum.flags" $small --steps 2 --eval_every 0
[ "$rc" -eq 0 ] || fail "momentum.flags through --config_file exited $rc"
grep -q '^optimizer: momentum, learning_rate 0.01,' "$work/out" || fail "momentum.flags: not momentum at its learning rate"
grep -q 'replicas_to_aggregate 2' "$work/out" || fail "momentum.flags: not its replicas_to_aggregate 2"
printf -- '--steps 2 3\n' > "$work/stray.flags"
run convnet_mnist_single --config_file "$work/stray.flags"
[ "$rc" -ne 0 ] && grep -qF -- "$work/stray.flags:1: expected a flag (--name), got '3'" "$work/err" || fail "a stray word in a .flags file"
printf -- '--steps\n' > "$work/bare.flags"
run convnet_mnist_single --config_file "$work/bare.flags"
[ "$rc" -ne 0 ] && grep -qF -- "--steps needs a value" "$work/err" || fail "a flag without its value in a .flags file"

# Renamed flags, old spellings still accepted: --eval_every /
# --eval_every_steps on both sides, --dead_peer_timeout_ms /
# --connection_timeout_ms.
run convnet_mnist_single $small --runtime plain --steps 4 --eval_every_steps 2 --log_every 1
[ "$rc" -eq 0 ] || fail "--eval_every_steps on a trainer exited $rc"
grep -q '^global_step: 2 | test_loss: ' "$work/out" || fail "--eval_every_steps 2: no evaluation at step 2"
for prog in convnet_mnist_distributed syncfac_evaluator; do
  run "$prog" --help
  grep -qE '^  --dead_peer_timeout_ms N' "$work/out" || fail "$prog: no --dead_peer_timeout_ms"
  grep -qE '^  --connection_timeout_ms N .*old spelling of --dead_peer_timeout_ms' "$work/out" || fail "$prog: --connection_timeout_ms not shown as the old spelling"
done
run syncfac_evaluator --help
grep -qE '^  --eval_every N' "$work/out" || fail "syncfac_evaluator: no --eval_every"
run syncfac_evaluator --eval_every 0
[ "$rc" -ne 0 ] && grep -qF -- "--eval_every 0: must be >= 1" "$work/err" || fail "the evaluator's --eval_every 0"
echo "ok: $checked numeric flags refused outside their ranges; .flags files; old spellings"
