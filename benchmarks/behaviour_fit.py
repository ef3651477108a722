"""The cost of fitting the estimated behaviour policy (`ope/behaviour.py`, the `_est` baselines' weights).

    .venv/bin/python benchmarks/behaviour_fit.py LOG [--iterations N] [--before COMMIT] [--chunks 15 16 ...]

Builds the fit's inputs from the log's candidate lists (each step's admissible actions, the logged action
added) with random unit embeddings of the world model's feature width (the cost depends on the shapes,
not on the texts), runs `--iterations` L-BFGS iterations on one thread, and adds an entry, keyed by the
log, to `benchmarks/results/behaviour_fit.json`: the log's steps, candidate entries and vocabulary, the
(step, action) scores one evaluation computes, and the seconds an evaluation took. `--before COMMIT` also
times `fit_behaviour` as that commit wrote it (read with `git show`), on the same inputs; `--chunks`
times the fit at runs of 2^k scores for each k given (the default is `behaviour.CHUNK`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from adwm.ope import behaviour
from adwm.runtime.atomic import update_json
from adwm.runtime.provenance import module_at

OUT = Path(__file__).resolve().parent / "results" / "behaviour_fit.json"


def inputs(log: Path, width: int, seed: int = 0) -> tuple[SimpleNamespace, list[str]]:
    """What `fit_behaviour` reads of a `StepFeatures`, with random unit embeddings of `width`."""
    states, actions, texts = [], [], {}
    with open(log) as f:
        for line in f:
            for step in json.loads(line)["steps"]:
                listed = step.get("admissible") or []
                states.append(SimpleNamespace(admissible=listed))
                actions.append(step["action"])
                for a in [*listed, step["action"]]:
                    texts.setdefault(a, len(texts))
    rng = np.random.default_rng(seed)

    def unit(n: int) -> np.ndarray:
        e = rng.normal(size=(n, width))
        return e / np.linalg.norm(e, axis=1, keepdims=True)

    return SimpleNamespace(
        states=states, index=texts, emb=unit(len(texts)), e_obs=unit(len(states)), e_task=unit(len(states))
    ), actions


def timed(fit, features, actions, iterations: int, **kwargs) -> dict:
    start = time.perf_counter()
    result = fit(features, actions, max_iterations=iterations, **kwargs)
    seconds = time.perf_counter() - start
    return {
        "seconds": round(seconds, 2),
        "evaluations": result.evaluations,
        "seconds_an_evaluation": round(seconds / result.evaluations, 3),
        "nll": round(result.nll, 6),
    }


def main(log: Path, iterations: int, before: str | None, width: int, chunks: list[int]) -> Path:
    torch.set_num_threads(1)
    features, actions = inputs(log, width)
    cands, _ = behaviour._candidates(features, actions)
    runs = behaviour._runs(cands, behaviour.CHUNK)
    vocabulary = len({a for c in cands for a in c})
    entry = {
        "steps": len(cands),
        "candidate_entries": sum(map(len, cands)),
        "vocabulary": vocabulary,
        "embedding_width": width,
        "scores_an_evaluation": {
            "runs_own_actions": sum((stop - start) * len(v) for start, stop, v in runs),
            "whole_vocabulary": len(cands) * vocabulary,
        },
        "runs": len(runs),
        "now": timed(behaviour.fit_behaviour, features, actions, iterations),
    }
    for k in chunks:
        entry[f"chunk_2^{k}"] = timed(behaviour.fit_behaviour, features, actions, iterations, chunk=1 << k)
    if before:
        entry[f"before_{before}"] = timed(
            module_at(before, "src/adwm/ope/behaviour.py").fit_behaviour, features, actions, iterations
        )
    update_json(OUT, lambda results: results.__setitem__(str(log), entry))
    print(json.dumps(entry, indent=1))
    return OUT


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--before", help="a commit whose fit_behaviour to time on the same inputs")
    parser.add_argument("--width", type=int, default=128, help="the features' width (4 latents x 32: 128)")
    parser.add_argument("--chunks", type=int, nargs="*", default=[], help="also time runs of 2^k scores")
    args = parser.parse_args()
    main(args.log, args.iterations, args.before, args.width, args.chunks)
