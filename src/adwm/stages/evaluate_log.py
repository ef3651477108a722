"""`adwm evaluate-log`: estimate one's own agents from one's own log, with no behaviour agent and no ground truth.

The log (`data.log`, the documented episode schema) may carry no behaviour log-probabilities and no
admissible lists (agents that write free-form commands). The world model is fitted on it (or reused when
fitted with the same settings), then each agent of `evaluate_log.agents` (a local folder saved with
`save_pretrained`, a `.gguf` file, or a Hugging Face name when `hub=true`) gets its simulated rollouts
(and its projector with `ablation.reader=projector`). Calibration needs the behaviour agents and is off; ground truth is not needed.
Estimates accumulate in one file: a second run with other agents adds its entries, none is overwritten.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from adwm.data.schema import read_episodes
from adwm.runtime.atomic import read_json
from adwm.runtime.checks import require, safe_name
from adwm.runtime.hub import is_local_path
from adwm.runtime.parallel import resolve_workers
from adwm.stages.evaluate import evaluate_in_workers
from adwm.stages.pipeline import ensure_fitted


def agent_policy(base, source: str, where: str, hub: bool, free_form: bool):
    """The PolicyConfig of one agent source: `base` (the configured `policy`: prompt, temperature) with the
    agent's model, name and mode (free-form logs: the agent writes its actions)."""
    path = Path(source).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"{where}: GGUF file '{source}' does not exist")
        model, gguf, name = str(path.parent), path.name, path.stem
    elif path.exists() or is_local_path(source):
        if not path.is_dir():
            raise FileNotFoundError(f"{where}: model folder '{source}' does not exist")
        model, gguf, name = str(path), None, path.name
    else:
        if not hub:
            raise ValueError(
                f"{where}: '{source}' is not a local folder or .gguf file; as a Hugging Face name it needs "
                "downloads, which are off by default: set hub=true to let from_pretrained fetch it"
            )
        model, gguf, name = source, None, source.rsplit("/", 1)[-1]
    name = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)
    safe_name(name, where)
    mode = "generate" if free_form else base.mode
    return dataclasses.replace(
        base, name=name, model=model, gguf_file=gguf, tokenizer=None, eps=0.0, mode=mode, kind="llm"
    )


def agent_policies(cfg: DictConfig, free_form: bool) -> list:
    base = OmegaConf.to_object(cfg.policy)
    ecfg = OmegaConf.to_object(cfg.evaluate_log)
    require(
        bool(ecfg.agents),
        "evaluate_log.agents",
        ecfg.agents,
        "at least one agent: a model folder, a .gguf file or a Hugging Face name (with hub=true)",
    )
    out = [agent_policy(base, s, f"evaluate_log.agents[{k}]", cfg.hub, free_form) for k, s in enumerate(ecfg.agents)]
    names = [p.name for p in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    require(not dupes, "evaluate_log.agents", list(ecfg.agents), f"agents of distinct names (repeated: {dupes})")
    return out


def evaluate_log(cfg: DictConfig, overrides: list[str]) -> Path:
    """Fit (or reuse) the world model on `data.log`, then estimate every agent; returns the estimates' path."""

    given = {o.split("=", 1)[0].lstrip("+") for o in overrides}
    cfg = cfg.copy()
    run_dir = Path(cfg.run.dir)
    # this log's world model and projectors live in this run's folder, apart from the main job's
    if "run.fit" not in given:  # (the config is resolved: the world model's path is set with it)
        cfg.run.fit = str(run_dir / "fit")
        cfg.evaluate.world_model = cfg.project.world_model = str(run_dir / "fit" / "checkpoints" / "last.ckpt")
    if "project.dir" not in given:
        cfg.project.dir = str(run_dir / "project")
    log = cfg.data.log
    episodes = read_episodes(log, env=cfg.env.name)
    free_form = all(s.admissible is None for ep in episodes for s in ep.steps)
    policies = agent_policies(cfg, free_form)
    kind = "free-form (no admissible lists: agents write their actions)" if free_form else "with admissible lists"
    print(f"evaluate-log: {len(episodes)} episodes in '{log}', {kind}", file=sys.stderr)

    ensure_fitted(cfg, "evaluate-log")

    # the agents are the family; no behaviour agent (no calibration), no ground truth
    cfg.family.eps, cfg.family.optional = [], []
    cfg.family.off_path = policies
    cfg.evaluate.calibration = "none"
    cfg.evaluate.out = cfg.evaluate_log.out
    cfg.evaluate.ground_truth = str(run_dir / "no_ground_truth.json")  # never written: no metrics
    if free_form and cfg.guidance.eta > 0:
        print(
            "evaluate-log: continuation guidance needs candidate lists, which a free-form log has none of: "
            "off (policy guidance, omega, conditions every step on the written action)",
            file=sys.stderr,
        )
    out = evaluate_in_workers(cfg, resolve_workers(cfg.workers))
    _print_estimates(out, [p.name for p in policies])
    return out


def _print_estimates(path: Path, names: list[str]) -> None:

    estimates = read_json(path)["estimates"]
    print(f"{'agent':<24} {'J_hat':>8}  CI")
    for n in names:
        e = estimates[n]
        print(f"{n:<24} {e['J_hat']:>8.3f}  [{e['ci'][0]:.3f}, {e['ci'][1]:.3f}]")
