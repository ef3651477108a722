"""The cost of an ADWM estimate beside the online evaluation it replaces, side by side in one process.

    .venv/bin/python benchmarks/cost.py --cell builtin seed=3 run.root=runs/v3 [more overrides]

The overrides name a finished `adwm quickstart` run (its agents, log and fitted world model are reused;
nothing of it is overwritten). In this process, one after another:

1. online: the family's ground truth (`ground_truth.n_episodes` per policy) in the real environment,
   with the time of the agents and of the environment apart and the agent's forward passes counted;
2. estimate: `adwm evaluate` of the family with `evaluate.calibration=none` from scratch (fresh projectors
   under a temporary folder), split into projector training, tail values, and the simulation by part
   (start encodings, history, the agent's choice, denoising, continuation guidance, heads, retrieval; in
   `evaluate.world=guided_analogy`, the default, the analogy world's proposals, encoded and picked: propose);
3. calibration: the behaviour agents' simulations that `evaluate.calibration` (the run's setting) adds
   (kept beside the world model, `evaluate.behaviour_out`, and reused by every later estimate with it; here
   they go to the temporary folder, so they are always measured);
4. peak resident memory of the first eps-0 policy's simulation at 1x and 4x the rollout batch, each in a
   fresh process;
5. a `torch.profiler` table of two simulated steps of the first family policy (the ops that take the time).

The fit is not repeated: its seconds come from `<run.fit>/metrics.json` and are reported apart, amortised
over the family's policies (one fit evaluates many agents). Peak resident memory is read per phase
(VmHWM, reset between phases). The figures go to `benchmarks/results/cost.json` under `<cell>/<label>`
(`--label`, default `current`) and every entry of that file to the table `docs/results/cost.md`.

    .venv/bin/python benchmarks/cost.py --cell scienceworld --label <commit> --estimate-only 2 <overrides>

measures only the uncalibrated estimate, twice, into `benchmarks/results/cost_estimate.json`: run it from
two checkouts in turn (PYTHONPATH=<checkout>/src) to compare code at one machine speed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from adwm.config.compose import load_config
from adwm.evaluation.family import family_policies
from adwm.evaluation.ground_truth import ground_truth
from adwm.runtime import costs
from adwm.runtime.atomic import atomic_write_json, atomic_write_text, read_json, update_json
from adwm.runtime.provenance import benchmark_stamp, commit
from adwm.simulation.simulate import simulate
from adwm.simulation.starts import logged_starts
from adwm.stages import evaluate as evaluate_stage

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "cost.json"
ESTIMATES = ROOT / "benchmarks" / "results" / "cost_estimate.json"  # --estimate-only
BATCHING = ROOT / "benchmarks" / "results" / "cost_batching.json"  # --batching
TABLE = ROOT / "docs" / "results" / "cost.md"
SIM_PARTS = ("start", "history", "choose", "denoise", "guidance", "heads", "retrieval", "propose")


def _peak_mb(reset: bool = False) -> float:
    """This process's peak resident memory since the last reset (Linux VmHWM), in MB."""
    status = Path("/proc/self/status")
    if not status.is_file():
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak = next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("VmHWM"))
    if reset:
        Path("/proc/self/clear_refs").write_text("5")
    return peak / 1024


def _phase(fn) -> tuple[float, dict, float]:
    """(wall seconds, recorded sections and counts, peak resident MB) of fn(); with CUDA, the recorded dict
    also holds the peak GPU memory allocated (`gpu_peak_mb`)."""
    _peak_mb(reset=True)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    with costs.recording() as record:
        start = time.perf_counter()
        fn()
        wall = time.perf_counter() - start
    out = record.to_dict()
    if torch.cuda.is_available():
        out["gpu_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return wall, out, round(_peak_mb(), 1)


def _simulation(record: dict) -> dict:
    sec, counts = record["seconds"], record["counts"]
    parts = {p: round(sec.get(f"simulate/{p}", 0.0), 2) for p in SIM_PARTS}
    steps = max(counts.get("simulate/steps", 0), 1)
    total = sum(parts.values())
    return {
        "seconds": round(total, 1),
        "parts": parts,
        "batched_steps": counts.get("simulate/steps", 0),
        "rollout_steps": counts.get("simulate/rollout_steps", 0),
        "step_ms": round(total / steps * 1e3, 1),
        # the floor of a simulated step: the agent's one batched forward to choose its action
        "choose_ms": round(parts["choose"] / steps * 1e3, 1),
        "step_over_choose": round(total / max(parts["choose"], 1e-9), 2),
        "agent_states_read": {
            "choose": counts.get("agent/states_read@simulate/choose", 0),
            "guidance": counts.get("agent/states_read@simulate/guidance", 0),
        },
        # the text reader's states and those it had no score of yet (readers.NearestTextReader's cache)
        "reader_states": counts.get("reader/states", 0),
        "reader_states_scored": counts.get("reader/states_scored", 0),
        # a writing agent's states and those whose walk left the kept logits (policies/prefix_tree.py)
        "writer_states": counts.get("writer/states", 0),
        "writer_states_generated": counts.get("writer/states_generated", 0),
    }


def _profile(cfg, wm_path: Path, policy) -> list[dict]:
    """Top ops by self CPU time over two simulated steps of `policy` (its projector is already trained;
    the tail value is fitted before the profile starts). In another world than `diffusion`, two steps of
    its rollouts (the torch ops only: the analogy world's proposals are Python, timed as `propose`)."""
    world = evaluate_stage.loaded_world(cfg, wm_path)
    if cfg.evaluate.world != "diffusion":
        world.horizon = 2
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            evaluate_stage.estimate_policy(world, policy)
        world.horizon = world.sim.horizon or cfg.env.max_steps
    else:
        wm, dm = world.inputs.wm, world.inputs.dm
        reader, continuation = world.reader_and_continuation(policy)
        sim, guidance, own = world.sim, world.guidance, world.own
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            args = (sim, guidance, cfg.env.gamma, 2, cfg.seed, continuation)
            simulate(wm, policy, reader, logged_starts(dm), *args, world=own)
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]
    return [{"op": e.key, "self_ms": round(e.self_cpu_time_total / 1e3, 1), "calls": e.count} for e in rows]


def _memory_by_rollouts(overrides: list[str], batch: int, policy: str) -> dict[str, float]:
    """Peak resident MB of `policy`'s simulation (5 steps) at 1x and 4x the rollout batch, each in a fresh
    process (this one's high-water mark already holds the phases before): what grows with the number of
    rollouts beyond a batch shows as a difference."""
    out = {}
    for n in (batch, 4 * batch):
        args = [*overrides, "evaluate.simulate.horizon=5", f"evaluate.simulate.n_rollouts={n}"]
        probe = [sys.executable, str(Path(__file__).resolve()), "--memory-probe", policy, "--cell", "probe", *args]
        done = subprocess.run(probe, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"memory probe ({' '.join(args)}) failed:\n{done.stderr[-2000:]}")
        out[f"rollouts_{n}"] = float(done.stdout.strip().splitlines()[-1])
    return out


def _memory_probe(overrides: list[str], policy: str) -> float:
    """One simulation of the family's `policy` in this (fresh) process -> its peak resident MB."""
    cfg = load_config(overrides, "evaluate")
    family = family_policies(OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.family))
    world = evaluate_stage.loaded_world(cfg, Path(cfg.evaluate.world_model))
    pcfg = next(p for p in family if p.name == policy)
    evaluate_stage.estimate_policy(world, pcfg)
    return _peak_mb()


def _fresh(overrides: list[str]) -> list[str]:
    """The run's overrides with every output the measurement writes under a new temporary folder, so that
    nothing an earlier run finished is reused and nothing of the run is overwritten."""
    tmp = Path(tempfile.mkdtemp(prefix="adwm-cost-"))
    fresh = [
        *overrides,
        "workers=1",
        f"project.dir={tmp}/project",
        f"evaluate.out={tmp}/estimates.json",
        f"ground_truth.out={tmp}/ground_truth.json",
    ]
    if "behaviour_out" in load_config(overrides, "evaluate").evaluate:  # absent from code before 4c21812
        fresh.append(f"evaluate.behaviour_out={tmp}/behaviour_simulations.json")
    return fresh


def measure_estimate(overrides: list[str], repeats: int) -> dict:
    """The uncalibrated estimate alone, `repeats` times from scratch: wall seconds and the simulation's
    parts of each. Run from two checkouts in turn to compare code on the same machine at the same time
    (the machine's speed drifts between sessions by more than many changes are worth)."""
    runs = []
    for _ in range(repeats):
        cfg = load_config([*_fresh(overrides), "evaluate.calibration=none"], "evaluate")
        seconds, record, _ = _phase(lambda cfg=cfg: evaluate_stage.evaluate(cfg))
        runs.append({"seconds": round(seconds, 1), "simulation": _simulation(record)["parts"]})
    return {"overrides": overrides, "commit": (commit() or "unknown")[:7], "runs": runs}


def measure_batching(overrides: list[str], k: int, repeats: int = 3) -> dict:
    """What batching the rollouts of k policies into one forward would buy on this machine: the best of
    `repeats` timings of one denoising (the sampler's reverse steps, omega guidance) and of one agent's
    read of the logged start states (a write for a writing agent, else its action scores), for one rollout
    batch and for k of them at once. `saving`: 1 - time(k batches at once) / (k x time(one batch))."""
    import numpy as np

    from adwm.guidance.composed import guided_eps_fn
    from adwm.policies.base import AgentState
    from adwm.policies.factory import build_policy
    from adwm.simulation.simulate import simulation_sampler

    cfg = load_config([*_fresh(overrides), "evaluate.calibration=none"], "evaluate")
    world = evaluate_stage.loaded_world(cfg, Path(cfg.evaluate.world_model))
    wm, dm = world.inputs.wm, world.inputs.dm
    family = family_policies(OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.family))
    agent = build_policy(next(p for p in family if p.eps == 0), "family")
    b = cfg.evaluate.simulate.n_rollouts
    starts = (logged_starts(dm) * (k * b))[: k * b]
    sampler = simulation_sampler(wm, cfg.evaluate.diffusion.sampler_steps)
    guidance = OmegaConf.to_object(cfg.guidance)
    with torch.no_grad():
        z = wm.encode([s.observation for s in starts])
    gen = torch.Generator().manual_seed(cfg.seed)

    def denoise(n: int) -> None:
        c = torch.randn(n, wm.cfg.d_context, generator=gen)
        a = torch.randn(n, wm.cfg.d_action, generator=gen)
        eps_fn = guided_eps_fn(lambda x, t, act, c=c: wm.eps(x, t, c, act), a, wm.abar, guidance)
        with torch.no_grad():
            sampler.sample(eps_fn, (n, *z.shape[1:]), gen, z.device)

    def listed(s) -> list[str]:  # a start's logged list (the whole vocabulary where it was not logged)
        return list(wm.actions) if s.admissible is None else [wm.actions[i] for i in s.admissible]

    states = [AgentState(s.task, s.observation, [], listed(s)) for s in starts]

    def read(n: int) -> None:
        if cfg.policy.mode == "generate":
            agent.write([agent.prompt_ids(x) for x in states[:n]], [np.random.default_rng(i) for i in range(n)])
        else:
            agent.action_scores(states[:n])

    out = {"rollouts": b, "policies": k}
    for name, fn in (("denoise", denoise), ("agent", read)):
        one = min(_timed(lambda fn=fn: fn(b)) for _ in range(repeats))
        many = min(_timed(lambda fn=fn: fn(k * b)) for _ in range(repeats))
        out[name] = {
            "one_batch_s": round(one, 6),
            "k_batches_at_once_s": round(many, 6),
            "saving": round(1 - many / (k * one), 3),
        }
    return out


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(overrides: list[str], cell: str) -> dict:
    probe = load_config(overrides, "evaluate")
    base = _fresh(overrides)
    cfg = load_config([*base, "evaluate.calibration=none"], "evaluate")
    family = family_policies(OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.family))
    wm_path = Path(cfg.evaluate.world_model)
    if not wm_path.is_file():
        raise FileNotFoundError(f"evaluate.world_model: no world model at '{wm_path}' (run `adwm quickstart` first)")
    gcfg, env_cfg = OmegaConf.to_object(cfg.ground_truth), OmegaConf.to_object(cfg.env)

    online_s, online, online_mb = _phase(lambda: ground_truth(family, gcfg, env_cfg, cfg.seed))
    estimate_s, estimate, estimate_mb = _phase(lambda: evaluate_stage.evaluate(cfg))
    calibration = probe.evaluate.calibration
    calibration_s, calib, calib_mb = 0.0, {"seconds": {}, "counts": {}}, 0.0
    if calibration != "none":
        cal_cfg = load_config([*base, f"evaluate.calibration={calibration}"], "evaluate")
        calibration_s, calib, calib_mb = _phase(lambda: evaluate_stage.evaluate(cal_cfg))
    first = next((p for p in family if p.eps == 0), family[0])
    memory = _memory_by_rollouts([*base, "evaluate.calibration=none"], cfg.evaluate.simulate.batch_size, first.name)
    profile = _profile(cfg, wm_path, first)

    results = read_json(Path(cfg.evaluate.out))
    fit_metrics = Path(cfg.run.fit) / "metrics.json"
    fit_s = read_json(fit_metrics).get("seconds") if fit_metrics.is_file() else None
    sec = estimate["seconds"]
    projector_s, tail_s = sec.get("estimate/projector", 0.0), sec.get("estimate/tail_value", 0.0)
    return {
        "overrides": overrides,
        "commit": (commit() or "unknown")[:7],
        "device": torch.cuda.get_device_name() if cfg.evaluate.device.startswith("cuda") else "cpu",
        "cpu_threads": torch.get_num_threads(),
        "settings": {
            "family": [p.name for p in family],
            "ground_truth_episodes": gcfg.n_episodes,
            "n_rollouts": cfg.evaluate.simulate.n_rollouts,
            "sampler_steps": cfg.world_model.sampler.steps,
            "guidance": OmegaConf.to_container(cfg.guidance),
            "calibration": calibration,
        },
        "online": {
            "seconds": round(online_s, 1),
            "agent_s": round(online["seconds"].get("online/agent", 0.0), 1),
            "env_s": round(online["seconds"].get("online/env", 0.0), 1),
            "steps": online["counts"].get("online/steps", 0),
            "agent_states_read": online["counts"].get("agent/states_read", 0),
            "agent_forward_passes": online["counts"].get("agent/forward_passes", 0),
            "peak_mb": online_mb,
            "gpu_peak_mb": online.get("gpu_peak_mb"),
        },
        "fit_seconds": fit_s,
        "fit_seconds_per_policy": None if fit_s is None else round(fit_s / len(family), 1),
        "estimate": {
            "seconds": round(estimate_s, 1),
            "projector_s": round(projector_s, 1),
            "tail_value_s": round(tail_s, 1),
            "simulation": _simulation(estimate),
            "agent_forward_passes": estimate["counts"].get("agent/forward_passes", 0),
            "peak_mb": estimate_mb,
            "gpu_peak_mb": estimate.get("gpu_peak_mb"),
            "per_policy_s": {n: results["estimates"][n]["seconds"] for n in results["family"]},
        },
        "calibration": {"seconds": round(calibration_s, 1), "peak_mb": calib_mb},
        "ratio_estimate_to_online": round(estimate_s / online_s, 3),
        "ratio_with_calibration_to_online": round((estimate_s + calibration_s) / online_s, 3),
        "accuracy": {
            "uncalibrated": results.get("metrics_sim"),
            "calibrated": results.get("metrics") if calibration != "none" else None,
        },
        "peak_mb_by_rollouts": memory,
        "memory_probe": "fresh processes",
        "profile_two_steps": profile,
        "cell": cell,
    }


def table(entries: dict) -> str:
    lines = [
        "# Cost of an estimate against the online evaluation it replaces",
        "",
        "Generated by `benchmarks/cost.py` (figures in `benchmarks/results/cost.json`; the command of each row is",
        "`.venv/bin/python benchmarks/cost.py --cell <cell> --label <label> <overrides>`). **Each row was made by",
        "the code of its commit column and is not rerun at later code**; the notes under Commands name the later",
        "changes that alter a row's figures. Rows of one cell run in different sessions also differ by the",
        "machine's speed, which drifts by up to a quarter. Measured on 2 CPU cores, one",
        "process, nothing else running unless a row's note (under Commands) says otherwise. *online*: the",
        "family's ground truth in the real environment; *estimate*: ADWM's estimate of the same family with a",
        "fitted world model (projectors, tail values, simulation), uncalibrated; *calibration*: the behaviour",
        "simulations that `evaluate.calibration` adds, measured afresh (from commit 4c21812 on they are kept",
        "beside the world model, `evaluate.behaviour_out`, and every later estimate with it reuses them: like",
        "the fit, a cost per world model). The fit is reported apart and amortised per evaluated policy. *choose*:",
        "the agent's part of a simulated step (a batched forward over the states it has no score of yet); with",
        "the text reader, whose cache serves the rest, *reads scored* is the share of its reads that needed a",
        "forward (for an agent that writes its actions: the share whose writing ran the model past the kept",
        "next-token logits, `evaluate.diffusion.write_cache_mb`); *MB at 1x / 4x rollouts*: the peak of the first",
        "eps-0 policy's 5-step simulation at one and four rollout batches, each in a fresh process. The rows are builtin seed 3, TextWorld and",
        "ScienceWorld seed 3 (held out) and shop / multihop seed 0; the accuracy column is uncalibrated.",
        "",
        "| cell / settings | commit | online s | fit s (per policy) | estimate s | ratio | + calibration s |"
        " sim step ms | choose ms | step / choose | reads scored | peak MB | MB at 1x / 4x rollouts |"
        " Spearman / nRMSE (uncal.) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, e in entries.items():
        sim = e["estimate"]["simulation"]
        acc = e["accuracy"]["uncalibrated"] or {}
        peak = max(e["online"]["peak_mb"], e["estimate"]["peak_mb"], e["calibration"]["peak_mb"])
        fit = "-" if e["fit_seconds"] is None else f"{e['fit_seconds']:.0f} ({e['fit_seconds_per_policy']:.0f})"
        lines.append(
            f"| {key} | {e['commit']} | {e['online']['seconds']:.0f} | {fit} | {e['estimate']['seconds']:.0f} | "
            f"{e['ratio_estimate_to_online']:.2f} | {e['calibration']['seconds']:.0f} | {sim['step_ms']:.0f} | "
            f"{sim['choose_ms']:.0f} | {sim['step_over_choose']:.2f} | "
            f"{_reads(sim)} | {peak:.0f} | {_by_rollouts(e)} | "
            f"{acc.get('spearman', float('nan')):.2f} / {acc.get('nrmse', float('nan')):.3f} |"
        )
    lines += ["", "## Where a simulated step's time goes (seconds over the family's simulation)", ""]
    lines += [
        "| cell / settings | " + " | ".join(SIM_PARTS) + " | projector | tail value |",
        "|---" * (len(SIM_PARTS) + 3) + "|",
    ]
    for key, e in entries.items():
        parts = e["estimate"]["simulation"]["parts"]
        lines.append(
            f"| {key} | "
            + " | ".join(f"{parts.get(p, 0.0):.1f}" for p in SIM_PARTS)  # older rows lack later parts
            + f" | {e['estimate']['projector_s']:.1f} | {e['estimate']['tail_value_s']:.1f} |"
        )
    lines += ["", "## Commands", ""]
    for key, e in entries.items():
        cell, label = key.split("/", 1)
        lines.append(
            f"* {key}: `.venv/bin/python benchmarks/cost.py --cell {cell} --label {label} {' '.join(e['overrides'])}`"
            + (f". Note: {e['note']}." if e.get("note") else "")
        )
    for key, e in entries.items():
        lines += ["", f"## Profile of two simulated steps: {key}", "", "| op | self ms | calls |", "|---|---|---|"]
        lines += [f"| `{r['op']}` | {r['self_ms']} | {r['calls']} |" for r in e["profile_two_steps"]]
    return "\n".join(lines) + "\n"


def _by_rollouts(entry: dict) -> str:
    """Peak MB of one policy's simulation at 1x and 4x the rollout batch, where each was read in a fresh
    process (earlier entries read it after the phases before, whose high-water mark hid any growth)."""
    if entry.get("memory_probe") != "fresh processes":
        return "-"
    return " / ".join(f"{v:.0f}" for v in entry["peak_mb_by_rollouts"].values())


def _reads(sim: dict) -> str:
    """The share of the text reader's states that needed a forward (the rest came from its cache): scored
    (an agent that picks) or written past the kept prefixes (an agent that writes)."""
    parts = []
    if sim.get("reader_states"):
        parts.append(f"{sim['reader_states_scored'] / sim['reader_states']:.0%} of {sim['reader_states']}")
    if sim.get("writer_states"):
        parts.append(f"{sim['writer_states_generated'] / sim['writer_states']:.0%} of {sim['writer_states']} written")
    return ", ".join(parts) or "-"


def write_table() -> None:
    """docs/results/cost.md from every entry of benchmarks/results/cost.json."""
    atomic_write_text(TABLE, table(read_json(RESULTS)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", required=True, help="the cell's name in the results (e.g. builtin)")
    parser.add_argument("--label", default="current", help="the settings' name in the results (e.g. baseline)")
    parser.add_argument(
        "--note", default=None, help="what the table should say about the conditions (e.g. another job running)"
    )
    parser.add_argument(
        "--estimate-only",
        type=int,
        metavar="REPEATS",
        help="measure only the uncalibrated estimate, this many times; figures to " + ESTIMATES.name,
    )
    parser.add_argument(
        "--batching",
        type=int,
        metavar="POLICIES",
        help="measure what one forward over this many policies' rollout batches would save; figures to "
        + BATCHING.name,
    )
    parser.add_argument("--memory-probe", metavar="POLICY", help=argparse.SUPPRESS)  # one run of _memory_by_rollouts
    parser.add_argument("overrides", nargs="*", help="the quickstart run's overrides (seed=3 run.root=runs/v3 ...)")
    args = parser.parse_args()
    if args.memory_probe:
        print(_memory_probe(args.overrides, args.memory_probe))
        return
    if args.batching:
        entry = {"overrides": args.overrides, "commit": (commit() or "unknown")[:7], "provenance": benchmark_stamp()}
        entry |= measure_batching(args.overrides, args.batching)
        update_json(BATCHING, lambda stored: stored.__setitem__(f"{args.cell}/{args.label}", entry))
        print(json.dumps(entry, indent=1))
        return
    if args.estimate_only:
        entry = measure_estimate(args.overrides, args.estimate_only) | {"provenance": benchmark_stamp()}
        update_json(ESTIMATES, lambda stored: stored.setdefault(f"{args.cell}/{args.label}", []).append(entry))
        print(json.dumps(entry, indent=1))
        return
    entry = measure(args.overrides, args.cell) | {"provenance": benchmark_stamp()}
    if args.note:
        entry["note"] = args.note
    stored = read_json(RESULTS) if RESULTS.is_file() else {}
    stored[f"{args.cell}/{args.label}"] = entry
    atomic_write_json(RESULTS, stored)
    atomic_write_text(TABLE, table(stored))
    print(json.dumps({k: entry[k] for k in ("online", "estimate", "ratio_estimate_to_online")}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
