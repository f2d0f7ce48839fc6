"""Checks a chief's --summary file of the launcher tests (mpirun_cluster.sh,
slurm_cluster.sh): its global step, workers and PS shards.

    python3 check_summary.py FILE STEP WORKERS PS_TASKS LABEL
"""
import json
import sys

path, step, workers, ps_tasks, label = sys.argv[1:6]
s = json.load(open(path))
for key, want in (("global_step", step), ("workers", workers),
                  ("ps_tasks", ps_tasks)):
    got = s.get(key)
    if got != int(want):
        sys.exit("FAIL: %s: %s is %r, expected %s" % (label, key, got, want))
print("%s: global_step %s, workers %s, ps_tasks %s"
      % (label, step, workers, ps_tasks))
