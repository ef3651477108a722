"""`adwm credit`: which step of a logged episode lost it, by the evaluated agent's simulated value.

For each chosen episode of `data.log` and each of its steps t, in the world of `evaluate.world` (the
learned one by default; `oracle` replays the logged turns in the real environment):

* V(s_t): the mean of `credit.rollouts` simulated returns of the agent from the logged step (its logged
  turns as the history it reads, the horizon's steps left);
* the credit of the logged action: the value after the step, its logged reward counted in,
  r_t + gamma V(s_{t+1}), minus V(s_t) (V after the episode's last step is 0: it ended or the horizon was
  spent; a log cut short before either is marked `cut`);
* the agent's preferred action there (its most probable one; a writing agent's write) and its value
  Q(s_t, a*), simulated with that action first.

Values are normalised to [0, 1] by the range [low, high] of `credit.value_range`, or of the log's
discounted episode returns: v = clip((V - low) / (high - low), 0, 1); the credit is the normalised value
after the step minus the one before, in [-1, 1]. Rows go to `<credit.out>/credit.jsonl`, a line a step,
appended and flushed an episode at a time: a rerun with the same settings skips the episodes written,
and one with other settings is refused (another `credit.out`). A plot per episode goes to `plots/`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from adwm.data.schema import Episode, read_episodes
from adwm.policies.base import AgentState
from adwm.policies.config import PolicyConfig
from adwm.policies.factory import build_policy
from adwm.runtime.atomic import atomic_write_json
from adwm.runtime.cache import as_json
from adwm.runtime.progress import say
from adwm.simulation.registry import World, world_class
from adwm.simulation.worlds import logged_step_starts
from adwm.stages.config import CreditConfig


def chosen_episodes(episodes: list[Episode], ccfg: CreditConfig, gamma: float, log: str) -> list[int]:
    """The log indices of `credit.episodes`, or of the `n_episodes` episodes of lowest return (log order
    among ties)."""
    if ccfg.episodes:
        for k, i in enumerate(ccfg.episodes):
            if i >= len(episodes):
                raise ValueError(f"credit.episodes[{k}]: the log '{log}' has {len(episodes)} episodes, got index {i}")
        return list(dict.fromkeys(ccfg.episodes))
    returns = np.array([ep.discounted_return(gamma) for ep in episodes])
    return sorted(np.argsort(returns, kind="stable")[: ccfg.n_episodes].tolist())


def value_range(episodes: list[Episode], ccfg: CreditConfig, gamma: float, log: str) -> tuple[float, float]:
    if ccfg.value_range:
        return float(ccfg.value_range[0]), float(ccfg.value_range[1])
    returns = [ep.discounted_return(gamma) for ep in episodes]
    lo, hi = float(min(returns)), float(max(returns))
    if not hi > lo:
        raise ValueError(
            f"credit.value_range: every episode of '{log}' has the return {lo}, so the log gives no range to "
            "normalise values by; set credit.value_range=[low,high]"
        )
    return lo, hi


def preferred_actions(agent, states: list[AgentState], rng: np.random.Generator) -> list[str]:
    """The agent's most probable action in each state (its write, where it writes its actions)."""
    listed = [k for k, s in enumerate(states) if s.admissible and not agent.generates(s)]
    out: list[str | None] = [None] * len(states)
    if listed:
        for k, d in zip(listed, agent.log_distributions([states[k] for k in listed])):
            out[k] = states[k].admissible[int(np.argmax(d))]
    rest = [k for k in range(len(states)) if out[k] is None]
    if rest:
        for k, a in zip(rest, agent.act([states[k] for k in rest], [rng] * len(rest))):
            out[k] = a
    return out


def episode_credit(
    world: World, pcfg: PolicyConfig, agent, ep: Episode, rollouts: int, span: tuple[float, float]
) -> list[dict]:
    """One row a logged step of `ep` (module docstring)."""
    starts = logged_step_starts([ep])
    states = [AgentState(s.task, s.observation, s.history, s.admissible) for s in starts]
    best = preferred_actions(agent, states, np.random.default_rng((world.seed, 23)))
    many = [s for s in starts for _ in range(rollouts)]
    first = [None] * len(many) + [a for a in best for _ in range(rollouts)]
    returns = world.returns_from(pcfg, many + many, first).reshape(2, len(starts), rollouts).mean(-1)
    v, q_best = returns
    steps = len(ep.steps)
    cut = not ep.ended(steps - 1) and steps < world.horizon
    v_next = np.append(v[1:], 0.0)
    lo, hi = span
    norm = lambda x: float(np.clip((x - lo) / (hi - lo), 0.0, 1.0))  # noqa: E731
    rows = []
    for t, step in enumerate(ep.steps):
        after = step.reward + world.gamma * v_next[t]
        rows.append(
            {
                "t": t,
                "observation": step.observation,
                "action": step.action,
                "reward": step.reward,
                "V": norm(v[t]),
                "V_raw": float(v[t]),
                "credit": norm(after) - norm(v[t]),
                "preferred_action": best[t],
                "Q_preferred": norm(q_best[t]),
                "cut": bool(cut and t == steps - 1),
            }
        )
    return rows


def _settings(cfg: DictConfig, pcfg: PolicyConfig, span: tuple[float, float]) -> dict:
    ccfg = OmegaConf.to_container(cfg.credit)
    return as_json(
        {
            "log": cfg.data.log,
            "world": world_class(cfg.evaluate.world).settings(cfg),
            "world_model": cfg.evaluate.world_model,
            "policy": dataclasses.asdict(pcfg),
            "rollouts": ccfg["rollouts"],
            "value_range": list(span),
            "horizon": cfg.evaluate.simulate.horizon or cfg.env.max_steps,
            "seed": cfg.seed,
        }
    )


def _written(path: Path, key: str) -> set[int]:
    """The episodes `path` already holds for these settings; rows of other settings are refused."""
    done: set[int] = set()
    if not path.is_file():
        return done
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill: its episode is written again
        if row.get("settings") != key:
            raise ValueError(
                f"{path}:{n}: holds credit of other settings (world, agent, rollouts or range); set another "
                "credit.out, or remove the file"
            )
        done.add(int(row["episode"]))
    return done


def credit(cfg: DictConfig) -> Path:
    """Write the per-step credit of the chosen episodes; returns the JSONL path."""
    from adwm.stages.evaluate import _world_model_path, loaded_world
    from adwm.stages.evaluate_log import agent_policy

    ccfg: CreditConfig = OmegaConf.to_object(cfg.credit)
    log = str(cfg.data.log)
    if not Path(log).is_file():
        raise FileNotFoundError(f"data.log: no episode log at '{log}'")
    episodes = read_episodes(Path(log), env=cfg.env.name)
    base: PolicyConfig = OmegaConf.to_object(cfg.policy)
    free_form = not any(s.admissible for ep in episodes for s in ep.steps)
    if ccfg.agent:
        pcfg = agent_policy(base, ccfg.agent, "credit.agent", cfg.hub, free_form)
    else:  # a log without lists: the agent writes its actions, as in `adwm evaluate-log`
        pcfg = dataclasses.replace(base, mode="generate") if free_form and base.kind == "llm" else base
    gamma = cfg.env.gamma
    span = value_range(episodes, ccfg, gamma, log)
    chosen = chosen_episodes(episodes, ccfg, gamma, log)
    key = hashlib.sha1(json.dumps(_settings(cfg, pcfg, span), sort_keys=True).encode()).hexdigest()[:16]
    out = Path(ccfg.out)
    path = out / "credit.jsonl"
    done = _written(path, key)
    world = loaded_world(cfg, _world_model_path(OmegaConf.to_object(cfg.evaluate), log))
    agent = build_policy(pcfg, f"credit agent '{pcfg.name}'")
    out.mkdir(parents=True, exist_ok=True)
    from adwm.evaluation.plots import plot_credit

    for k, i in enumerate(chosen):
        if i in done:
            continue
        ep = episodes[i]
        rows = episode_credit(world, pcfg, agent, ep, ccfg.rollouts, span)
        meta = {"episode": i, "seed": ep.seed, "logged_by": ep.policy, "agent": pcfg.name, "settings": key}
        with open(path, "a") as f:
            f.write("".join(json.dumps({**meta, **r}) + "\n" for r in rows))
            f.flush()
        title = f"episode {i} (seed {ep.seed}, logged by {ep.policy}): V of {pcfg.name} in {cfg.evaluate.world}"
        plot_credit(rows, out / "plots" / f"episode_{i}.png", title, ccfg.drops)
        worst = min(rows, key=lambda r: r["credit"])
        say(
            f"credit [{k + 1}/{len(chosen)}] episode {i}: worst step {worst['t']} '{worst['action']}' {worst['credit']:+.3f}"
        )
    meta = {"value_range": list(span), "world": cfg.evaluate.world, "agent": pcfg.name, "episodes": chosen}
    atomic_write_json(out / "credit.meta.json", meta)
    return path
