"""notebooks/results.ipynb runs on a results folder and is committed without outputs."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

from adwm.sweeps.report import write_csv

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "results.ipynb"


def test_notebook_is_stripped():
    nb = json.loads(NOTEBOOK.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


def test_notebook_draws_a_grid_folder(tmp_path, capsys):
    matplotlib.use("Agg")
    metrics, estimates = [], []
    for seed in (0, 1):
        for row, rho in [("adwm (full)", 0.5 + 0.1 * seed), ("fqe", 0.9), ("wis", float("nan"))]:
            metrics.append(
                {
                    "row": row,
                    "estimator": row.split()[0],
                    "seed": seed,
                    "spearman": rho,
                    "nrmse": 0.2,
                    "regret_at_1": 0.0,
                }
            )
            for k, j in enumerate([0.1, 0.3, 0.5]):
                estimates.append(
                    {"estimator": row.split()[0], "seed": seed, "policy": f"p{k}", "J_true": j, "J_hat": j + 0.05}
                )
    write_csv(tmp_path / "metrics.csv", metrics)
    write_csv(tmp_path / "estimates.csv", estimates)
    nb = json.loads(NOTEBOOK.read_text())
    namespace: dict = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"]).replace('Path("../runs/grid/ablations")', f"Path({str(tmp_path)!r})")
        exec(compile(src, "results.ipynb", "exec"), namespace)
    out = capsys.readouterr().out
    assert "| adwm (full) | 0.55 [" in out and "| wis | NaN (2 failed)" in out
    assert len(namespace["fig"].axes) == 3  # one scatter per estimator
