"""ScienceWorld (PyPI `scienceworld`, a Java simulator behind py4j) behind the `TextEnv` interface.

* `reset(seed)` picks task `tasks[seed % n]` and the `(seed // n)`-th variation of the configured split
  (the package's train/dev/test variation lists; wrapping around), so seeds enumerate every variation.
* reward = score change / 100 in [-1, 1]; done when the task completes, when the score goes negative
  (a wrong `focus on` gives -100 and ends the episode) or at `max_steps` (`info.truncated`).
* The stock `ScienceWorldEnv.step` fetches the valid-action list, look and inventory on every step
  (~13 steps/s); this adapter drives the server's step directly (~60-120 steps/s) and hands the valid
  list out as `OnDemandActions`, fetched only when an agent, a wrapper's random branch or the log
  (`log_admissible_rate` of the steps) reads it.
* Gold action sequences (up to ~12 s to generate) are cached on disk per task, variation and
  simplification; `gold_actions()` gives the rest of the gold path while the episode follows it.
* One JVM per adapter (several can live in one process, each on its own port). A JVM that dies or
  exceeds `step_timeout_s` on a call is killed and restarted, and the call raises `EnvCrashed` so the
  runner replays the episode; `close()` ends the JVM and is safe to call twice (and at collection).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adwm.envs.base import EnvCrashed, OnDemandActions, Reset, Step
from adwm.runtime.atomic import atomic_write_json
from adwm.runtime.faults import reached

SPLITS = ("train", "dev", "test")
PARTS = ("result", "look", "inventory")


@dataclass
class ScienceWorldConfig:
    tasks: list[str] = field(default_factory=lambda: ["boil"])  # task names (`scienceworld` task list)
    split: str = "train"  # variation split: train | dev | test
    simplification: str = "easy"  # comma-separated simplification string ("" for none)
    observation: list[str] = field(default_factory=lambda: ["result", "look"])  # parts of each observation
    admissible: str = "on_demand"  # on_demand: fetch the valid list when read | always | never (free text only)
    log_admissible_rate: float = 0.0  # share of steps (after the first, always logged) whose list is logged anyway
    gold_cache: str = "runs/cache/scienceworld_gold"  # gold sequences per task/variation/simplification
    step_timeout_s: float = 30.0  # a JVM call slower than this is a hang: kill, restart, replay the episode


class ScienceWorldEnv:
    """ScienceWorld behind the `TextEnv` interface (one JVM per instance)."""

    name = "scienceworld"

    def __init__(self, cfg: ScienceWorldConfig | None = None, max_steps: int = 30) -> None:
        self.cfg = cfg or ScienceWorldConfig()
        _check(self.cfg)
        self.max_steps = max_steps
        self._sw: Any = None  # the package's ScienceWorldEnv (owns the JVM)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self._variations: dict[tuple[str, str], list[int]] = {}
        self._episode: tuple[str, int] | None = None
        self._taken: list[str] = []
        self._score = 0
        self._t = 0
        self._seed = 0
        self._offered: OnDemandActions | None = None  # the current state's list; expired when the state moves
        self.restarts = 0

    # -- JVM ---------------------------------------------------------------------------
    @property
    def java_process(self):
        """The JVM's process (None before the first reset); tests kill it to force a crash."""
        return None if self._sw is None else self._sw._gateway.java_process

    def _start(self) -> None:
        try:
            from scienceworld import ScienceWorldEnv as _SW
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ImportError("env.name=scienceworld needs `pip install scienceworld` (and a Java runtime)") from err
        logging.getLogger("py4j").setLevel(logging.CRITICAL)  # a killed JVM is handled here, not logged per call
        self._sw = _SW("", envStepLimit=10**6)  # the step limit is ours (max_steps, info.truncated)

    def _call(self, fn, *args):
        """Run one JVM call with the step timeout; a dead or hung JVM is restarted and EnvCrashed raised."""
        if self._sw is None:
            self._start()
        reached("scienceworld.call", self._kill_jvm)  # crash tests only (runtime/faults.py)
        fut = self._pool.submit(fn, *args)
        try:
            return fut.result(timeout=self.cfg.step_timeout_s)
        except concurrent.futures.TimeoutError:
            reason = f"ScienceWorld call {getattr(fn, '__name__', fn)} exceeded env.scienceworld.step_timeout_s="
            reason += f"{self.cfg.step_timeout_s}"
        except Exception as err:  # py4j errors when the JVM is gone
            if self.java_process is not None and self.java_process.poll() is None:
                raise
            reason = f"ScienceWorld JVM died ({type(err).__name__})"
        self._restart()
        raise EnvCrashed(f"{reason}; restarted the JVM")

    def _kill_jvm(self) -> None:
        self.java_process.kill()
        self.java_process.wait()

    def _restart(self) -> None:
        self.restarts += 1
        old, self._sw = self._sw, None
        if old is not None:
            proc = old._gateway.java_process
            if proc.poll() is None:
                proc.kill()
            try:
                old._gateway.shutdown()
            except Exception:  # the gateway of a dead JVM may fail to shut down cleanly
                pass
            old.close = lambda: None  # its __del__ must not talk to the dead JVM
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self._episode = None
        self._start()

    def close(self) -> None:
        """End the JVM; safe to call more than once."""
        sw, self._sw = self._sw, None
        if sw is not None:
            try:
                sw.close()
            except Exception:  # already dead
                pass
            sw.close = lambda: None  # the package's __del__ calls close() again at collection
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -- tasks -------------------------------------------------------------------------
    def variations(self, task: str, split: str | None = None) -> list[int]:
        split = split or self.cfg.split
        key = (task, split)
        if key not in self._variations:
            if self._sw is None:
                self._start()
            if task not in self._sw.get_task_names():
                raise ValueError(
                    f"env.scienceworld.tasks: unknown task '{task}'; choose from {self._sw.get_task_names()}"
                )
            getter = {"train": "getVariationsTrain", "dev": "getVariationsDev", "test": "getVariationsTest"}[split]
            self._call(self._sw.load, task, 0, self.cfg.simplification, False)
            self._episode = None  # the simulator now holds another task: the next reset reloads its own
            self._variations[key] = list(self._call(getattr(self._sw.server, getter)))
        return self._variations[key]

    def task_for_seed(self, seed: int) -> tuple[str, int]:
        tasks = self.cfg.tasks
        task = tasks[seed % len(tasks)]
        vs = self.variations(task)
        return task, vs[(seed // len(tasks)) % len(vs)]

    # -- TextEnv -----------------------------------------------------------------------
    def reset(self, seed: int) -> Reset:
        task, variation = self.task_for_seed(seed)
        self._expire()
        if self._episode != (task, variation):
            self._call(self._sw.load, task, variation, self.cfg.simplification, False)
            self._episode = (task, variation)
        self._call(self._sw.server.reset)
        result = self._call(self._sw.server.step, "look around")
        self._taken, self._score, self._t, self._seed = [], 0, 0, seed
        description = self._call(self._sw.server.getTaskDescription)
        info = {"seed": seed, "task_name": task, "variation": variation}
        return Reset(self._observation(result, first=True), description, self._admissible(seed, 0), info)

    def step(self, action: str) -> Step:
        if self._episode is None:
            raise RuntimeError("ScienceWorldEnv.step called before reset")
        self._t += 1
        self._taken.append(action)
        self._expire()
        result = self._call(self._sw.server.step, action)
        score = int(round(100 * float(self._call(self._sw.server.getScore))))
        completed = bool(self._call(self._sw.server.getCompleted))
        reward = (score - self._score) / 100.0
        self._score = score
        failed = score < 0
        won = completed and not failed
        truncated = not (completed or failed) and self._t >= self.max_steps
        done = completed or failed or truncated
        info = {"won": won, "failed": failed, "truncated": truncated, "score": score}
        adm = None if done else self._admissible(self._seed, self._t)
        return Step(self._observation(result), reward, done, adm, info)

    def gold_actions(self) -> list[str] | None:
        """The rest of the cached gold sequence while the episode has followed it; None once it left it."""
        if self._episode is None:
            raise RuntimeError("ScienceWorldEnv.gold_actions called before reset")
        episode = self._episode
        gold = self.gold_sequence(*episode)
        if self._episode is None:  # generating it reloaded the simulator: put the episode back where it was
            self._call(self._sw.load, *episode, self.cfg.simplification, False)
            self._episode = episode
            self._call(self._sw.server.reset)
            self._call(self._sw.server.step, "look around")
            for action in self._taken:  # deterministic: the same state, score and valid list
                self._call(self._sw.server.step, action)
        n = len(self._taken)
        if self._taken != gold[:n]:
            return None
        return gold[n:]

    def gold_sequence(self, task: str, variation: int) -> list[str]:
        """The simulator's gold sequence from reset (after its initial `look around`), cached on disk."""
        simpl = self.cfg.simplification or "none"
        path = Path(self.cfg.gold_cache) / f"{task}-{variation}-{simpl.replace(',', '+')}.json"
        if path.is_file():
            return json.loads(path.read_text())["actions"]
        self._call(self._sw.load, task, variation, self.cfg.simplification, True)
        gold = list(self._call(self._sw.server.getGoldActionSequence))
        self._episode = None  # the simulator was reloaded: the next reset reloads the episode's task
        if gold and gold[0] == "look around":
            gold = gold[1:]
        atomic_write_json(path, {"task": task, "variation": variation, "simplification": simpl, "actions": gold})
        return gold

    # -- internals ---------------------------------------------------------------------
    def _observation(self, result: str, first: bool = False) -> str:
        parts = []
        for part in self.cfg.observation:
            if part == "result":
                parts.append(result.strip())
            elif part == "look" and not (first and "result" in self.cfg.observation):  # reset's result is a look
                parts.append(self._call(self._sw.server.freeActionLook).strip())
            else:
                parts.append(self._call(self._sw.server.freeActionInventory).strip())
        return "\n".join(p for p in parts if p)

    def _valid(self) -> list[str]:
        return sorted(set(self._call(self._sw.server.getValidActionObjectCombinations)))

    def _admissible(self, seed: int, t: int) -> OnDemandActions | None:
        mode = self.cfg.admissible
        if mode == "never":
            return None
        self._offered = actions = OnDemandActions(self._valid)
        # which steps are logged is a function of (seed, t): reproducible. The first step's list is always
        # logged (one fetch per episode): simulated rollouts start from logged first steps and their lists.
        rate = self.cfg.log_admissible_rate
        if mode == "always" or t == 0 or (rate > 0 and (zlib.crc32(f"{seed}:{t}".encode()) % 10_000) < rate * 10_000):
            len(actions)  # fetch now: the log keeps it
        return actions

    def _expire(self) -> None:
        if self._offered is not None:
            self._offered.expire()
            self._offered = None


def _check(cfg: ScienceWorldConfig) -> None:
    if not cfg.tasks:
        raise ValueError("env.scienceworld.tasks: expected at least one task name")
    if cfg.split not in SPLITS:
        raise ValueError(f"env.scienceworld.split: expected one of {list(SPLITS)}, got '{cfg.split}'")
    bad = [p for p in cfg.observation if p not in PARTS]
    if bad or not cfg.observation:
        raise ValueError(f"env.scienceworld.observation: expected a non-empty list from {list(PARTS)}, got {bad}")
    if cfg.admissible not in ("on_demand", "always", "never"):
        raise ValueError(f"env.scienceworld.admissible: expected on_demand, always or never, got '{cfg.admissible}'")
    if not 0.0 <= cfg.log_admissible_rate <= 1.0:
        raise ValueError(
            f"env.scienceworld.log_admissible_rate: expected a share in [0, 1], got {cfg.log_admissible_rate}"
        )
    if cfg.step_timeout_s <= 0:
        raise ValueError(f"env.scienceworld.step_timeout_s: expected > 0, got {cfg.step_timeout_s}")


_SW_ROOM = re.compile(r"This room is called the ([^.]+)\.")


def scienceworld_state_key(observation: str) -> str | None:
    """What a ScienceWorld observation exposes of the world's state, for fidelity: the room its `look` part
    names (None when the observation holds no look). Objects' states are left out: their descriptions change
    with every tick of the simulation (temperatures, a growing plant), so a text comparison would count
    noise."""
    rooms = _SW_ROOM.findall(observation)
    return rooms[-1].strip() if rooms else None
