"""Compare two main-job summaries estimate by estimate: how many are bit-identical and the largest relative
difference of the others (e.g. before and after a change that must not move any number).

    python benchmarks/compare_summaries.py before/summary.json after/summary.json
"""

from __future__ import annotations

import json
import math
import sys


def compare(a: dict, b: dict) -> dict:
    same, diff, worst, truth_same = [], [], 0.0, True
    for pa, pb in zip(a["policies"], b["policies"], strict=True):
        if pa["name"] != pb["name"]:
            raise ValueError(f"different families: {pa['name']} against {pb['name']}")
        truth_same &= (pa["J_true"], pa["J_true_se"]) == (pb["J_true"], pb["J_true_se"])
        for est, x in pa["estimates"].items():
            y = pb["estimates"][est]
            if x == y or (math.isnan(x) and math.isnan(y)):
                same.append(est)
            else:
                diff.append(est)
                worst = max(worst, abs(x - y) / max(abs(x), 1e-300))
    return {
        "ground_truth_identical": truth_same,
        "bit_identical": sorted(set(same) - set(diff)),
        "differing": sorted(set(diff)),
        "n_identical": len(same),
        "n_differing": len(diff),
        "max_relative_difference": worst,
    }


if __name__ == "__main__":
    print(json.dumps(compare(json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))), indent=2))
