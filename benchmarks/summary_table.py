"""Markdown tables of a main-job summary (`adwm quickstart` writes it): the family metrics of every estimator
and J against J_hat per policy, uncalibrated ADWM first.

    python benchmarks/summary_table.py runs/default/quickstart/summary.json
"""

from __future__ import annotations

import json
import sys

LABELS = {"adwm_sim": "ADWM, uncalibrated", "adwm": "ADWM, calibrated (needs the behaviour agents)"}


def order(names: list[str]) -> list[str]:
    first = [n for n in ("adwm_sim", "adwm") if n in names]
    return first + [n for n in names if n not in first]


def tables(summary: dict) -> str:
    metrics = summary["metrics"]
    ests = order([e for e, m in metrics.items() if m])
    lines = ["| estimator | Spearman | Kendall | nRMSE | regret@1 |", "|---|---|---|---|---|"]
    for e in ests:
        m = metrics[e]
        name = LABELS.get(e, e.removesuffix("_est").upper() + (", estimated behaviour" if e.endswith("_est") else ""))
        lines.append(
            f"| {name} | {m['spearman']:.2f} | {m['kendall']:.2f} | {m['nrmse']:.3f} | {m['regret_at_1']:.2f} |"
        )
    cols = order(list(summary["policies"][0]["estimates"]))
    lines += ["", "| policy | J (± SE) | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for p in summary["policies"]:
        vals = " | ".join(f"{p['estimates'][c]:.3f}" for c in cols)
        lines.append(f"| {p['name']} | {p['J_true']:.3f} ± {p['J_true_se']:.3f} | {vals} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(tables(json.load(open(sys.argv[1]))))
