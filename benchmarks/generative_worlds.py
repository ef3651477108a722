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
        "Fidelity on the run's validation episodes (open loop: under the logged actions from the logged start;",
        "closed: the model's own samples in the history, each text decoded after the one decoded before it;",
        "teacher: one step from the logged history, decoded after the logged observation). Exact match, text",
        "for text:",
        "",
        "| what writes the text | exact@1 | exact@5 | exact@10 |",
        "|---|---|---|---|",
    ]
    for label, name in (
        ("text decoder, closed loop (`decoded`)", "decoded"),
        ("text decoder, teacher (`decoded_teacher`)", "decoded_teacher"),
    ):
        lines.append(
            f"| {label} | " + " | ".join(_fmt(fit.get(f"fidelity/{name}_exact@{k}")) for k in (1, 5, 10)) + " |"
        )
    lines.append(
        "| autoregressive model, greedy (`fit/autoregressive/metrics.json`) | "
        + " | ".join(_fmt(ar.get(f"val_open_loop_exact@{k}")) for k in (1, 5, 10))
        + " |"
    )
    lines += [
        "",
        "State accuracy (the state key the environment exposes: builtin's room and inventory):",
        "",
        "| world | state@1 | state@5 | state@10 |",
        "|---|---|---|---|",
    ]
    rows = (
        ("text decoder, closed loop, no snapping", "decoded_"),
        ("text decoder, teacher", "decoded_teacher_"),
        ("learned model snapped to logged states", ""),
        ("snap ceiling (the true state encoded and snapped)", "snap_ceiling_"),
        ("control: nearest", "nearest_"),
        ("control: analogy", "analogy_"),
        ("control: stay", "stay_"),
    )
    for label, name in rows:
        lines.append(
            f"| {label} | " + " | ".join(_fmt(fit.get(f"fidelity/{name}state_acc@{k}")) for k in (1, 5, 10)) + " |"
        )
    lines += [
        "",
        "The text decoder alone (`decoder/...`): held-out transitions whose encoded next latent decodes after the"
        f" logged observation to exactly the next one {_fmt(fit.get('decoder/val_next_exact'))}, held-out replayed"
        f" samples {_fmt(fit.get('decoder/val_sampled_exact'))}; a latent decoded with no text before it"
        f" {_fmt(fit.get('decoder/train_roundtrip'))} (training texts); trained in"
        f" {_fmt(fit.get('decoder/seconds'))} s.",
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
