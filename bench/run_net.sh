#!/usr/bin/env bash
# Network speed between two processes over loopback (bench_net): gradient
# push + ack of 1 MiB and 16 MiB tensors and a small request/reply round
# trip, through CAF (plain and TLS) against raw TCP, in interleaved rounds;
# prints the medians and writes bench/results/net-<UTC time>-*.json. CAF
# pushes go as the runtime sends them to another process: in parts of
# 1 MiB (--part_kib 1024, the default of --push_part_kib; a 1 MiB push
# goes as two halves, split_push). Runs with CAF's default middleman
# settings, then with middleman.workers=0 (the programs' default: the
# multiplexer deserialises incoming messages itself instead of copying
# each payload to a deserialisation worker), then with workers=0 and each
# push whole (--part_kib 0) for comparison. Raw TCP moves each push as
# one message.
# CAF+TLS is the runtime's TLS transport; the workers=0 run also measures
# CAF's own caf::openssl (path "openssl") against it.
#
#   bench/run_net.sh [rounds=7] [seconds=0.5]
#
# SYNCFAC_BIN_DIR (default build/bin) says where bench_net is.
. "$(dirname "$0")/bench_lib.sh"
rounds=${1:-7}
seconds=${2:-0.5}
bin=${SYNCFAC_BIN_DIR:-build/bin}/bench_net
need_built "$bin"
mkdir -p bench/results
stamp=$(date -u +%Y%m%dT%H%M%SZ)
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "--- CAF defaults (pushes in 1 MiB parts)"
"$bin" --rounds "$rounds" --seconds "$seconds" --sizes 1,16 \
  --json "bench/results/net-$stamp-default.json"
echo "--- middleman.workers=0 (pushes in 1 MiB parts: the programs' defaults)"
echo "    (openssl: CAF's own caf::openssl with the same certificates)"
"$bin" --rounds "$rounds" --seconds "$seconds" --sizes 1,16 \
  --paths raw,caf,tls,openssl \
  --set middleman.workers=0 --json "bench/results/net-$stamp-workers0.json"
echo "--- middleman.workers=0, each CAF push whole"
"$bin" --rounds "$rounds" --seconds "$seconds" --sizes 1,16 \
  --set middleman.workers=0 --part_kib 0 \
  --json "bench/results/net-$stamp-workers0-whole.json"
echo "machine load after: $(cut -d' ' -f1-3 /proc/loadavg)"
