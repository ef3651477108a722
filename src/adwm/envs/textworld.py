"""TextWorld (PyPI `textworld`) behind the `TextEnv` interface, on games generated offline.

* Games are generated in-process (the cooking challenge, or `custom` quests) from config settings and
  seeds into a cache directory, once: a game file is named by a hash of everything that generates it
  and reused by every later run (generation costs ~3-6 s a game).
* `reset(seed)` plays game `seed % games` of the pool (game seeds `game_seed + i`): a fixed pool keeps
  the one-time generation cost bounded while logs, ground truth and agent training draw many episodes.
* `step` returns the cumulative score; reward = score change / max score. A cooking game can be lost
  (`info.failed`); done at a win, a loss or `max_steps` (`info.truncated`).
* Observations drop the opening banner and the status line after the prompt; admissible commands
  (15-60) are the candidate set; `gold_actions()` is the game's winning policy from the current state.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from adwm.envs.base import Reset, Step
from adwm.runtime.atomic import atomic_write_json

CHALLENGES = ("tw-cooking", "custom")
PARTS = ("feedback", "description", "inventory")


@dataclass
class CookingSettings:
    recipe: int = 1  # ingredients in the recipe
    take: int = 1  # ingredients to find (<= recipe)
    go: int = 6  # rooms: 1, 6, 9 or 12
    open: bool = True  # containers and doors need opening
    cook: bool = True  # ingredients need cooking (burning one loses the game)
    cut: bool = True  # ingredients need cutting
    drop: bool = False  # limited inventory
    split: str = "train"  # food items split of the challenge: train | valid | test


@dataclass
class CustomSettings:
    world_size: int = 4  # rooms
    nb_objects: int = 8
    quest_length: int = 4


@dataclass
class TextWorldConfig:
    challenge: str = "tw-cooking"  # tw-cooking | custom
    games: int = 16  # size of the game pool
    game_seed: int = 0  # game i of the pool is generated with seed game_seed + i
    cooking: CookingSettings = field(default_factory=CookingSettings)
    custom: CustomSettings = field(default_factory=CustomSettings)
    observation: list[str] = field(default_factory=lambda: ["feedback", "inventory"])  # parts per observation
    cache: str = "runs/cache/textworld"  # generated games, reused across runs


# jericho (under textworld) warns on every generated game that it cannot detect score changes by itself;
# this adapter reads scores from textworld's own state, so the warning says nothing here
warnings.filterwarnings("ignore", message=r".*(is not fully supported|in an unsupported game).*")
_PROMPT_TAIL = re.compile(r"\n*>[^\n]*$")  # "\n\n>   <spaces>  -= Kitchen =-0/4": the prompt and status line
_RESTART = re.compile(r"\n*Would you like to RESTART.*$", re.S)  # the interpreter's menu after a win or loss


def clean_feedback(text: str, objective: str | None = None) -> str:
    """Drop the opening banner (everything before the objective) and the prompt/status line at the end."""
    if objective and objective in text:
        text = text[text.index(objective) + len(objective) :]
    text = _RESTART.sub("", _PROMPT_TAIL.sub("", text.rstrip()))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


class TextWorldEnv:
    """A pool of generated TextWorld games behind the `TextEnv` interface."""

    name = "textworld"

    def __init__(self, cfg: TextWorldConfig | None = None, max_steps: int = 50) -> None:
        self.cfg = cfg or TextWorldConfig()
        _check(self.cfg)
        self.max_steps = max_steps
        self._env: Any = None
        self._game: Path | None = None
        self._state: Any = None
        self._t = 0
        self._score = 0
        self.generated = 0  # games this instance generated (the rest came from the cache)

    # -- games -------------------------------------------------------------------------
    def settings(self) -> dict:
        return asdict(self.cfg.cooking) if self.cfg.challenge == "tw-cooking" else asdict(self.cfg.custom)

    def game_path(self, index: int) -> Path:
        seed = self.cfg.game_seed + index
        key = json.dumps({"challenge": self.cfg.challenge, "settings": self.settings(), "seed": seed}, sort_keys=True)
        digest = hashlib.sha1(key.encode()).hexdigest()[:10]
        return Path(self.cfg.cache) / f"{self.cfg.challenge}-{seed}-{digest}.z8"

    def game(self, index: int) -> Path:
        """The compiled game `index` of the pool, generated on first use."""
        path = self.game_path(index)
        if not path.is_file():
            self._generate(self.cfg.game_seed + index, path)
            self.generated += 1
        return path

    def _generate(self, seed: int, path: Path) -> None:
        import textworld
        from textworld.generator import compile_game

        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")  # compiled then renamed: no half-written game
        options = textworld.GameOptions()
        options.seeds = seed
        options.path = str(tmp)
        options.force_recompile = True
        options.file_ext = ".z8"
        if self.cfg.challenge == "tw-cooking":
            from textworld.challenges.tw_cooking import cooking

            game = cooking.make({**self.settings(), "recipe_seed": seed}, options)
        else:
            c = self.cfg.custom
            options.nb_rooms, options.nb_objects = c.world_size, c.nb_objects
            options.chaining.max_depth = options.quest_length = c.quest_length
            game = textworld.generator.make_game(options)
        compiled = Path(compile_game(game, options))
        for sib in compiled.parent.glob(f"{compiled.stem}.*"):  # the .z8 and its .json metadata
            sib.replace(path.with_suffix(sib.suffix))
        atomic_write_json(path.with_suffix(".settings.json"), {"seed": seed, **self.settings()})

    # -- TextEnv -----------------------------------------------------------------------
    def reset(self, seed: int) -> Reset:
        import textworld

        game = self.game(seed % self.cfg.games)
        if game != self._game:
            self.close()
            infos = textworld.EnvInfos(
                admissible_commands=True,
                policy_commands=True,
                max_score=True,
                won=True,
                lost=True,
                objective=True,
                description=True,
                inventory=True,
            )
            self._env = textworld.start(str(game), request_infos=infos)
            self._game = game
        self._state = self._env.reset()
        self._t, self._score = 0, 0
        s = self._state
        info = {"seed": seed, "game": game.name, "max_score": s.max_score}
        return Reset(self._observation(s, first=True), clean_feedback(s.objective), self._admissible(s), info)

    def step(self, action: str) -> Step:
        if self._state is None:
            raise RuntimeError("TextWorldEnv.step called before reset")
        self._t += 1
        s, score, game_over = self._env.step(action)
        self._state = s
        reward = (score - self._score) / max(s.max_score, 1)
        self._score = score
        won, lost = bool(s.won), bool(s.lost)
        truncated = not (won or lost or game_over) and self._t >= self.max_steps
        done = won or lost or game_over or truncated
        info = {"won": won, "failed": lost, "truncated": truncated, "score": score, "max_score": s.max_score}
        return Step(self._observation(s), reward, done, None if done else self._admissible(s), info)

    def gold_actions(self) -> list[str] | None:
        """The game's winning commands from the current state (None when it can no longer be won)."""
        if self._state is None:
            raise RuntimeError("TextWorldEnv.gold_actions called before reset")
        return list(self._state.policy_commands) or None

    def close(self) -> None:
        env, self._env, self._game, self._state = self._env, None, None, None
        if env is not None:
            env.close()

    # -- internals ---------------------------------------------------------------------
    def _observation(self, s, first: bool = False) -> str:
        parts = []
        for part in self.cfg.observation:
            if part == "feedback":
                parts.append(clean_feedback(s.feedback, s.objective if first else None))
            elif part == "description":
                parts.append(clean_feedback(s.description))
            else:
                parts.append(clean_feedback(s.inventory))
        return "\n".join(p for p in parts if p)

    @staticmethod
    def _admissible(s) -> list[str]:
        return sorted(set(s.admissible_commands))


def _check(cfg: TextWorldConfig) -> None:
    if cfg.challenge not in CHALLENGES:
        raise ValueError(f"env.textworld.challenge: expected one of {list(CHALLENGES)}, got '{cfg.challenge}'")
    if cfg.games < 1:
        raise ValueError(f"env.textworld.games: expected a pool of at least 1 game, got {cfg.games}")
    bad = [p for p in cfg.observation if p not in PARTS]
    if bad or not cfg.observation:
        raise ValueError(f"env.textworld.observation: expected a non-empty list from {list(PARTS)}, got {bad}")
    if cfg.cooking.go not in (1, 6, 9, 12):
        raise ValueError(f"env.textworld.cooking.go: expected 1, 6, 9 or 12 rooms, got {cfg.cooking.go}")
    if not 1 <= cfg.cooking.take <= cfg.cooking.recipe:
        raise ValueError(
            f"env.textworld.cooking.take: expected 1 <= take <= recipe ({cfg.cooking.recipe}), got {cfg.cooking.take}"
        )
    if cfg.cooking.split not in ("train", "valid", "test"):
        raise ValueError(f"env.textworld.cooking.split: expected train, valid or test, got '{cfg.cooking.split}'")


_TW_ROOM = re.compile(r"^-= (.+?) =-$", re.M)
_TW_CARRY = re.compile(r"^You are carrying(?::)? ?(.*?)\.?$", re.M)


def textworld_state_key(observation: str) -> tuple[str | None, str | None]:
    """What a TextWorld observation exposes of the world's state, for fidelity: the room it announces (only on
    arrival or a look: None otherwise) and the inventory line (with the default `inventory` part, on every
    step). The rest is feedback and description, which follow from them."""
    room, carry = _TW_ROOM.findall(observation), _TW_CARRY.findall(observation)
    return (room[-1] if room else None, carry[-1].strip() if carry else None)
