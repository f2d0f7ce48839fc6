#!/usr/bin/env bash
# A real cluster under Open MPI's mpirun on this host:
#   mpirun --allow-run-as-root --oversubscribe -np 4 \
#       convnet_mnist_distributed --layout chief=1,ps=1 ...
# Every rank derives the cluster from OMPI_COMM_WORLD_* (all ranks local:
# localhost, ports --port_base + local rank; runtime/cluster/scheduler_env.hpp),
# trains to the end, and the chief's summary must say global_step 30 and
# every rank exit 0 (mpirun's status). Debian's openmpi-bin comes from
# scripts/install-deps.sh; the test fails without it.
#
#   tests/examples/mpirun_cluster.sh BUILD/bin
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

. "$here/engine_test_lib.sh"
take_bin_dir "${1:-}"
need_engine "mpirun" openmpi-bin

work=$(mktemp -d /tmp/syncfac-mpi.XXXXXX)
trap 'rm -rf "$work"' EXIT
summary="$work/summary.json"

# Loopback only: no other interface, no remote launch agent (ssh) needed.
# The ranks' ports lie below the kernel's ephemeral range (32768-60999 by
# default), where no outgoing connection of a test beside this one holds
# them: one run of 8 free ports, 4 for each mpirun.
ports=$(free_port_run 8) || fail "no 8 consecutive free ports"
limit=$(budget 120)
timeout "$limit" mpirun --allow-run-as-root --oversubscribe -np 4 \
  --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
  --output-filename "$work/out" \
  "$program" --layout chief=1,ps=1 --port_base $ports --fake_data \
  --fake_train_size 2048 --fake_test_size 500 --batch_size 32 --threads 1 \
  --no_progress --connect_timeout_ms 60000 --steps 30 --log_every 10 \
  --summary "$summary"
status=$?
for f in $(find "$work/out" -type f 2>/dev/null | sort); do
  echo "--- ${f#$work/out/}"; tail -6 "$f"
done
if [ $status -ne 0 ]; then
  # Each rank's last line after the verdict: a log cut to its end keeps
  # them (CI's does).
  echo "FAIL: mpirun exited $status (a rank failed or the run timed out; 124: past $limit s); each rank's last line:"
  for f in $(find "$work/out" -name stdout -type f 2>/dev/null | sort); do
    rank=${f%/stdout}; rank=${rank##*/}
    echo "  $rank: $(tail -n 1 "$f" | cut -c1-300)"
  done
  exit 1
fi
[ -s "$summary" ] || { echo "FAIL: no summary from the chief"; exit 1; }
python3 "$here/check_summary.py" "$summary" 30 2 1 "the chief's summary" || exit 1
echo "mpirun -np 4 (all ranks local) trained to global_step 30, every rank exited 0"

# The host list path: SYNCFAC_HOSTS passed to every rank with -x, ranks
# filling its slots, checked against OMPI_COMM_WORLD_LOCAL_RANK; two PS
# shards and one worker.
summary2="$work/summary-hosts.json"
SYNCFAC_HOSTS=localhost:4 timeout "$(budget 90)" mpirun --allow-run-as-root \
  --oversubscribe -np 4 -x SYNCFAC_HOSTS \
  --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
  "$program" --layout chief=1,ps=2 --port_base $((ports + 4)) --fake_data \
  --fake_train_size 2048 --fake_test_size 500 --batch_size 32 --threads 1 \
  --no_progress --connect_timeout_ms 60000 --steps 30 --log_every 10 \
  --summary "$summary2" >"$work/hosts.log" 2>&1
status=$?
tail -4 "$work/hosts.log"
[ $status -eq 0 ] || { echo "FAIL: mpirun with SYNCFAC_HOSTS exited $status"; cat "$work/hosts.log"; exit 1; }
python3 "$here/check_summary.py" "$summary2" 30 1 2 "with SYNCFAC_HOSTS" || exit 1
echo "PASS: mpirun -np 4 trained to global_step 30 twice, every rank exited 0"
