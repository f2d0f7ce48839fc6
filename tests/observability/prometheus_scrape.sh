#!/usr/bin/env bash
# Prometheus over a real run on loopback: a sync run in one process (two
# workers, two PS shards) with --metrics_port, scraped while it trains.
# /metrics must carry every family with HELP and TYPE and job/task labels,
# the roles' counters (pushes accepted/stale/refused per shard, token wait
# and peers lost per worker), a global step that goes up between scrapes,
# and pass `promtool check metrics` (Debian's prometheus package, from
# scripts/install-deps.sh; the test fails without it). A second
# program on the same port must fail naming it; a port out of range too.
#
#   tests/observability/prometheus_scrape.sh BUILD_DIR
set -euo pipefail

build=${1:?usage: prometheus_scrape.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/free_port.sh"
bin="$build/bin/convnet_mnist_single"
. "$here/scratch_run.sh"

port=$(free_port)
"$bin" --fake_data --fake_train_size 2560 --batch_size 16 --steps 100000 \
  --worker_replicas 2 --ps_tasks 2 --log_every 5 --no_progress \
  --metrics_port "$port" > "$work/run.log" 2>&1 &
pid=$!

scrape() { curl -sf -m 10 "http://127.0.0.1:$port/metrics"; }
# Up to two minutes for the program to start and log its first window.
for _ in $(seq 240); do
  if scrape > "$work/m1.txt" 2>/dev/null && grep -q '^syncfac_train_loss' "$work/m1.txt"; then
    break
  fi
  kill -0 "$pid" 2>/dev/null || fail "the run ended early"
  sleep 0.5
done
grep -q '^syncfac_train_loss' "$work/m1.txt" || fail "no train loss on /metrics within 120 s"

labels='job="chief",task="0"'
need=(
  "syncfac_up{$labels} 1"
  "syncfac_global_step{$labels} "
  "syncfac_steps_per_second{$labels} "
  "syncfac_examples_per_second{$labels} "
  "syncfac_train_loss{$labels} "
  "syncfac_learning_rate{$labels} "
  "syncfac_run_stale_pushes_total{$labels} "
  "syncfac_pushes_accepted_total{$labels,role=\"ps:0\"} "
  "syncfac_pushes_accepted_total{$labels,role=\"ps:1\"} "
  "syncfac_pushes_stale_total{$labels,role=\"ps:1\"} "
  "syncfac_pushes_refused_total{$labels,role=\"ps:0\"} 0"
  "syncfac_token_wait_seconds_total{$labels,role=\"worker:1\"} "
  "syncfac_token_wait_share{$labels,role=\"worker:0\"} "
  "syncfac_peers_lost_total{$labels,role=\"worker:0\"} 0"
  "syncfac_tokens_granted_total{$labels,role=\"chief\"} "
)
for line in "${need[@]}"; do
  grep -qF -- "$line" "$work/m1.txt" || fail "/metrics lacks '$line'"
done
# Every family has HELP and TYPE before its samples.
awk '/^# HELP /{help[$3]=1; next} /^# TYPE /{type[$3]=1; next}
     /^[a-z]/{n=$0; sub(/[{ ].*/, "", n); if (!(n in help) || !(n in type)) {print n; bad=1}}
     END{exit bad}' "$work/m1.txt" || fail "samples without HELP/TYPE"

step_of() { sed -n "s/^syncfac_global_step{$labels} //p" "$1"; }
first=$(step_of "$work/m1.txt")
for _ in $(seq 240); do
  scrape > "$work/m2.txt"
  [ "$(step_of "$work/m2.txt")" -gt "$first" ] && break
  sleep 0.5
done
[ "$(step_of "$work/m2.txt")" -gt "$first" ] || fail "the global step did not go up from $first"
# Bytes in and out: a worker that has stepped has pushed and pulled some.
for family in syncfac_bytes_out_total syncfac_bytes_in_total; do
  value=$(sed -n "s/^$family{$labels,role=\"worker:0\"} //p" "$work/m2.txt")
  [ -n "$value" ] && awk -v x="$value" 'BEGIN { exit !(x > 0) }' \
    || fail "$family of worker:0 is '$value', not positive"
done

# The status page data is there too (the status page test checks the page).
curl -sf -m 10 "http://127.0.0.1:$port/status.json" > "$work/status.json" \
  || fail "no /status.json"
grep -q '"global_step"' "$work/status.json" || fail "/status.json lacks the global step"

# Another program on the same port: a clear error naming it.
if "$bin" --fake_data --steps 1 --no_progress --metrics_port "$port" > "$work/second.log" 2>&1; then
  fail "a second program on port $port did not fail"
fi
grep -q "127.0.0.1:$port" "$work/second.log" || { cat "$work/second.log"; fail "the error does not name port $port"; }
if "$bin" --fake_data --steps 1 --no_progress --metrics_port 70000 > "$work/range.log" 2>&1; then
  fail "--metrics_port 70000 was accepted"
fi
grep -q -- "--metrics_port 70000" "$work/range.log" || { cat "$work/range.log"; fail "the error does not name the flag"; }

command -v promtool >/dev/null || fail "promtool is missing (Debian's prometheus package; scripts/install-deps.sh installs it)"
promtool check metrics < "$work/m2.txt" || fail "promtool check metrics"
echo "promtool check metrics: ok"
echo "ok: scraped $(grep -c '^syncfac_' "$work/m2.txt") samples at step $(step_of "$work/m2.txt")"
