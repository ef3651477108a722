"""notebooks/results.ipynb runs on a results folder and is committed without outputs."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest

from adwm.sweeps.report import write_csv

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "results.ipynb"


def test_notebook_is_stripped():
    nb = json.loads(NOTEBOOK.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


def test_notebook_draws_a_grid_folder(tmp_path, capsys, monkeypatch):
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
    monkeypatch.setenv("ADWM_GRID", str(tmp_path))
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        exec(compile("".join(cell["source"]), "results.ipynb", "exec"), namespace)
    out = capsys.readouterr().out
    assert "| adwm (full) | 0.55 [" in out and "| wis | NaN (2 failed)" in out
    assert len(namespace["fig"].axes) == 3  # one scatter per estimator


@pytest.mark.ci
@pytest.mark.slow
def test_notebook_executes_on_a_smoke_grid(tmp_path, monkeypatch):
    """The notebook as a user runs it (a Jupyter kernel of this environment, nbclient) on a grid that
    `adwm grid` made: two smoke runs sharing their agents, log and world model (about two minutes)."""
    import nbformat
    from nbclient import NotebookClient

    from adwm.cli import main

    spec = tmp_path / "smoke_grid.yaml"
    spec.write_text(
        f"name: smoke_grid\nout: {tmp_path / 'grid'}\noverrides: [experiment=smoke, ope.ci_resamples=50]\n"
        "axes:\n  variant:\n    full: []\n    no_action_guidance: [guidance.omega=0]\nseeds: [0]\nworkers: 1\n"
    )
    assert main(["grid", str(spec)]) == 0
    monkeypatch.setenv("ADWM_GRID", str(tmp_path / "grid"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "| adwm (full) |" in text and "| adwm (no_action_guidance) |" in text and "| fqe |" in text
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2  # the metric bars and the J-vs-J_hat scatters
