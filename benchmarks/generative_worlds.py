"""The generative worlds beside the default and the controls on one run: accuracy of the uncalibrated estimate
and the fidelity of the text each world writes. Writes a markdown table (docs/results/generative.md).

    python benchmarks/generative_worlds.py --run runs/decoded/seed0 --out docs/results/generative.md \
        "decoded reader (diffusion, no snap)=quickstart/summary.json" "autoregressive=ar/estimates.json" ...

Each `label=path` names a results file under the run: a quickstart `summary.json` (its `adwm` row) or an
`adwm evaluate` results file (its `metrics`). The fidelity columns are read from the fit's metrics.json
(the text decoder's) and from `fit/autoregressive/metrics.json` (the autoregressive model's).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path


def _metrics(path: Path) -> dict:
    data = json.loads(path.read_text())
    if "metrics" in data and "adwm" in data["metrics"]:
        return data["metrics"]["adwm"]
    return data["metrics"]


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="the run folder (runs/<experiment>/seed<seed>)")
    ap.add_argument("--out", required=True)
    ap.add_argument("rows", nargs="+", help="label=results file under the run")
    args = ap.parse_args()
    run = Path(args.run)
    fit = json.loads((run / "fit" / "metrics.json").read_text())["metrics"]
    ar_path = run / "fit" / "autoregressive" / "metrics.json"
    ar = json.loads(ar_path.read_text()) if ar_path.is_file() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [
        f"# Generative worlds on `{run}`",
        "",
        f"Tabulated at commit {commit} (the runs were made by the code of their own commands) by `python benchmarks/generative_worlds.py --run {run} --out {args.out} "
        + " ".join(f'"{r}"' for r in args.rows)
        + "`. Uncalibrated estimates (`evaluate.calibration=none`); Spearman and nRMSE of J_hat against the "
        "run's on-policy ground truth over its family of seven agents. One seed: a reading, not a result.",
        "",
        "| world | Spearman | nRMSE |",
        "|---|---|---|",
    ]
    for row in args.rows:
        label, _, rel = row.rpartition("=")  # a label may hold "=" (a config key), a path does not
        m = _metrics(run / rel)
        lines.append(f"| {label} | {_fmt(m.get('spearman'))} | {_fmt(m.get('nrmse'))} |")
    lines += [
        "",
        "Fidelity of the written text on the run's validation episodes (exact match, text for text; open loop",
        "= under the logged actions from the logged start):",
        "",
        "| what writes the text | exact@1 | exact@5 | exact@10 | training round trip |",
        "|---|---|---|---|---|",
        "| text decoder on the world model's closed-loop samples (`fidelity/decoded_exact@k`) | "
        + " | ".join(_fmt(fit.get(f"fidelity/decoded_exact@{k}")) for k in (1, 5, 10))
        + f" | {_fmt(fit.get('decoder/train_roundtrip'))} |",
        "| autoregressive model, greedy (`fit/autoregressive/metrics.json`) | "
        + " | ".join(_fmt(ar.get(f"val_open_loop_exact@{k}")) for k in (1, 5, 10))
        + " | - |",
        "",
        "State accuracy (the state key the environment exposes) of the latent worlds, for reference: decoded "
        f"{_fmt(fit.get('fidelity/decoded_state_acc@10'))}, nearest-snapped "
        f"{_fmt(fit.get('fidelity/nearest_state_acc@10'))}, snap ceiling "
        f"{_fmt(fit.get('fidelity/snap_ceiling_state_acc@10'))} at k = 10.",
        "",
    ]
    if ar:
        lines.append(
            f"The autoregressive model: {ar['parameters']} parameters, {ar['vocabulary']} pieces, trained in "
            f"{ar['seconds']} s."
        )
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
