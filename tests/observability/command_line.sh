#!/usr/bin/env bash
# The command line people expect, on the real programs: --help (every flag
# with its default, the allowed values, on stdout, exit 0), --version, one
# sentence naming an unknown or malformed flag and the closest known one,
# --config-file FILE with the command line winning.
#
#   tests/observability/command_line.sh BUILD_DIR
set -euo pipefail

bin="${1:?usage: command_line.sh BUILD_DIR}/bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; for f in "$work"/out "$work"/err; do [ -f "$f" ] && { echo "--- $f"; head -20 "$f"; }; done; exit 1; }

# run PROGRAM ARGS...: stdout to $work/out, stderr to $work/err, rc in $rc.
run() { set +e; timeout 120 "$bin/$1" "${@:2}" > "$work/out" 2> "$work/err"; rc=$?; set -e; }

for prog in convnet_mnist_single convnet_mnist_multi_tower autoencoder_mnist convnet_mnist_distributed; do
  run "$prog" --help
  [ "$rc" -eq 0 ] || fail "$prog --help exited $rc"
  [ ! -s "$work/err" ] || fail "$prog --help wrote to stderr"
  grep -q "^Usage: $prog " "$work/out" || fail "$prog --help: no usage line"
  grep -qE '^  --steps N +.*\[[0-9]+\]$' "$work/out" || fail "$prog --help: --steps without its default"
  grep -qE '^  --optimizer sgd\|momentum\|adam\|kfac' "$work/out" || fail "$prog --help: --optimizer without its values"
  grep -qE '\[127\.0\.0\.1\]$' "$work/out" || fail "$prog --help: --metrics_bind without its default"
  # Every flag line (but --help and its kin) ends in its [default]; a
  # wrapped one has it on the next line.
  awk '/^  --/{ if (pending) { print pending; bad=1 } pending=""; if ($0 !~ /\]$/ && $1 !~ /^--(config-file|help|long-help|version)$/) pending=$0; next }
       /^   /{ if ($0 ~ /\]$/) pending=""; next }
       END{ if (pending) { print pending; bad=1 } exit bad }' "$work/out" \
    || fail "$prog --help: flags without a default"

  run "$prog" --version
  [ "$rc" -eq 0 ] || fail "$prog --version exited $rc"
  grep -qE "^$prog \(syncfac [0-9]+\.[0-9]+\.[0-9]+, CAF 0\.17\.[0-9]+\)$" "$work/out" || fail "$prog --version: '$(cat "$work/out")'"

  run "$prog" --stepz 5
  [ "$rc" -ne 0 ] || fail "$prog --stepz accepted"
  [ "$(wc -l < "$work/err")" -eq 1 ] || fail "$prog --stepz: not one line"
  grep -qF "unknown flag --stepz; did you mean --steps?" "$work/err" || fail "$prog --stepz: no suggestion"
  ! grep -q parser_error "$work/err" || fail "$prog: CAF's parser_error form"
done

p=convnet_mnist_single
run $p --steps abc
[ "$rc" -ne 0 ] && grep -qF -- "--steps 'abc' is not an integer" "$work/err" || fail "--steps abc"
run $p --steps
[ "$rc" -ne 0 ] && grep -qF -- "--steps needs a value" "$work/err" || fail "--steps without a value"
run $p --fake_data=maybe
[ "$rc" -ne 0 ] && grep -qF -- "--fake_data is an on/off flag" "$work/err" || fail "--fake_data=maybe"
run $p --optimizer kfca
[ "$rc" -ne 0 ] && grep -qF -- "--optimizer 'kfca': expected one of sgd, momentum, adam, kfac (did you mean kfac?)" "$work/err" || fail "--optimizer kfca"
run $p --bach_size 3
[ "$rc" -ne 0 ] && grep -qF -- "did you mean --batch_size?" "$work/err" || fail "--bach_size"
run $p steps
[ "$rc" -ne 0 ] && grep -qF -- "unexpected argument 'steps'" "$work/err" || fail "a bare word"

# --config-file: its flags apply, the command line wins.
cat > "$work/flags.ini" <<'INI'
# a run of three steps on the synthetic set
steps = 3
fake_data = true
no_progress = true   ; inline comment
runtime = "plain"
[scheduler]
max-threads = 2
INI
run $p --config-file "$work/flags.ini"
[ "$rc" -eq 0 ] || fail "--config-file run exited $rc"
grep -q '^SUMMARY {"steps": 3,.*"runtime": "plain"' "$work/out" || fail "the file's --steps 3 / --runtime plain did not apply"
run $p --config-file "$work/flags.ini" --steps 2
[ "$rc" -eq 0 ] || fail "--config-file with --steps exited $rc"
grep -q '^SUMMARY {"steps": 2,' "$work/out" || fail "the command line did not win over the file"
printf 'steps = 3\nstepz = 4\n' > "$work/typo.ini"
run $p --config-file "$work/typo.ini"
[ "$rc" -ne 0 ] && grep -qF -- "$work/typo.ini:2: unknown flag --stepz; did you mean --steps?" "$work/err" || fail "a typo in the file"
run $p --config-file "$work/none.ini"
[ "$rc" -ne 0 ] && grep -qF -- "--config-file '$work/none.ini': cannot be read" "$work/err" || fail "a missing file"
echo "ok: the command line of four programs"
