"""Would the log alone correct the simulator's bias? The held-out replay gap as a calibration.

    .venv/bin/python benchmarks/replay_correction.py [--grid runs/grid/heldout] [--onpolicy "runs/v0 state transition" ...]

`adwm fit` replays its held-out episodes with their logged actions and reports what the refitted heads pay
against what the log paid (`rollout_heads/after_return_simulated` / `_logged` in the fit's `metrics.json`).
That gap needs no behaviour agent, so a user with only a log could correct every simulated value by it:
scaled (J_hat_sim * logged / simulated) or shifted (J_hat_sim + logged - simulated). This script reads,
for each run, the uncalibrated estimates J_hat_sim beside the true values J and that fit's replay gap, and
writes the family metrics of the raw, scaled and shifted estimates:

* `--grid G`: every `runs/full-seed*` run of a grid (e.g. `adwm grid experiments/heldout.yaml`), J and
  `adwm_sim` from its `quickstart/summary.json`, the fit from that run's `run.fit`;
* `--onpolicy KEY`: an entry of `benchmarks/results/onpolicy_fidelity.json` (its J and J_hat_sim at the
  overrides it names), the fit under the entry's run.root (`<root>/fit`).

Writes `benchmarks/results/replay_correction.json` (one entry per run) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from adwm.evaluation.metrics import nrmse, spearman
from adwm.runtime.atomic import update_json
from adwm.runtime.provenance import load_run_config

RESULTS = Path(__file__).parent / "results"
OUT = RESULTS / "replay_correction.json"


def replay_gap(fit_dir: Path) -> tuple[float, float]:
    """(logged, simulated) mean discounted return of the fit's held-out replays after the heads' refit."""
    path = fit_dir / "metrics.json"
    metrics = json.loads(path.read_text())["metrics"]
    try:
        return metrics["rollout_heads/after_return_logged"], metrics["rollout_heads/after_return_simulated"]
    except KeyError as e:
        raise SystemExit(
            f"{path}: no {e.args[0]} (the fit ran without fit.rollout_heads or held-out episodes)"
        ) from None


def corrected(j: list[float], j_hat: list[float], logged: float, simulated: float) -> dict:
    """Spearman and nRMSE of the raw, scaled and shifted estimates against the true values."""
    j_true, raw = np.asarray(j), np.asarray(j_hat)
    rows = {"raw": raw, "scaled": raw * logged / simulated, "shifted": raw + logged - simulated}
    out = {"replay_logged": logged, "replay_simulated": simulated}
    for name, est in rows.items():
        out[name] = {"spearman": spearman(j_true, est), "nrmse": nrmse(j_true, est)}
    return out


def grid_runs(grid: Path) -> dict[str, dict]:
    out = {}
    for run in sorted(grid.glob("runs/full-seed*")):
        summary_path = run / "quickstart" / "summary.json"
        if not summary_path.exists():  # an unfinished run
            continue
        summary = json.loads(summary_path.read_text())
        j = [p["J_true"] for p in summary["policies"]]
        j_hat = [p["estimates"]["adwm_sim"] for p in summary["policies"]]
        out[str(run)] = {
            "seed": summary["seed"],
            **corrected(j, j_hat, *replay_gap(Path(load_run_config(summary["config"])["run"]["fit"]))),
        }
    return out


def onpolicy_runs(keys: list[str]) -> dict[str, dict]:
    recorded = json.loads((RESULTS / "onpolicy_fidelity.json").read_text())
    out = {}
    for key in keys:
        if key not in recorded:
            raise SystemExit(f"benchmarks/results/onpolicy_fidelity.json: no entry '{key}' (have {sorted(recorded)})")
        policies = recorded[key]["policies"].values()
        seed = next(int(o.split("=", 1)[1]) for o in recorded[key]["overrides"] if o.startswith("seed="))
        root = Path(key.split(" ", 1)[0])
        j, j_hat = [p["J"] for p in policies], [p["J_hat_sim"] for p in policies]
        out[f"onpolicy: {key}"] = {"seed": seed, **corrected(j, j_hat, *replay_gap(root / "fit"))}
    return out


def table(entries: dict[str, dict]) -> str:
    lines = [
        "| run | seed | replay: logged / simulated | raw | scaled | shifted |",
        "|---|---|---|---|---|---|",
    ]
    for name, e in entries.items():
        cells = " | ".join(f"{e[k]['spearman']:.2f} / {e[k]['nrmse']:.3f}" for k in ("raw", "scaled", "shifted"))
        lines.append(f"| {name} | {e['seed']} | {e['replay_logged']:.3f} / {e['replay_simulated']:.3f} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", type=Path, action="append", default=[], help="a grid's directory (runs/grid/NAME)")
    parser.add_argument("--onpolicy", action="append", default=[], help="a key of onpolicy_fidelity.json")
    args = parser.parse_args()
    if not args.grid and not args.onpolicy:
        parser.error("give at least one --grid or --onpolicy")
    entries = onpolicy_runs(args.onpolicy)
    for grid in args.grid:
        entries.update(grid_runs(grid))
    update_json(OUT, lambda obj: obj.update(entries))
    print(table(entries))


if __name__ == "__main__":
    main()
