#!/usr/bin/env bash
# The ResNet-20 training step against PyTorch 2.x (issue 35 item 4;
# docs/benchmarks.md, "ResNet-20 against PyTorch"), under the protocol of
# docs/benchmarks.md (bench/protocol.py): the same model
# (examples/models/resnet20.json; bench/peers/torch_convnet.py --model
# resnet20), data (Fashion-MNIST), batch (128), optimizer (momentum SGD, lr
# 0.05) and thread count (1 and 2), STEPS steps of which the first WARMUP
# are left out, at every instruction-set level the CPU has (syncfac --isa L
# beside PyTorch with ATEN_CPU_CAPABILITY=L). PyTorch runs four ways, eager
# and torch.compile, NCHW and channels-last; the faster of them (by median)
# is the peer. Rounds are interleaved; one JSON line per run goes to
# bench/results/resnet_vs_torch.jsonl; then the table of every round, the
# medians and the ratios, and whether the 1.5x target is met.
#
#   bench/run_resnet_vs_torch.sh [rounds=3]
#   env: SYNCFAC_BIN_DIR (build/bin), STEPS (60), WARMUP (10),
#        LEVELS (the CPU's: "avx2 avx512" or "avx2")
. "$(dirname "$0")/bench_lib.sh"
rounds=${1:-3}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench: rounds '$rounds' is not a positive integer" >&2; exit 2; }
bin_dir=${SYNCFAC_BIN_DIR:-build/bin}
steps=${STEPS:-60}
warmup=${WARMUP:-10}
need_built "$bin_dir/convnet_mnist_single"
py=$(bench/peers/venv.sh torch)
scratch_dir
python3 - "$out" "$rounds" "$bin_dir" "$py" "$steps" "$warmup" "${LEVELS:-}" <<'PY'
import json, sys
sys.path.insert(0, "bench")
from protocol import Bench, verdict
out, rounds, bin_dir, py, steps, warmup = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
bench = Bench("resnet_vs_torch")
levels = sys.argv[7].split() or bench.facts["cpu_isa_levels"]
def syncfac(t, isa, r):
    summary = f"{out}/syncfac_{t}_{isa}_{r}.json"
    cmd = [f"{bin_dir}/convnet_mnist_single", "--model_file", "examples/models/resnet20.json",
           "--steps", str(steps), "--warmup", str(warmup), "--batch_size", "128",
           "--optimizer", "momentum", "--learning_rate", "0.05", "--threads", str(t),
           "--isa", isa, "--seed", str(r), "--eval_every", "0", "--no_final_eval",
           "--no_progress", "--log_every", "1000", "--summary", summary]
    return cmd, {}, lambda: {"examples_per_s": json.load(open(summary))["examples_per_s"]}
def torch(t, isa, r, compiled, channels_last):
    summary = f"{out}/torch_{t}_{isa}_{r}_{compiled}_{channels_last}.json"
    cmd = [py, "bench/peers/torch_convnet.py", "--model", "resnet20", "--steps", str(steps),
           "--warmup", str(warmup), "--batch", "128", "--optimizer", "momentum", "--lr", "0.05",
           "--threads", str(t), "--seed", str(r), "--summary_json", summary]
    cmd += ["--compile"] * compiled + ["--channels_last"] * channels_last
    # torch.compile's kernels cached per level: a cache shared between
    # levels crashed it (malloc: unaligned tcache chunk).
    env = {"OMP_NUM_THREADS": str(t), "ATEN_CPU_CAPABILITY": isa, "TORCHINDUCTOR_CACHE_DIR": f"{out}/inductor_{isa}"}
    return cmd, env, lambda: {"examples_per_s": json.loads(open(summary).read().splitlines()[-1])["examples_per_s"]}
peers = [("torch eager NCHW", False, False), ("torch eager channels-last", False, True),
         ("torch.compile NCHW", True, False), ("torch.compile channels-last", True, True)]
configs = [{"threads": t, "isa": isa} for isa in levels for t in (1, 2)]
entries = []
for c in configs:
    entries.append((c, "syncfac", None))
    entries += [(c, name, (compiled, last)) for name, compiled, last in peers]
for r, (c, name, how) in Bench.interleaved(rounds, entries):
    t, isa = c["threads"], c["isa"]
    cmd, env, figures = syncfac(t, isa, r) if how is None else torch(t, isa, r, *how)
    bench.run(name, c, r, cmd, figures, env=env, isa=isa,
              shown=[x for x in cmd if not x.startswith(out)])
rows, ratios = bench.table(configs, ["syncfac"] + [p[0] for p in peers], "examples_per_s")
f = bench.facts
print(f"\nCPU: {f['cpu']} (levels {', '.join(f['cpu_isa_levels'])}), {f['nproc']} cores; commit {f['commit']};"
      f" {rounds} interleaved rounds of {steps} steps ({warmup} warm-up); every run in {bench.results}\n")
print("\n".join(rows))
print()
for label, x in ratios.items():
    print(f"{label}: {x['ratio']:.2f}x {x['peer']} -> target 1.5x {verdict(x, 1.5)}")
PY
