"""Episode logs: a versioned JSONL schema, one episode per line, validated on load.

Line format (`adwm.episode/1`)::

    {"schema": "adwm.episode/1", "index": 0, "env": "builtin", "seed": 2000000,
     "task": "Put the apple in the fridge.", "policy": "iter2_t2",
     "steps": [{"observation": "...", "admissible": ["look", ...] | null,
                "action": "look", "reward": 0.0, "done": false,
                "behavior_logprob": -1.38 | null}, ...],
     "final_observation": "...", "info": {}}

`admissible` is the list offered before the action (null when the
environment has none). `behavior_logprob` is the behaviour agent's log-prob of
its action: privileged information that only the classic baselines may read;
`read_episodes` drops it unless asked with `privileged=True`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from adwm.envs.registry import LOG_ONLY

SCHEMA = "adwm.episode/1"


class LogFormatError(ValueError):
    """A log line that does not follow the episode schema; the message names file:line and field."""


@dataclass
class StepRecord:
    observation: str
    action: str
    reward: float
    done: bool
    admissible: list[str] | None = None
    behavior_logprob: float | None = None  # privileged: classic baselines only


@dataclass
class Episode:
    env: str
    seed: int
    task: str
    policy: str
    steps: list[StepRecord]
    final_observation: str
    index: int | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def ended(self, t: int) -> bool:
        """Whether step t ended the episode: its `done`, unless the episode was cut at the step limit there
        (`info.truncated`: a cut is not an end a simulator should learn or replay)."""
        last = t == len(self.steps) - 1
        return self.steps[t].done and not (last and bool(self.info.get("truncated", False)))

    def discounted_return(self, gamma: float) -> float:
        return sum(gamma**t * s.reward for t, s in enumerate(self.steps))

    def to_json(self) -> str:
        d = {"schema": SCHEMA, **asdict(self)}
        d["steps"] = [asdict(s) for s in self.steps]
        return json.dumps(d, separators=(",", ":"))


_EPISODE_FIELDS = {"env": str, "seed": int, "task": str, "policy": str, "steps": list, "final_observation": str}
_STEP_FIELDS = {"observation": str, "action": str, "reward": float, "done": bool}


def _type_ok(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _expect(where: str, name: str, value: Any, kind: type) -> None:
    if not _type_ok(value, kind):
        want = {float: "a finite number", int: "an integer", str: "a string", bool: "true or false", list: "a list"}[
            kind
        ]
        raise LogFormatError(f"{where}: field '{name}': expected {want}, got {type(value).__name__} {value!r:.60}")


def parse_episode(line: str, where: str, privileged: bool = False) -> Episode:
    """Validate one JSONL line; `where` is 'file:line' for messages."""
    try:
        d = json.loads(line)
    except json.JSONDecodeError as err:
        raise LogFormatError(f"{where}: not valid JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(d, dict):
        raise LogFormatError(f"{where}: expected a JSON object (one episode), got {type(d).__name__}")
    if d.get("schema") != SCHEMA:
        raise LogFormatError(f"{where}: field 'schema': expected '{SCHEMA}', got {d.get('schema')!r}")
    for name, kind in _EPISODE_FIELDS.items():
        if name not in d:
            raise LogFormatError(f"{where}: missing field '{name}'")
        _expect(where, name, d[name], kind)
    if not d["steps"]:
        raise LogFormatError(f"{where}: field 'steps': expected at least one step, got an empty list")
    steps = []
    for t, s in enumerate(d["steps"]):
        key = f"steps[{t}]"
        if not isinstance(s, dict):
            raise LogFormatError(f"{where}: field '{key}': expected an object, got {type(s).__name__}")
        for name, kind in _STEP_FIELDS.items():
            if name not in s:
                raise LogFormatError(f"{where}: missing field '{key}.{name}'")
            _expect(where, f"{key}.{name}", s[name], kind)
        adm = s.get("admissible")
        if adm is not None and not (isinstance(adm, list) and all(isinstance(a, str) for a in adm)):
            raise LogFormatError(f"{where}: field '{key}.admissible': expected a list of strings or null")
        blp = s.get("behavior_logprob")
        if blp is not None and not (_type_ok(blp, float) and blp <= 0 or blp == float("-inf")):
            raise LogFormatError(
                f"{where}: field '{key}.behavior_logprob': expected a log-probability <= 0 or null, got {blp!r}"
            )
        if s["done"] and t != len(d["steps"]) - 1:
            raise LogFormatError(f"{where}: field '{key}.done': true before the last step")
        steps.append(
            StepRecord(s["observation"], s["action"], float(s["reward"]), s["done"], adm, blp if privileged else None)
        )
    index = d.get("index")
    if index is not None:
        _expect(where, "index", index, int)
    return Episode(
        d["env"], d["seed"], d["task"], d["policy"], steps, d["final_observation"], index, d.get("info") or {}
    )


def read_episodes(
    path: str | Path, privileged: bool = False, env: str | None = None, key: str = "data.log"
) -> list[Episode]:
    """All episodes of a JSONL log; the first bad line raises `LogFormatError` naming file:line and field.
    `env`: the environment every episode must come from (a log of another world is refused, not used); with
    `env="log"` (a log-only environment) any one environment, the first episode's;
    `key`: the config key the path came from, named in the errors of a missing file or a folder."""
    path = Path(path)
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*.jsonl"))[:3]
        hint = f" (JSONL files there: {', '.join(found)})" if found else ""
        raise LogFormatError(f"{key}: episode log '{path}' is a folder; expected a JSONL file of episodes{hint}")
    if not path.is_file():
        raise FileNotFoundError(f"{key}: episode log '{path}' does not exist")
    episodes = []
    with path.open("rb") as f:
        for n, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise LogFormatError(f"{path}:{n}: not UTF-8 text (byte {err.start}); expected JSON lines") from None
            if line.strip():
                ep = parse_episode(line, f"{path}:{n}", privileged)
                if env == LOG_ONLY and episodes and ep.env != episodes[0].env:
                    raise LogFormatError(
                        f"{path}:{n}: field 'env': the episode comes from '{ep.env}', the log's first from "
                        f"'{episodes[0].env}'; one world model is fitted on the log of one environment"
                    )
                if env is not None and env != LOG_ONLY and ep.env != env:
                    raise LogFormatError(
                        f"{path}:{n}: field 'env': the episode comes from '{ep.env}', the configured environment "
                        f"is '{env}' (env.name); a world model or baseline of one world cannot use another's log "
                        "(env=log reads a log of an environment adwm has no adapter for)"
                    )
                episodes.append(ep)
    if not episodes:
        raise LogFormatError(f"{path}: no episodes (the file is empty)")
    return episodes
