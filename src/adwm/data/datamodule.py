"""`TrajectoryDataModule`: logged transitions with their history window, split by episode.

A sample is one logged step t: the last `history` observations up to o_t and
the actions between them, the action a_t, the next observation o_{t+1}, r_t,
done_t, the episode's task, and the admissible lists of o_t and o_{t+1} over
the logged action vocabulary. `done` is termination by the environment: an
episode cut at the step limit (`info.truncated` in the log) does not end in a
terminal state, since the limit is the simulation's horizon, not a property of
the state. Observations travel as indices into the module's observation
table, so a batch encodes each distinct text once. Behaviour log-probs are
never loaded (privileged).
"""

from __future__ import annotations

from collections.abc import Iterator

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from adwm.data.config import DataConfig
from adwm.data.schema import Episode, LogFormatError, read_episodes


class _Transitions(Dataset):
    def __init__(self, items: list[dict]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        return self.items[i]


class EpochShuffle(Sampler[int]):
    """A shuffle that is a function of (seed, epoch) alone (Lightning calls `set_epoch` at each epoch's
    start), so a fit resumed at an epoch boundary sees the batches the uninterrupted fit saw."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=gen).tolist())


def read_log(cfg: DataConfig, env: str | None = None) -> list[Episode]:
    """The episodes of `cfg.log` the world model learns from: the first `cfg.max_episodes` (0: all)."""
    return read_episodes(cfg.log, env=env)[: cfg.max_episodes or None]


class TrajectoryDataModule(L.LightningDataModule):
    def __init__(self, cfg: DataConfig, seed: int = 0, env: str | None = None) -> None:
        super().__init__()
        self.env = env  # the environment the log must come from (None: any)
        self.cfg, self.seed = cfg, seed
        self.observations: list[str] = []
        self.actions: list[str] = []
        self.tasks: list[str] = []
        self.n_worlds = 0
        self.world_ids: dict[tuple[str, str], int] = {}
        self.train_items: list[dict] = []
        self.val_items: list[dict] = []

    # -- building ----------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self.train_items:
            return
        episodes = read_log(self.cfg, self.env)
        obs_index: dict[str, int] = {}
        act_index: dict[str, int] = {}
        task_index: dict[str, int] = {}
        world_index: dict[tuple[str, str], int] = {}  # a world: an episode's task and first observation

        def obs_id(text: str) -> int:
            return obs_index.setdefault(text, len(obs_index))

        def act_id(text: str) -> int:
            return act_index.setdefault(text, len(act_index))

        per_episode = [
            self._transitions(
                ep,
                obs_id,
                act_id,
                task_index.setdefault(ep.task, len(task_index)),
                world_index.setdefault((ep.task, ep.steps[0].observation if ep.steps else ""), len(world_index)),
            )
            for ep in episodes
        ]
        if not any(per_episode):
            raise LogFormatError(f"{self.cfg.log}: no usable steps (every step needs an action and a next observation)")
        order = np.random.default_rng(self.seed).permutation(len(episodes))
        n_val = int(round(len(episodes) * self.cfg.val_fraction))
        if self.cfg.val_fraction > 0 and len(episodes) >= 2:
            n_val = min(max(n_val, 1), len(episodes) - 1)
        val = set(order[:n_val].tolist())
        self.train_items = [x for i, items in enumerate(per_episode) if i not in val for x in items]
        self.val_items = [x for i, items in enumerate(per_episode) if i in val for x in items]
        # the episodes themselves, split alike (the log's controls in simulation/worlds.py read them)
        self.train_episodes = [ep for i, ep in enumerate(episodes) if i not in val]
        self.val_episodes = [ep for i, ep in enumerate(episodes) if i in val]
        self.observations = list(obs_index)
        self.actions = list(act_index)
        self.tasks = list(task_index)
        self.n_worlds = len(world_index)
        self.world_ids = world_index  # (task, first observation) -> world id

    def _transitions(self, ep: Episode, obs_id, act_id, task: int, world: int) -> list[dict]:
        obs = [obs_id(s.observation) for s in ep.steps] + [obs_id(ep.final_observation)]
        acts = [act_id(s.action) for s in ep.steps]
        adm = [[act_id(a) for a in s.admissible] if s.admissible is not None else None for s in ep.steps]
        items = []
        for t, step in enumerate(ep.steps):
            if not step.action.strip():
                continue
            lo = max(0, t - self.cfg.history + 1)
            items.append(
                {
                    "history_obs": obs[lo : t + 1],  # o_lo .. o_t
                    "history_actions": acts[lo:t],  # a_lo .. a_{t-1}
                    "action": acts[t],
                    "next_obs": obs[t + 1],
                    "reward": step.reward,
                    "done": ep.ended(t),
                    "admissible": adm[t],
                    "next_admissible": adm[t + 1] if t + 1 < len(adm) else None,
                    "t": t,
                    "task": task,
                    "world": world,
                }
            )
        return items

    def admissible_states(self, split: str = "train") -> tuple[list[str], list[list[int]]]:
        """Distinct observations o_t of a split that have a logged admissible list, with that list."""
        items = {"train": self.train_items, "val": self.val_items}[split]
        seen: dict[int, list[int]] = {}
        for x in items:
            if x["admissible"] is not None:
                seen.setdefault(x["history_obs"][-1], x["admissible"])
        return [self.observations[o] for o in seen], list(seen.values())

    def arrivals(self, states: list[str], split: str = "train") -> list[list[int]]:
        """For each observation text in `states`, the ids of the split's logged actions whose transitions
        led to it (empty for a first observation that no action led to)."""
        items = {"train": self.train_items, "val": self.val_items}[split]
        led: dict[int, set[int]] = {}
        for x in items:
            led.setdefault(x["next_obs"], set()).add(x["action"])
        index = {text: i for i, text in enumerate(self.observations)}
        return [sorted(led.get(index[s], ())) for s in states]

    def transitions(self, states: list[str], split: str = "train") -> list[tuple[int, int, int, int, float]]:
        """The split's distinct logged transitions between observation texts of `states`, as (index in
        `states` of o_t, action id, index of o_{t+1}, world id, mean logged reward of the transition); a step
        whose o_t or o_{t+1} is not in `states` (a last observation, an action outside the vocabulary) is
        left out."""
        items = {"train": self.train_items, "val": self.val_items}[split]
        index = {text: i for i, text in enumerate(states)}
        at = [index.get(text, -1) for text in self.observations]
        paid: dict[tuple[int, int, int, int], list[float]] = {}
        for x in items:
            src, dst = at[x["history_obs"][-1]], at[x["next_obs"]]
            if src >= 0 and dst >= 0 and x["action"] >= 0:
                paid.setdefault((src, x["action"], dst, x["world"]), []).append(float(x["reward"]))
        return [(*key, sum(r) / len(r)) for key, r in sorted(paid.items())]

    def state_worlds(self, states: list[str], split: str = "train") -> list[list[int]]:
        """For each observation text in `states`, the ids of the logged worlds (an episode's task and first
        observation) in which the split saw it (as o_t or as a next observation)."""
        items = {"train": self.train_items, "val": self.val_items}[split]
        seen: dict[int, set[int]] = {}
        for x in items:
            seen.setdefault(x["history_obs"][-1], set()).add(x["world"])
            seen.setdefault(x["next_obs"], set()).add(x["world"])
        index = {text: i for i, text in enumerate(self.observations)}
        return [sorted(seen.get(index[s], ())) for s in states]

    @property
    def free_form(self) -> bool:
        """Whether no logged step has an admissible list (agents that write their actions)."""
        return all(x["admissible"] is None for x in self.train_items + self.val_items)

    def logged_states(self, split: str = "train") -> list[str]:
        """Distinct observations o_t of a split (the bank of a free-form log)."""
        items = {"train": self.train_items, "val": self.val_items}[split]
        return [self.observations[o] for o in dict.fromkeys(x["history_obs"][-1] for x in items)]

    def agent_states(self, split: str = "train") -> list[dict]:
        """Distinct (task, o_t) of a split with the admissible texts and the logged action's index in
        them: what an agent read and chose from (steps whose action is off the list are skipped). In a
        free-form log the candidates are the whole logged action vocabulary (the projector's distillation
        cuts them to the logged action and a sample of the others)."""
        items = {"train": self.train_items, "val": self.val_items}[split]
        free_form = self.free_form
        seen: dict[tuple[int, int], dict] = {}
        for x in items:
            key = (x["task"], x["history_obs"][-1])
            listed = range(len(self.actions)) if free_form else x["admissible"]
            if listed is None or x["action"] not in listed or key in seen:
                continue
            seen[key] = {
                "task": self.tasks[x["task"]],
                "observation": self.observations[x["history_obs"][-1]],
                "candidates": [self.actions[a] for a in listed],
                "logged": list(listed).index(x["action"]),
            }
        return list(seen.values())

    # -- batching ------------------------------------------------------------------
    def collate(self, batch: list[dict]) -> dict[str, torch.Tensor]:
        """Left-padded history windows (B, W), multi-hot admissible sets (B, |actions|)."""
        w, n_act = self.cfg.history, len(self.actions)
        b = len(batch)
        hist_obs = torch.full((b, w), -1, dtype=torch.long)
        hist_act = torch.full((b, w), -1, dtype=torch.long)  # hist_act[:, -1] is a_t
        adm = torch.zeros((b, n_act), dtype=torch.bool)
        next_adm = torch.zeros((b, n_act), dtype=torch.bool)
        has_adm = torch.zeros(b, dtype=torch.bool)
        has_next_adm = torch.zeros(b, dtype=torch.bool)
        for i, x in enumerate(batch):
            k = len(x["history_obs"])
            hist_obs[i, w - k :] = torch.tensor(x["history_obs"])
            hist_act[i, w - k :] = torch.tensor(x["history_actions"] + [x["action"]])
            if x["admissible"] is not None:
                adm[i, x["admissible"]] = True
                has_adm[i] = True
            if x["next_admissible"] is not None:
                next_adm[i, x["next_admissible"]] = True
                has_next_adm[i] = True
        # each distinct observation text of the batch is encoded once: ids become local indices into `texts`
        used = torch.unique(torch.cat([hist_obs[hist_obs >= 0], torch.tensor([x["next_obs"] for x in batch])]))
        local = {int(g): i for i, g in enumerate(used)}
        hist_local = hist_obs.clone().apply_(lambda g: local.get(g, -1))
        tasks = sorted({x["task"] for x in batch})  # task texts follow the observations in `texts`
        task_local = {g: len(used) + i for i, g in enumerate(tasks)}
        return {
            "texts": [self.observations[int(g)] for g in used] + [self.tasks[g] for g in tasks],  # (U,) distinct texts
            "history_obs": hist_local,  # (B, W) indices into texts, -1 = before the episode
            "history_actions": hist_act,  # (B, W) logged-action ids, last = a_t, -1 = none
            "next_obs": torch.tensor([local[x["next_obs"]] for x in batch]),  # (B,) index into texts
            "next_obs_id": torch.tensor([x["next_obs"] for x in batch]),  # (B,) global observation id
            "task": torch.tensor([task_local[x["task"]] for x in batch]),  # (B,) index into texts
            "reward": torch.tensor([x["reward"] for x in batch], dtype=torch.float32),
            "done": torch.tensor([x["done"] for x in batch], dtype=torch.float32),
            "admissible": adm,  # (B, V) of o_t
            "has_admissible": has_adm,
            "next_admissible": next_adm,  # (B, V) of o_{t+1}
            "has_next_admissible": has_next_adm,
            "t": torch.tensor([x["t"] for x in batch]),
        }

    def texts(self) -> list[str]:
        """Every text a batch can hold: the logged observations and the tasks."""
        return [*self.observations, *self.tasks]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            _Transitions(self.train_items),
            self.cfg.batch_size,
            sampler=EpochShuffle(len(self.train_items), self.seed),
            collate_fn=self.collate,
            num_workers=self.cfg.num_workers,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(
            _Transitions(self.val_items),
            self.cfg.batch_size,
            collate_fn=self.collate,
            num_workers=self.cfg.num_workers,
        )
