#!/usr/bin/env bash
# syncfac beside its peers in one run (issue 24 item 6), on the same ConvNet
# (examples/models/seeds_convnet.json), data (Fashion-MNIST), batch (128),
# optimizer (momentum SGD, lr 0.01) and topology, interleaved, ROUNDS rounds,
# medians and ratios:
#
#  1. One process, 1 and 2 threads: convnet_mnist_single (its default
#     runtime: chief, one worker and one PS shard as actors in one process)
#     against PyTorch 2.x eager and torch.compile, NCHW and channels-last
#     (bench/peers/torch_convnet.py); 200 timed steps after 20 warm-up. The
#     ratio is against the fastest of PyTorch's four ways.
#  2. A loopback cluster: syncfac's chief, 2 workers and 1 PS shard, one
#     process each via syncfac-launch (convnet_mnist_distributed), against
#     TensorFlow's own SyncReplicasOptimizer (tf.compat.v1; 1 ps and 2
#     workers over gRPC, worker 0 the chief; bench/peers/tf_sync_replicas.py),
#     R = N = 2, 1 compute thread per task; global steps/s after 20 warm-up
#     steps (bench/peers/tf_cluster.py starts its three tasks as one
#     command).
#
# Both at every instruction-set level the CPU has (LEVELS overrides):
# syncfac --isa L, PyTorch with ATEN_CPU_CAPABILITY=L, TensorFlow with
# oneDNN's ONEDNN_MAX_CPU_ISA at that level. The protocol of
# docs/benchmarks.md (bench/protocol.py): interleaved rounds, every round
# shown, CPU time beside wall time, one JSON line per run in
# bench/results/peers.jsonl, a 2.0x target met only by the medians.
#
#   bench/run_peers.sh [rounds=3]
#
# SYNCFAC_BIN_DIR (default build/bin) must hold convnet_mnist_single,
# convnet_mnist_distributed and syncfac-launch: nothing is built here.
# The peers run from the venv bench/peers/venv.sh makes (bench/.venv, or
# PEERS_VENV; pip install torch numpy tensorflow-cpu from PyPI when missing).
# SINGLE_STEPS (220), CLUSTER_STEPS (320) and TF_STEPS (120; TensorFlow's
# global step is over ten times slower) are the steps of each run, warm-up
# included; TF_INTER_OP (2) the inter-op threads of each TensorFlow task.
# Every run is bounded (RUN_LIMIT_S, default 600 s) and a cluster whose
# ports were taken in the meantime is started again on new ones (3 tries).
# (The per-run summaries go to a temporary directory; the JSON lines stay.)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench: rounds '$rounds' is not a positive integer" >&2; exit 2; }
bin_dir=${SYNCFAC_BIN_DIR:-build/bin}
single_steps=${SINGLE_STEPS:-220}
cluster_steps=${CLUSTER_STEPS:-320}
tf_steps=${TF_STEPS:-120}
tf_inter=${TF_INTER_OP:-2}
limit_s=${RUN_LIMIT_S:-600}
for v in single_steps cluster_steps tf_steps tf_inter limit_s; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "bench: $v '${!v}' is not a positive integer" >&2; exit 2; }
done
for s in single_steps cluster_steps tf_steps; do
  [ "${!s}" -gt 20 ] || { echo "bench: $s ${!s} must exceed the 20 warm-up steps" >&2; exit 2; }
done
for b in convnet_mnist_single convnet_mnist_distributed syncfac-launch; do
  [ -x "$bin_dir/$b" ] || { echo "bench: $bin_dir/$b not built (set SYNCFAC_BIN_DIR)" >&2; exit 1; }
done
py=$(bench/peers/venv.sh torch tf)
# The peers still run and train before they are timed.
PEERS_VENV=${PEERS_VENV:-bench/.venv} python3 bench/peers/check_peers.py . \
  || { echo "bench: the peers' self-check failed" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
python3 - "$out" "$rounds" "$bin_dir" "$py" "$single_steps" "$cluster_steps" "$tf_steps" "$tf_inter" "$limit_s" "${LEVELS:-}" <<'PY'
import json, re, subprocess, sys
sys.path.insert(0, "bench")
from protocol import Bench, verdict
out, rounds, bin_dir, py = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
single_steps, cluster_steps, tf_steps, tf_inter, limit_s = map(int, sys.argv[5:10])
bench = Bench("peers")
levels = sys.argv[10].split() or bench.facts["cpu_isa_levels"]
ONEDNN = {"avx2": "AVX2", "avx512": "AVX512_CORE"}
R, BATCH = 2, 128
def first_line(path):
    return json.loads(open(path).read().splitlines()[-1])
def single_syncfac(c, r):
    summary = f"{out}/single_syncfac_{c['threads']}_{c['isa']}_{r}.json"
    cmd = [f"{bin_dir}/convnet_mnist_single", "--steps", str(single_steps), "--warmup", "20",
           "--batch_size", "128", "--optimizer", "momentum", "--learning_rate", "0.01",
           "--threads", str(c["threads"]), "--isa", c["isa"], "--seed", str(r),
           "--no_final_eval", "--no_progress", "--log_every", "1000", "--summary", summary]
    return cmd, {}, lambda: {"examples_per_s": first_line(summary)["examples_per_s"]}
def single_torch(c, r, compiled, channels_last):
    summary = f"{out}/single_torch_{c['threads']}_{c['isa']}_{r}_{compiled}_{channels_last}.json"
    cmd = [py, "bench/peers/torch_convnet.py", "--optimizer", "momentum", "--lr", "0.01",
           "--batch", "128", "--steps", str(single_steps), "--warmup", "20",
           "--threads", str(c["threads"]), "--seed", str(r), "--summary_json", summary]
    cmd += ["--compile"] * compiled + ["--channels_last"] * channels_last
    # torch.compile's kernels cached per level: a cache shared between
    # levels crashed it (malloc: unaligned tcache chunk).
    env = {"OMP_NUM_THREADS": str(c["threads"]), "ATEN_CPU_CAPABILITY": c["isa"], "TORCHINDUCTOR_CACHE_DIR": f"{out}/inductor_{c['isa']}"}
    return cmd, env, lambda: {"examples_per_s": first_line(summary)["examples_per_s"]}
def free_ports(n):
    return subprocess.run([sys.executable, "scripts/free_ports.py", str(n)],
                          capture_output=True, text=True, check=True).stdout.split()
def cluster_syncfac(c, r):
    summary, cluster = f"{out}/cluster_syncfac_{c['isa']}_{r}.json", f"{out}/cluster_{c['isa']}_{r}.json"
    p = free_ports(4)
    json.dump({"cluster": {"chief": [f"127.0.0.1:{p[0]}"], "worker": [f"127.0.0.1:{p[1]}", f"127.0.0.1:{p[2]}"],
                           "ps": [f"127.0.0.1:{p[3]}"]}}, open(cluster, "w"))
    cmd = [f"{bin_dir}/syncfac-launch", "--cluster", cluster, "--program", f"{bin_dir}/convnet_mnist_distributed",
           "--max_wall_s", str(limit_s), "--", "--steps", str(cluster_steps), "--warmup", "20",
           "--batch_size", "128", "--threads", "1", "--isa", c["isa"], "--optimizer", "momentum",
           "--learning_rate", "0.01", "--replicas_to_aggregate", "2", "--seed", str(r),
           "--no_final_eval", "--no_progress", "--log_every", "1000", "--summary", summary]
    return cmd, {}, lambda: {"global_steps_per_s": first_line(summary)["examples_per_s"] / (R * BATCH)}
def cluster_tf(c, r):
    summary = f"{out}/cluster_tf_{c['isa']}_{r}.json"
    cmd = [py, "bench/peers/tf_cluster.py", "--workers", "2", "--summary", summary,
           "--replicas_to_aggregate", "2", "--steps", str(tf_steps), "--warmup", "20", "--batch", "128",
           "--lr", "0.01", "--threads", "1", "--inter_op_threads", str(tf_inter), "--seed", str(r),
           "--max_wall_s", str(limit_s)]
    env = {"ONEDNN_MAX_CPU_ISA": ONEDNN[c["isa"]], "TF_CPP_MIN_LOG_LEVEL": "2"}
    return cmd, env, lambda: {"global_steps_per_s": first_line(summary)["global_steps_per_s"]}
torch_ways = [("torch eager NCHW", False, False), ("torch eager channels-last", False, True),
              ("torch.compile NCHW", True, False), ("torch.compile channels-last", True, True)]
single_configs = [{"threads": t, "isa": isa} for isa in levels for t in (1, 2)]
cluster_configs = [{"cluster": "2 workers, R 2, 1 ps", "isa": isa} for isa in levels]
entries = []
for c in single_configs:
    entries.append((c, "syncfac", lambda c, r: single_syncfac(c, r)))
    entries += [(c, n, lambda c, r, a=a, b=b: single_torch(c, r, a, b)) for n, a, b in torch_ways]
for c in cluster_configs:
    entries += [(c, "syncfac", cluster_syncfac), (c, "TF SyncReplicasOptimizer", cluster_tf)]
taken = re.compile(r"address already in use|cannot publish this node|failed to bind", re.I)
for r, (c, name, make) in Bench.interleaved(rounds, entries):
    for attempt in range(3):
        cmd, env, figures = make(c, r)
        try:
            bench.run(name, c, r, cmd, figures, env=env, isa=c["isa"], timeout_s=limit_s + 60,
                      shown=[x for x in cmd if not x.startswith(out)])
            break
        except RuntimeError as e:
            if attempt == 2 or not taken.search(str(e)):
                raise
            print("bench: a port was taken; again on new ports", file=sys.stderr)
f = bench.facts
print(f"\nCPU: {f['cpu']} (levels {', '.join(f['cpu_isa_levels'])}), {f['nproc']} cores; commit {f['commit']};"
      f" {rounds} interleaved rounds; every run in {bench.results}\n")
rows, single = bench.table(single_configs, ["syncfac"] + [w[0] for w in torch_ways], "examples_per_s")
print("\n".join(rows) + "\n")
rows, cluster = bench.table(cluster_configs, ["syncfac", "TF SyncReplicasOptimizer"], "global_steps_per_s")
print("\n".join(rows) + "\n")
for label, x in {**single, **cluster}.items():
    print(f"{label}: {x['ratio']:.2f}x {x['peer']} -> target 2.0x {verdict(x, 2.0)}")
PY
