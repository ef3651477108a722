"""Are the simulated rollouts of the family's agents real? Their own actions replayed in the real environment.

    .venv/bin/python benchmarks/onpolicy_fidelity.py [--rules none,outcome,state] [--label L] [overrides ...]
    # e.g. seed=3 run.root=runs/v3 evaluate.calibration=none

Needs a finished `adwm quickstart` (or fit and ground truth) under run.root. For each snapping rule
(`evaluate.diffusion.snap_world`) and each policy of the family, simulates the policy as `adwm evaluate`
does (uncalibrated), then replays each rollout's simulated actions in the real environment from its
start's seed, and writes beside the true value J and J_hat_sim:

* `real_return`: the mean discounted return the real environment pays for the simulated action
  sequences (until the simulated or the real episode ends): what the simulated actions are worth;
* `refused`: the share of those actions the real environment refused (builtin says so; NaN elsewhere):
  actions read off a state the real world is not in;
* `state_acc@k`: the share of rollouts whose simulated state after k steps agrees with the real one by
  the environment's state key (envs.registry.state_key), the on-policy twin of `adwm fit`'s replays;
* `kept_logged` / `kept_novel` (over `steps_logged` / `steps_novel` steps): of the simulated steps taken
  in step with the real world (the same state key before the step), the share still in step after it,
  where the logged episode of the rollout's world took that action in a state of that key, and where it
  did not (a move whose outcome the log never showed in that world);
* `gap_*`: J_hat_sim - real_return split by where the difference arises (summed over rollouts, divided by
  their number, so the four add up to it): steps in step with the real world before them, on an action the
  rollout had not taken before (`in_step_first`) or had (`in_step_again`: the log never pays a milestone
  twice), steps out of step (`off_step`), and what the simulation paid after the real episode ended
  (`after_real_end`).

Writes `benchmarks/results/onpolicy_fidelity.json`, one entry per run.root and rule (and label: a variant's
overrides, e.g. `--label transition evaluate.diffusion.snap_by_transition=true`).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from adwm.config import load_config
from adwm.envs.registry import make_env, state_key
from adwm.evaluation.family import family_policies
from adwm.evaluation.metrics import family_metrics
from adwm.runtime.atomic import read_json, update_json
from adwm.simulation import simulate as sim
from adwm.stages import evaluate as ev

OUT = Path(__file__).parent / "results" / "onpolicy_fidelity.json"
KS = (1, 5, 10)
# where J_hat_sim - real_return arises: steps in step with the real world before them (an action the rollout
# took before or not), steps out of step, and simulated steps after the real episode ended
GAP_KINDS = ("in_step_first", "in_step_again", "off_step", "after_real_end")


def _recorded(log: list):
    """simulate's transition, recording the chosen actions, the snapped states and the drawn ends."""
    plain = sim._transition

    def transition(wm, z_raw, c, a, ids, worlds, state, gen, cfg, reward_range):
        z_next, reward, done, index = plain(wm, z_raw, c, a, ids, worlds, state, gen, cfg, reward_range)
        nearest = wm.proposal_bank.nearest(z_next) if index is None else index
        log.append((ids.clone(), nearest, done.clone(), reward.clone()))
        return z_next, reward, done, index

    return transition


def _logged_moves(episode, key) -> set:
    """The (state key, action) pairs the logged episode took in its world."""
    return {(key(step.observation), step.action) for step in episode.steps}


def measure(cfg, rule: str) -> dict:
    ecfg = OmegaConf.to_object(cfg.evaluate)
    ecfg = replace(ecfg, simulate=replace(ecfg.simulate, snap_world=rule))
    if ecfg.simulate.n_rollouts > ecfg.simulate.batch_size:  # the recorded steps are one batch's
        raise SystemExit("onpolicy_fidelity: needs evaluate.simulate.n_rollouts <= evaluate.simulate.batch_size")
    loaded = ev._loaded(cfg, ev._world_model_path(ecfg, cfg.data.log))
    wm, dm = loaded["wm"], loaded["dm"]
    starts = sim.logged_starts(dm)
    episode_of = {(ep.task, ep.steps[0].observation): ep for ep in dm.train_episodes + dm.val_episodes}
    truth = read_json(Path(cfg.ground_truth.out))
    key, env = state_key(cfg.env.name), make_env(OmegaConf.to_object(cfg.env))
    horizon = ecfg.simulate.horizon or cfg.env.max_steps
    out = {}
    for pcfg in family_policies(OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.family)):
        log: list = []
        plain = sim._transition
        sim._transition = _recorded(log)
        try:
            reader, continuation = ev.simulation_inputs(cfg, wm, dm, pcfg, loaded["cache"])
            guidance = OmegaConf.to_object(cfg.guidance)
            returns = sim.simulate(
                wm,
                pcfg,
                reader,
                starts,
                ecfg.simulate,
                guidance,
                cfg.env.gamma,
                horizon,
                cfg.seed,
                continuation,
                sim.logged_reward_range(dm),
            )
        finally:
            sim._transition = plain
        picked = np.random.default_rng(cfg.seed).integers(0, len(starts), size=ecfg.simulate.n_rollouts)
        real, refused, acc = [], [], {k: [] for k in KS}
        kept = {"logged": [], "novel": []}
        gap = dict.fromkeys(GAP_KINDS, 0.0)
        for b, i in enumerate(picked):
            episode = episode_of[(starts[i].task, starts[i].observation)]
            moves = _logged_moves(episode, key)
            env.reset(episode.seed)
            total, discount = 0.0, 1.0
            real_key = sim_key = key(starts[i].observation)
            real_done, taken = False, set()
            for t, (ids, nearest, done, reward) in enumerate(log):
                action = wm.actions[int(ids[b])]
                paid = discount * float(reward[b])
                if real_done:  # the simulated episode goes on where the real one ended
                    gap["after_real_end"] += paid
                else:
                    step = env.step(action)
                    kind = "logged" if (real_key, action) in moves else "novel"
                    in_step = real_key == sim_key  # so far: does the simulated step keep it?
                    real_key, sim_key = key(step.observation), key(wm.proposal_bank.texts[int(nearest[b])])
                    if in_step:
                        kept[kind].append(real_key == sim_key)
                    where = "off_step" if not in_step else "in_step_again" if action in taken else "in_step_first"
                    gap[where] += paid - discount * step.reward
                    total += discount * step.reward
                    if "admissible_action" in step.info:
                        refused.append(not step.info["admissible_action"])
                    if t + 1 in acc:
                        acc[t + 1].append(real_key == sim_key)
                    real_done = step.done
                taken.add(action)
                discount *= cfg.env.gamma
                if bool(done[b]):
                    break
            real.append(total)
        out[pcfg.name] = {
            "J": truth[pcfg.name]["J"],
            "J_hat_sim": float(returns.mean()),
            "real_return": float(np.mean(real)),
            "refused": float(np.mean(refused)) if refused else float("nan"),
            **{f"state_acc@{k}": float(np.mean(v)) for k, v in acc.items() if v},
            **{f"kept_{kind}": float(np.mean(v)) if v else float("nan") for kind, v in kept.items()},
            **{f"steps_{kind}": len(v) for kind, v in kept.items()},
            **{f"gap_{where}": v / len(picked) for where, v in gap.items()},
        }
    names = list(out)
    metrics = family_metrics([out[n]["J"] for n in names], [out[n]["J_hat_sim"] for n in names])
    return {"policies": out, "spearman": metrics["spearman"], "nrmse": metrics["nrmse"]}


def main(argv: list[str]) -> None:
    rules, label = ["none", "outcome", "state"], ""
    while argv[:1] in (["--rules"], ["--label"]):
        if argv[0] == "--rules":
            rules = argv[1].split(",")
        else:
            label = " " + argv[1]
        argv = argv[2:]
    cfg = load_config(argv)
    for rule in rules:
        result = measure(cfg, rule)
        entry = f"{cfg.run.root} {rule}{label}"
        update_json(OUT, lambda d, r=result, e=entry: d.update({e: {"overrides": argv, **r}}))
        print(rule, {k: result[k] for k in ("spearman", "nrmse")})
        for name, row in result["policies"].items():
            print(f"  {name}: " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
