"""W&B with `logger=wandb`, read back from the offline run files: one run per stage, grouped under the job,
the resolved config once; and no run at all with `logger=none` or `logger.mode=disabled`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from adwm.cli import main
from helpers import wandb_records


def _runs(root: Path) -> list[dict]:
    out = []
    for path in sorted(root.glob("**/offline-run-*/run-*.wandb")):
        records = wandb_records(path)
        kinds = Counter(r.WhichOneof("record_type") for r in records)
        (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        items = [i for r in records if r.HasField("history") for i in r.history.item]
        history = [json.loads(i.value_json) for i in items]
        keys = [i.key or i.nested_key[0] for i in items]  # a table or an image: its fields under its key
        out.append(
            {
                "group": run.run_group,
                "job_type": run.job_type,
                "name": run.display_name,
                "config": {i.key: json.loads(i.value_json) for i in run.config.update},
                "config_updates": kinds["config"],
                "finished": kinds["exit"] == 1,
                "history": dict(zip(keys, history)),
            }
        )
    return out


def test_quickstart_logs_one_run_per_stage_grouped_under_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert main(["quickstart", "experiment=smoke", f"run.root={tmp_path}", "logger=wandb"]) == 0
    runs = _runs(tmp_path)
    jobs = Counter(r["job_type"] for r in runs)
    # three agents, the world model, the results (the agents read the snapped state's text: no projector)
    assert jobs == {"train-agent": 3, "fit": 1, "quickstart": 1}
    assert {r["group"] for r in runs} == {"smoke-seed0"}
    assert all(r["finished"] for r in runs)  # each stage's run ends with its stage
    for r in runs:  # the resolved config once, at the start; not Lightning's module hyperparameters
        assert r["config_updates"] == 0 and r["config"]["experiment"] == "smoke"
        assert r["config"]["world_model"]["d_action"] == 16
        assert "tokenizer_json" not in json.dumps(r["config"]) and "actions" not in r["config"]
    (results,) = [r for r in runs if r["job_type"] == "quickstart"]
    summary = json.loads((tmp_path / "quickstart" / "summary.json").read_text())
    assert results["history"]["adwm/spearman"] == summary["metrics"]["adwm"]["spearman"]
    assert "estimates" in results["history"] and "j_vs_jhat" in results["history"]  # the table and the plot
    (fit,) = [r for r in runs if r["job_type"] == "fit"]
    assert any(k.startswith("final/") for k in fit["history"])
