#!/usr/bin/env python3
"""The tables of bench/run_peers.sh from the summaries its runs left in OUT.

  report.py OUT ROUNDS RESULT_JSON

OUT holds single_{syncfac,torch_nchw,torch_nhwc}_tT_rR.json,
cluster_{syncfac,tf}_rR.json (one JSON line each), cpu, torch_version,
tf_version and load_{before,after}; prints markdown tables of medians,
spreads and ratios and writes every figure to RESULT_JSON.
"""
import json, os, statistics as st, sys
out, rounds, result_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
R, BATCH = 2, 128
def load(name):
    return [json.loads(open(f"{out}/{name}_r{r}.json").readline()) for r in range(1, rounds + 1)]
def span(v, fmt="{:,.0f}"):
    return f"{fmt.format(st.median(v))} ({fmt.format(min(v))}-{fmt.format(max(v))})"
def ratio_span(a, b):
    per_round = [x / y for x, y in zip(a, b)]
    return f"**{st.median(a) / st.median(b):.2f}x** ({min(per_round):.2f}-{max(per_round):.2f}x)"
cpu = open(f"{out}/cpu").read().split("\n")
tv, fv = open(f"{out}/torch_version").read().strip(), open(f"{out}/tf_version").read().strip()
print()
print(f"machine: {cpu[0]}, {cpu[1]}; torch {tv}, tensorflow {fv}")
for when in ("before", "after"):
    stamp, uptime = open(f"{out}/load_{when}").read().strip().split("\n")
    print(f"{when}: {stamp}, {uptime.strip()}")
print(f"medians of {rounds} interleaved rounds, (min-max) the spread; a ratio's spread is per round")
print()
print(f"| threads | syncfac ex/s | PyTorch {tv} eager NCHW | channels-last | syncfac / faster PyTorch layout |")
print("|---|---|---|---|---|")
result = {"rounds": rounds, "cpu": cpu[0], "torch": tv, "tf": fv, "single": {}, "cluster": {}}
for t in (1, 2):
    s = [x["examples_per_s"] for x in load(f"single_syncfac_t{t}")]
    a = [x["examples_per_s"] for x in load(f"single_torch_nchw_t{t}")]
    b = [x["examples_per_s"] for x in load(f"single_torch_nhwc_t{t}")]
    best = a if st.median(a) >= st.median(b) else b
    print(f"| {t} | {span(s)} | {span(a)} | {span(b)} | {ratio_span(s, best)} |")
    result["single"][t] = {"syncfac": s, "torch_nchw": a, "torch_channels_last": b,
                           "ratio": st.median(s) / st.median(best)}
sc = [x["examples_per_s"] / (R * BATCH) for x in load("cluster_syncfac")]
tf = [x["global_steps_per_s"] for x in load("cluster_tf")]
print()
print("| loopback cluster (2 workers, R = 2, 1 ps, batch 128, 1 thread per task) | global steps/s | examples/s |")
print("|---|---|---|")
print(f"| syncfac (chief, 2 workers, 1 PS shard) | {span(sc, '{:.1f}')} | {span([x * R * BATCH for x in sc])} |")
print(f"| TensorFlow {fv} SyncReplicasOptimizer (1 ps, 2 workers, worker 0 the chief) | "
      f"{span(tf, '{:.2f}')} | {span([x * R * BATCH for x in tf])} |")
print(f"| syncfac / TensorFlow | {ratio_span(sc, tf)} | |")
result["cluster"] = {"syncfac_global_steps_per_s": sc, "tf_global_steps_per_s": tf,
                     "ratio": st.median(sc) / st.median(tf)}
os.makedirs(os.path.dirname(os.path.abspath(result_file)), exist_ok=True)
json.dump(result, open(result_file, "w"), indent=1)
