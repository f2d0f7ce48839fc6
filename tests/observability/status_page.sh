#!/usr/bin/env bash
# The chief's live status page in headless Chromium during a real run: a
# run checkpoints 20 steps, a second one resumes from there with
# --metrics_port; the page at / must show the tasks with their health,
# curves with points (loss, accuracy, test evaluations), the resume among
# the faults and restarts, use no external assets, and render to a
# screenshot. Chromium is Debian's, installed by scripts/install-deps.sh:
# without it the test fails saying so.
#
#   tests/observability/status_page.sh BUILD_DIR
set -euo pipefail

build=${1:?usage: status_page.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/free_port.sh"
command -v chromium >/dev/null || { echo "FAILED: Debian's chromium is not installed (scripts/install-deps.sh installs it)"; exit 1; }

bin="$build/bin/convnet_mnist_single"
. "$here/scratch_run.sh"

flags=(--fake_data --fake_train_size 2560 --batch_size 16 --log_every 5
       --no_progress --checkpoint_dir "$work/ckpt")
timeout 300 "$bin" "${flags[@]}" --steps 20 > "$work/first.log" 2>&1 || fail "the first run failed"
port=$(free_port)
"$bin" "${flags[@]}" --steps 100000 --eval_every 20 --metrics_port "$port" \
  > "$work/run.log" 2>&1 &
pid=$!

# Until the run has a few log lines and two evaluations (bounded).
for _ in $(seq 360); do
  if curl -sf -m 10 "http://127.0.0.1:$port/status.json" > "$work/status.json" 2>/dev/null \
     && /usr/bin/python3 -c 'import json,sys
s = json.load(open(sys.argv[1]))
sys.exit(0 if len(s["curves"]["loss"]) >= 3 and len(s["curves"]["test_loss"]) >= 2 else 1)' "$work/status.json"; then
    break
  fi
  kill -0 "$pid" 2>/dev/null || fail "the run ended early"
  sleep 0.5
done

curl -sf -m 10 "http://127.0.0.1:$port/" > "$work/page.html" || fail "no page at /"
if grep -qE '(src|href)="?(https?:)?//' "$work/page.html"; then fail "the page loads external assets"; fi

chrome() {
  timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run \
    --user-data-dir="$work/chrome" --virtual-time-budget=4000 "$@" \
    "http://127.0.0.1:$port/" 2>> "$work/chromium.err"
}
chrome --dump-dom > "$work/dom.html" || fail "chromium --dump-dom failed: $(tail -3 "$work/chromium.err")"
for t in chief ps:0 worker:0; do
  grep -q "<tr class=\"task\" data-task=\"$t\" data-state=\"up\">" "$work/dom.html" \
    || fail "no healthy task row for $t"
done
for c in loss train_accuracy test_loss test_accuracy; do
  n=$( { grep -o "<figure data-curve=\"$c\">.*" "$work/dom.html" | grep -o 'data-points="[0-9]*"' | head -1 | tr -dc 0-9; } || true)
  [ "${n:-0}" -ge 2 ] || fail "the $c curve has ${n:-no} points"
done
grep -q "resumed at global step 20" "$work/dom.html" || fail "the resume is not among the faults and restarts"
grep -q '<table id="figures">' "$work/dom.html" || fail "no figures table"

chrome --window-size=1280,1100 --screenshot="$work/page.png" > /dev/null || fail "chromium --screenshot failed"
[ "$(head -c 8 "$work/page.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "the screenshot is not a PNG"
[ "$(stat -c %s "$work/page.png")" -gt 10000 ] || fail "the screenshot is nearly empty"
echo "ok: status page with $(grep -o '<tr class="task"' "$work/dom.html" | wc -l) tasks, screenshot $(stat -c %s "$work/page.png") bytes"
