"""The bench scripts' reading of run summaries (--summary FILE, JSON)."""
import json
import statistics


def medians(out, runs):
    """med(name, key): the median of `key` over the summaries
    out/name_1.json .. name_RUNS.json."""
    def med(name, key):
        return statistics.median(json.load(open(f"{out}/{name}_{r}.json"))[key]
                                 for r in range(1, runs + 1))
    return med
