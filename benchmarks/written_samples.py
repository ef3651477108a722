"""The cost of the writes the baselines sample from a writing agent (`ScoreCache.samples`: k actions a
logged state, for DM's and FQE's expectations under the evaluated policy).

    .venv/bin/python benchmarks/written_samples.py LOG AGENT [--states N] [--k K] [--before COMMIT]

Reads the first `--states` logged states of LOG, and has the agent (a trained checkpoint folder, e.g.
`<agent.dir>/iter3`) write `--k` actions in each, through `ScoreCache.samples`, as the baselines do
(batches of `policy.batch_states` rows), on one thread. Adds an entry, keyed by the log and agent, to
`benchmarks/results/written_samples.json`: the seconds, the rows and distinct prompts, and whether the
writes are those of `--before COMMIT`'s prefill (its `_chunked_prompt_pass`, read with `git show`, which
prefills every row's prompt), timed on the same rows.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from adwm.data.schema import read_episodes
from adwm.ope.logged import ScoreCache, logged_states
from adwm.policies import scoring
from adwm.policies.config import PolicyConfig
from adwm.policies.llm import LLMPolicy
from adwm.runtime.atomic import update_json
from adwm.runtime.provenance import module_at

OUT = Path(__file__).resolve().parent / "results" / "written_samples.json"


def timed(pcfg: PolicyConfig, states: list, k: int, seed: int = 0) -> tuple[dict, list[str]]:
    """`ScoreCache.samples` as the baselines call it (the agent's load included), with nothing on disk."""
    start = time.perf_counter()
    written = ScoreCache(None, "benchmark").samples(pcfg, states, k, seed)
    return {"seconds": round(time.perf_counter() - start, 2)}, [a for row in written for a in row]


def main(log: Path, agent: str, n: int, k: int, before: str | None) -> Path:
    torch.set_num_threads(1)
    states = logged_states(read_episodes(log, privileged=True))[:n]
    pcfg = PolicyConfig(name="agent", model=agent, mode="generate", max_new_tokens=24, history_turns=0)
    policy = LLMPolicy(pcfg, "benchmarks/written_samples.py")
    distinct = len({tuple(policy.prompt_ids(s)) for s in states})
    entry = {"states": len(states), "k": k, "rows": len(states) * k, "distinct_prompts": distinct}
    entry["now"], now = timed(pcfg, states, k)
    if before:
        current = scoring._chunked_prompt_pass
        scoring._chunked_prompt_pass = module_at(before, "src/adwm/policies/scoring.py")._chunked_prompt_pass
        try:
            entry[f"before_{before}"], then = timed(pcfg, states, k)
        finally:
            scoring._chunked_prompt_pass = current
        entry["same_writes"] = float(np.mean([a == b for a, b in zip(now, then)]))
    update_json(OUT, lambda results: results.__setitem__(f"{log} {agent}", entry))
    print(json.dumps(entry, indent=1))
    return OUT


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("agent")
    parser.add_argument("--states", type=int, default=128)
    parser.add_argument("--k", type=int, default=4, help="writes a state (ope.written_samples)")
    parser.add_argument("--before", help="a commit whose chunked prefill to time on the same rows")
    args = parser.parse_args()
    main(args.log, args.agent, args.states, args.k, args.before)
