"""The bench scripts' reading of run summaries (--summary FILE, JSON)."""
import json
import statistics


def median_of(out, name, key, runs):
    """The median of `key` over the summaries out/name_1.json .. name_RUNS.json."""
    return statistics.median(json.load(open(f"{out}/{name}_{r}.json"))[key]
                             for r in range(1, runs + 1))
