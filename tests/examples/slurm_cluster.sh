#!/usr/bin/env bash
# A real cluster under Slurm on this one host: starts munged, slurmctld and
# slurmd (as root, with state under a temporary directory, on loopback),
# then runs
#   srun --overcommit -n 4 convnet_mnist_distributed --layout chief=1,ps=1 ...
# which derives its cluster from srun's environment
# (runtime/cluster/scheduler_env.hpp), trains to the end and writes the
# chief's summary, and checks it. slurm-wlm and munge come from
# scripts/install-deps.sh; without them, or when the daemons cannot start,
# it fails saying which and why.
#
#   tests/examples/slurm_cluster.sh BUILD/bin
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

. "$here/engine_test_lib.sh"
take_bin_dir "${1:-}"
need_engine "srun slurmctld slurmd sinfo munged" slurm-wlm munge
[ "$(id -u)" -eq 0 ] || fail "starting slurmctld/slurmd/munged on this host needs root (scripts/test.sh runs as root)"

work=$(mktemp -d /tmp/syncfac-slurm.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT

# munge: a key of our own, a socket of our own (the system's munged, if any,
# stays as it is).
dd if=/dev/urandom of="$work/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge.key"
mkdir -p "$work/munge"
chmod 700 "$work/munge"
munged -F --force --key-file="$work/munge.key" --socket="$work/munge/socket" \
  --pid-file="$work/munge/pid" --seed-file="$work/munge/seed" \
  --log-file="$work/munge/log" >"$work/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$work/munge/socket" ] && break; sleep 0.1; done
[ -S "$work/munge/socket" ] || fail "munged did not start: $(tail -3 "$work/munged.out" "$work/munge/log" 2>/dev/null | tr '\n' ' ')"

# Ports apart from the defaults (6817/6818), so that a Slurm of the machine
# is not disturbed; one node called localhost on 127.0.0.1.
ctl_host=$(hostname -s)
cpus=$(nproc)
mkdir -p "$work/state" "$work/spool"
# Every port here (Slurm's and the ranks' --port_base) lies below the
# kernel's ephemeral range (ip_local_port_range, 32768-60999 by default): a
# port in it may be held at that moment by any outgoing connection of a
# test running beside this one, and a rank that cannot listen ends the
# whole step (--kill-on-bad-exit). One run of 16 free ports: slurmctld's,
# slurmd's, then 4 for srun's ranks and 4 for the batch job's.
ports=$(free_port_run 16) || fail "no 16 consecutive free ports"
cat >"$work/slurm.conf" <<CONF
ClusterName=syncfac-test
SlurmctldHost=$ctl_host(127.0.0.1)
SlurmctldPort=$ports
SlurmdPort=$((ports + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/linear
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=5
NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF="$work/slurm.conf"
slurmctld -D -i -f "$SLURM_CONF" >"$work/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" >"$work/slurmd.out" 2>&1 &
pids+=($!)
ready=0
for _ in $(seq 60); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)$'; then
    ready=1; break
  fi
  sleep 1
done
if [ $ready -ne 1 ]; then
  echo "--- slurmctld"; tail -20 "$work/slurmctld.log" "$work/slurmctld.out" 2>/dev/null
  echo "--- slurmd"; tail -20 "$work/slurmd.log" "$work/slurmd.out" 2>/dev/null
  fail "slurmctld/slurmd did not bring the node up within 60 s (sinfo: $(sinfo -h -o '%T %E' 2>&1 | head -1))"
fi
echo "slurm is up: $(sinfo -h -o '%P %D %T %N')"

summary="$work/summary.json"
# The summary goes to a path every rank shares; only the chief writes it.
timeout "$(budget 80)" srun --overcommit -n 4 -N 1 --kill-on-bad-exit=0 --wait=60 \
  -o "$work/rank-%t.log" \
  "$program" --layout chief=1,ps=1 --port_base $((ports + 4)) --fake_data \
  --fake_train_size 2048 --fake_test_size 500 --batch_size 32 --threads 1 \
  --no_progress --connect_timeout_ms 60000 --steps 30 --log_every 10 \
  --summary "$summary"
status=$?
for f in "$work"/rank-*.log; do
  echo "--- $(basename "$f")"; tail -8 "$f"
done
if [ $status -ne 0 ]; then
  echo "FAIL: srun exited $status"
  tail -20 "$work/slurmd.log"
  exit 1
fi
[ -s "$summary" ] || { echo "FAIL: no summary from the chief"; exit 1; }
python3 "$here/check_summary.py" "$summary" 30 2 1 "the chief's summary" || exit 1
echo "srun -n 4 trained to global_step 30, every rank exited 0"

# The ready batch script of examples/slurm/, as a user submits it, on one
# node with 4 tasks instead of its 2 x 3, on fake data.
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
batch_summary="$work/batch-summary.json"
# It makes its per-task certificates itself (in $work/syncfac-certs).
SYNCFAC_BIN="$(cd "$bin" && pwd)" SYNCFAC_SCRIPTS="$source_dir/scripts" \
SYNCFAC_LAYOUT=chief=1,ps=1 \
SYNCFAC_PORT_BASE=$((ports + 8)) SYNCFAC_SUMMARY="$batch_summary" \
SYNCFAC_FLAGS="--fake_data --fake_train_size 2048 --fake_test_size 500 --batch_size 32 --threads 1 --connect_timeout_ms 60000 --steps 30 --log_every 10" \
  timeout "$(budget 80)" sbatch --wait --nodes=1 --ntasks=4 --ntasks-per-node=4 \
  --overcommit --output="$work/batch.log" -D "$work" \
  "$source_dir/examples/slurm/convnet_mnist_distributed.sbatch"
status=$?
echo "--- batch.log"; tail -8 "$work/batch.log" 2>/dev/null
if [ $status -ne 0 ]; then
  # The whole log: with --kill-on-bad-exit the first task's failure is
  # what ended the step, and it is far above the others' SIGTERM lines.
  echo "--- batch.log, whole (first 80 lines)"; head -80 "$work/batch.log" 2>/dev/null
  echo "--- slurmd.log (last 20 lines)"; tail -20 "$work/slurmd.log" 2>/dev/null
  echo "FAIL: sbatch --wait examples/slurm/convnet_mnist_distributed.sbatch exited $status"
  exit 1
fi
python3 "$here/check_summary.py" "$batch_summary" 30 2 1 "the batch job's summary" || exit 1
grep -q "listening on .*(TLS)" "$work/batch.log" \
  || { echo "FAIL: the batch job's nodes did not listen over TLS"; exit 1; }
for t in chief-0 ps-0 worker-0 worker-1; do
  grep -q "syncfac://${t%-*}/${t#*-}" "$work/syncfac-certs/$t/names.txt" 2>/dev/null \
    || { echo "FAIL: the batch job made no certificate of its task $t"; ls -R "$work/syncfac-certs"; exit 1; }
done
echo "PASS: srun -n 4 and sbatch examples/slurm/ trained to global_step 30, every rank exited 0"
