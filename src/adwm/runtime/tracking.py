"""A job's results as a W&B run of its own: metrics, the J-vs-J_hat table and plot, the config once.

The training stages log through Lightning (`runtime.trainer.build_logger`: one run per stage); the
results of `quickstart` (and of each grid run, which is a quickstart) join them in the same group, with
job_type naming the command.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from adwm.runtime.config import LoggerConfig
from adwm.runtime.trainer import job_group, wandb_mode


def log_results_run(config: dict[str, Any], summary: dict, plot: Path | None, job_type: str, name: str) -> None:
    """One W&B run for `summary` (a quickstart summary: metrics per estimator, policies with their
    estimates, timings) by the resolved config's own `logger` settings: none unless `logger=wandb`."""
    logger = LoggerConfig(**config.get("logger", {}))
    if logger.name != "wandb":
        return
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    # as configured; the environment wins (as in wandb itself), and a W&B sweep agent logs to its server
    mode = "online" if os.environ.get("WANDB_SWEEP_ID") and not os.environ.get("WANDB_MODE") else wandb_mode(logger)
    wb = wandb.init(
        project=logger.project,
        entity=logger.entity,
        group=job_group(logger, config),
        job_type=job_type,
        name=name,
        tags=list(logger.tags),
        config=config,
        dir=str(Path(config["run"]["dir"])),
        mode=mode,
        reinit="create_new",
    )
    flat = {f"{est}/{m}": v for est, ms in summary["metrics"].items() for m, v in ms.items()}
    wb.log(flat | {f"timings/{k}": v for k, v in summary.get("timings_s", {}).items()})
    table = wandb.Table(columns=["policy", "estimator", "J_true", "J_hat"])
    for p in summary["policies"]:
        for est, v in p["estimates"].items():
            table.add_data(p["name"], est, p.get("J_true"), v)
    wb.log({"estimates": table})
    if plot is not None and plot.is_file():
        wb.log({"j_vs_jhat": wandb.Image(str(plot))})
    wb.finish()
