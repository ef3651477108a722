"""`adwm ope`: every classic baseline for every policy of the family, from the behaviour log.

Per policy: the evaluated policy's exact distributions on the logged states,
the importance weights against the logged (privileged) behaviour log-probs and, as `<name>_est`,
against a behaviour policy estimated on the log (ope/behaviour.py; the only weights a log without
behaviour probabilities allows),
the direct-method regression and FQE on (state, action) features, then each
estimator's value, effective sample size, flag and bootstrap CI (resampling
unit: the logged episode). Results are written atomically after each policy;
a rerun with the same settings skips the policies already estimated.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from adwm.data.schema import read_episodes
from adwm.evaluation.family import family_policies
from adwm.evaluation.ground_truth import true_values
from adwm.evaluation.metrics import family_metrics
from adwm.ope import SIMULATED, build_estimators
from adwm.ope.behaviour import fit_behaviour
from adwm.ope.config import OPEConfig
from adwm.ope.features import StepFeatures, default_text_model, sentence_embeddings, world_model_embeddings
from adwm.ope.linear_q import QDataset, Ridge, fit_fqe, fit_return_regression
from adwm.ope.logged import (
    ScoreCache,
    chosen_log_probs,
    logged_actions,
    logged_states,
    ope_data,
    policy_distributions,
    require_candidates,
    same_policy,
    writes,
    writing_log_probs,
)
from adwm.ope.simulated import SimulatedValues, sample_steps, simulated_q_values
from adwm.policies.loading import model_fingerprint
from adwm.runtime.atomic import read_json, update_json
from adwm.runtime.cache import as_json, entry_matches
from adwm.runtime.checkpoints import load_checkpoint
from adwm.runtime.faults import reached
from adwm.runtime.progress import bar, say


def _embedder(cfg: OPEConfig):
    if cfg.features == "text":
        model = cfg.text_model or default_text_model()
        return lambda texts: sentence_embeddings(texts, model)
    from adwm.models.world_model import WorldModelModule

    path = Path(cfg.world_model)
    if not path.is_file():
        raise FileNotFoundError(f"ope.world_model: no world model checkpoint at '{path}' (features=world_model)")
    wm = load_checkpoint(WorldModelModule, path, "ope.world_model").eval()
    return lambda texts: world_model_embeddings(texts, wm)


def run_baselines(cfg: DictConfig, progress: bool = True) -> Path:
    """Estimate every policy of the family with every configured baseline; returns the results JSON path."""
    ocfg: OPEConfig = OmegaConf.to_object(cfg.ope)
    estimators = build_estimators(ocfg.estimators, ocfg.clip)
    if ocfg.estimated_behaviour:  # `<name>_est`: the weighted baselines on the estimated behaviour policy
        estimators += [replace(e, name=f"{e.name}_est") for e in estimators if e.uses_weights() and e.clip is None]
    family = family_policies(OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.family))
    behaviour = OmegaConf.to_object(cfg.collect).behaviour
    log = Path(ocfg.log)
    out = Path(ocfg.out)
    results: dict = read_json(out) if out.is_file() else {}
    done = results.setdefault("estimates", {})
    common = {
        "log": str(log),
        "log_mtime": log.stat().st_mtime_ns if log.is_file() else None,
        "ope": asdict(ocfg),
        "gamma": cfg.env.gamma,
        "seed": cfg.seed,
    }
    if ocfg.features == "world_model" and Path(ocfg.world_model).is_file():
        common["world_model_mtime"] = Path(ocfg.world_model).stat().st_mtime_ns
    simulating = any(e.requires() == SIMULATED for e in estimators)
    if simulating:  # the world the agent is simulated in, as `adwm evaluate` builds it
        from adwm.simulation.registry import world_class
        from adwm.stages.evaluate import _world_model_path

        wm_path = _world_model_path(OmegaConf.to_object(cfg.evaluate), cfg.data.log)
        common["world"] = as_json(world_class(cfg.evaluate.world).settings(cfg))
        common["world"] |= {"path": str(wm_path), "mtime": wm_path.stat().st_mtime_ns}
        common["world"]["simulate"] = OmegaConf.to_container(cfg.evaluate.simulate)
    ctx = None
    shown = bar(len(family), "baselines", "policy")
    for k, pcfg in enumerate(family):
        shown.update(1)
        settings = {**common, "policy": asdict(pcfg), "weights": model_fingerprint(pcfg.model)}
        if entry_matches(done.get(pcfg.name), settings):
            continue
        start = time.time()  # the first policy run also pays what every policy shares (features, behaviour fit)
        if ctx is None:
            models = any(e.requires() is not None for e in estimators)
            estimated = any(e.name.endswith("_est") for e in estimators)  # none when no weighted one is asked
            ctx = _Context(
                ocfg, log, cfg.env.gamma, cfg.env.max_steps, Path(ocfg.scores), models, estimated, cfg.env.name
            )
            ctx.full = cfg if simulating else None
        identical = {b.policy.name for b in behaviour if same_policy(b.policy, pcfg)}
        done[pcfg.name] = {**ctx.estimate(pcfg, estimators, cfg.seed, identical), "settings": settings}
        done[pcfg.name]["seconds"] = round(time.time() - start, 3)
        entry = done[pcfg.name]
        update_json(out, lambda stored, n=pcfg.name, e=entry: stored.setdefault("estimates", {}).__setitem__(n, e))
        reached("ope.policy")
        if progress:
            vals = "  ".join(f"{n}={v['J_hat']:.3f}" for n, v in done[pcfg.name]["estimators"].items())
            say(f"ope [{k + 1}/{len(family)}] {pcfg.name}: {vals}")
    shown.close()
    names = [p.name for p in family]
    j = true_values(cfg.ground_truth.out, names)

    def finalize(results: dict) -> None:
        # results only grow: entries of policies another run estimated into this file stay; `family` names
        # this run's policies, the ones the metrics are about
        results["family"], results["resampling_unit"] = names, "episode"
        results.pop("metrics", None)
        if j is not None:
            est = results["estimates"]
            results["metrics"] = {
                e.name: family_metrics(j, [est[n]["estimators"][e.name]["J_hat"] for n in names]) for e in estimators
            }

    update_json(out, finalize)
    return out


class _Context:
    """What every policy shares: the log, its states, features, the DM regression and the score cache."""

    def __init__(
        self,
        cfg: OPEConfig,
        log: Path,
        gamma: float,
        horizon: int,
        folder: Path,
        models: bool,
        estimated: bool,
        env: str,
    ) -> None:
        episodes = read_episodes(log, privileged=True, env=env)
        if cfg.max_episodes:
            episodes = episodes[: cfg.max_episodes]
        self.cfg, self.gamma, self.episodes = cfg, gamma, episodes
        self.states, self.log = logged_states(episodes), str(log)
        self.actions = logged_actions(episodes)
        st = log.stat()
        self.scores = ScoreCache(folder, f"{log.resolve()}:{st.st_size}:{st.st_mtime_ns}:{len(episodes)}")
        self.features = self.ds = self.ridge = self.behaviour = None
        self.full = None  # the composed config, where the world model's action values are simulated
        self.starts = None
        if models or estimated:
            self.features = StepFeatures(self.states, self.actions, horizon, _embedder(cfg))
        if estimated:  # one behaviour model per log, fitted on every logged step
            self.behaviour = fit_behaviour(self.features, self.actions, cfg.behaviour_l2, cfg.behaviour_iterations)
            steps = [s for e in episodes for s in e.steps]
            logged = np.array([np.nan if s.behavior_logprob is None else s.behavior_logprob for s in steps])
            known = ~np.isnan(logged)
            self.behaviour_info = {
                "nll": round(self.behaviour.nll, 4),
                "evaluations": self.behaviour.evaluations,
                "logged_steps_with_behaviour_logprob": int(known.sum()),
                # how far the estimate is from the logged probabilities, where the log has them
                "mean_abs_logprob_gap": float(np.abs(self.behaviour.log_probs[known] - logged[known]).mean())
                if known.any()
                else None,
            }
        if models:
            ep = np.repeat(np.arange(len(episodes)), [len(e.steps) for e in episodes])
            t = np.concatenate([np.arange(len(e.steps)) for e in episodes])
            last = np.append(ep[1:] != ep[:-1], True)
            rewards = np.array([s.reward for e in episodes for s in e.steps])
            self.ds = QDataset(self.features.logged(self.actions), rewards, ep, t, last)
            self.ridge = Ridge(self.ds.phi, cfg.ridge)

    def estimate(self, pcfg, estimators, seed: int, identical: set[str]) -> dict:
        writing = writes(pcfg)
        if not writing or pcfg.eps > 0:  # a choice from the list, or a uniform branch over it
            require_candidates(self.states, self.log, pcfg.name)
        if writing:  # the agent writes its action: probabilities of the logged texts, sampled expectations
            log_pi = writing_log_probs(pcfg, self.states, self.actions, self.scores)
        else:
            dists = policy_distributions(pcfg, self.states, self.scores)
            log_pi = chosen_log_probs(self.states, self.actions, dists)
        data = ope_data(self.episodes, log_pi, self.gamma, identical)
        info = {}
        if self.ds is not None:
            if writing:
                samples = self.scores.samples(pcfg, self.states, self.cfg.written_samples, seed)
                phi_pi = self.features.expected_written(samples, pcfg.eps)
            else:
                phi_pi = self.features.expected(dists)
            data.q["dm"] = fit_return_regression(self.ds, phi_pi, self.gamma, self.ridge)
            data.q["fqe"], info = fit_fqe(self.ds, phi_pi, self.gamma, self.ridge, self.cfg.fqe_iterations)
            if any(e.requires() == SIMULATED for e in estimators):
                data.q[SIMULATED], simulated = self.simulated(pcfg, data.q["fqe"], seed)
        estimated = None
        if self.behaviour is not None:
            estimated = ope_data(self.episodes, log_pi, self.gamma, behaviour=self.behaviour.log_probs)
            estimated.q = data.q
        out = {}
        for e in estimators:
            on = estimated if e.name.endswith("_est") else data
            d = e.diagnose(on)
            ci = e.interval(on, 1 - self.cfg.ci_level, self.cfg.ci_resamples, seed)
            out[e.name] = {"J_hat": d.value, "ci": [ci["low"], ci["high"]], "ess": d.ess, "flag": d.flag}
        result = {"estimators": out, "n_episodes": data.n, "fqe": info}
        if SIMULATED in data.q:
            result["simulated"] = simulated
        if self.behaviour is not None:
            result["behaviour_model"] = self.behaviour_info
        return result

    def simulated(self, pcfg, fqe, seed: int):
        """The world model's Q and V of the agent on the logged steps (ope/simulated.py), from `rollouts`
        simulations each of Q(s, a_logged) and V(s) at a sample of the logged steps, in one batch."""
        from adwm.simulation.worlds import logged_step_starts
        from adwm.stages.evaluate import _world_model_path, loaded_world

        sc, full = self.cfg.simulated, self.full
        start = time.time()
        world = loaded_world(full, _world_model_path(OmegaConf.to_object(full.evaluate), full.data.log))
        index = sample_steps(len(self.states), sc.states, seed)
        if self.starts is None:  # every logged step as a start, shared by the policies
            self.starts = logged_step_starts(self.episodes)
        starts = [self.starts[k] for k in index for _ in range(sc.rollouts)]
        first = [self.actions[k] for k in index for _ in range(sc.rollouts)]
        returns = world.returns_from(pcfg, starts + starts, first + [None] * len(starts))
        q, v = returns.reshape(2, len(index), sc.rollouts).mean(-1)
        values, info = simulated_q_values(self.ds, fqe, SimulatedValues(index, q, v), sc.ridge, seed=seed)
        info |= {"rollouts": sc.rollouts, "world": full.evaluate.world, "seconds": round(time.time() - start, 2)}
        return values, info
