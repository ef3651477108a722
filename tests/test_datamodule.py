"""TrajectoryDataModule: episode-level split, history windows, batches, and named errors."""

from __future__ import annotations

import json

import pytest

from adwm.data.config import DataConfig
from adwm.data.datamodule import TrajectoryDataModule
from adwm.data.schema import LogFormatError, read_episodes
from adwm.envs import EnvConfig
from adwm.policies.config import PolicyConfig
from adwm.stages.collect import collect
from adwm.stages.config import BehaviourEntry, CollectConfig


@pytest.fixture(scope="module")
def log_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("dm") / "log.jsonl"
    cfg = CollectConfig(
        n_episodes=20, n_envs=8, out=str(out), behaviour=[BehaviourEntry(PolicyConfig(name="u", kind="uniform"), 1.0)]
    )
    return collect(cfg, EnvConfig(max_steps=12), seed=0, progress=False)


def test_split_by_episode_and_deterministic(log_path):
    dm = TrajectoryDataModule(DataConfig(log=str(log_path), val_fraction=0.25, history=3), seed=0)
    dm.setup()
    n_steps = sum(len(e.steps) for e in read_episodes(log_path))
    assert len(dm.train_items) + len(dm.val_items) == n_steps
    first_obs = lambda items: {dm.observations[x["history_obs"][0]] for x in items if x["t"] == 0}  # noqa: E731
    assert len(first_obs(dm.val_items)) == 5 and not first_obs(dm.val_items) & first_obs(dm.train_items)
    again = TrajectoryDataModule(DataConfig(log=str(log_path), val_fraction=0.25, history=3), seed=0)
    again.setup()
    assert again.val_items == dm.val_items


def test_max_episodes_keeps_the_first_episodes_of_the_log(log_path):
    dm = TrajectoryDataModule(DataConfig(log=str(log_path), val_fraction=0.25, max_episodes=8), seed=0)
    dm.setup()
    first = read_episodes(log_path)[:8]
    assert sorted(e.index for e in dm.train_episodes + dm.val_episodes) == [e.index for e in first]
    assert len(dm.val_episodes) == 2 and len(dm.train_items) + len(dm.val_items) == sum(len(e.steps) for e in first)
    everything = TrajectoryDataModule(DataConfig(log=str(log_path), max_episodes=100), seed=0)  # more than logged
    everything.setup()
    assert len(everything.train_episodes + everything.val_episodes) == 20
    with pytest.raises(ValueError, match=r"data.max_episodes: expected >= 0, got -1"):
        DataConfig(log=str(log_path), max_episodes=-1)


def test_history_window_and_batch_match_the_log(log_path):
    dm = TrajectoryDataModule(DataConfig(log=str(log_path), val_fraction=0.0, history=3, batch_size=8), seed=0)
    dm.setup()
    ep = read_episodes(log_path)[0]
    t = 4
    item = next(
        x for x in dm.train_items if x["t"] == t and dm.observations[x["history_obs"][-1]] == ep.steps[t].observation
    )
    assert [dm.observations[i] for i in item["history_obs"]] == [s.observation for s in ep.steps[t - 2 : t + 1]]
    assert [dm.actions[i] for i in item["history_actions"]] == [s.action for s in ep.steps[t - 2 : t]]
    assert dm.actions[item["action"]] == ep.steps[t].action
    assert dm.observations[item["next_obs"]] == ep.steps[t + 1].observation
    batch = next(iter(dm.train_dataloader()))
    assert batch["history_obs"].shape == (8, 3) and batch["history_actions"].shape == (8, 3)
    assert batch["admissible"].shape == (8, len(dm.actions)) and batch["has_admissible"].all()
    assert (batch["history_obs"][:, -1] >= 0).all()  # o_t is always there
    assert len(set(batch["texts"])) == len(batch["texts"])
    assert [batch["texts"][j] for j in batch["next_obs"]] == [dm.observations[g] for g in batch["next_obs_id"]]
    first = batch["history_obs"][:, 0] == -1  # padded windows start an episode
    assert ((batch["t"] < 2) == first).all()
    # the episode's task text follows the observations in `texts`
    tasks = [batch["texts"][j] for j in batch["task"]]
    assert all(dm.tasks.index(t) >= 0 for t in tasks) and (batch["task"] >= len(batch["texts"]) - len(set(tasks))).all()


def test_done_marks_termination_not_the_step_limit(tmp_path):
    """An episode cut at the step limit (info.truncated) has no terminal step; a won one ends in one."""
    from adwm.data.schema import Episode, StepRecord

    def episode(i: int, truncated: bool) -> str:
        steps = [StepRecord(f"room {i} {t}", "look", 0.0, t == 2) for t in range(3)]
        return Episode("builtin", i, "task", "u", steps, "end", i, {"truncated": truncated}).to_json()

    log = tmp_path / "log.jsonl"
    log.write_text(episode(0, truncated=True) + "\n" + episode(1, truncated=False) + "\n")
    dm = TrajectoryDataModule(DataConfig(log=str(log), val_fraction=0.0), seed=0)
    dm.setup()
    assert [x["done"] for x in dm.train_items] == [False, False, False, False, False, True]


def test_bad_log_path_and_zero_usable_steps(tmp_path, log_path):
    with pytest.raises(FileNotFoundError, match="episode log .*missing.jsonl' does not exist"):
        TrajectoryDataModule(DataConfig(log=str(tmp_path / "missing.jsonl"))).setup()
    line = json.loads(log_path.read_text().splitlines()[0])
    for s in line["steps"]:
        s["action"] = "  "
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps(line) + "\n")
    with pytest.raises(LogFormatError, match="empty.jsonl: no usable steps"):
        TrajectoryDataModule(DataConfig(log=str(empty))).setup()
    with pytest.raises(ValueError, match=r"data.val_fraction: expected a share in \[0, 1\), got 1.0"):
        TrajectoryDataModule(DataConfig(log=str(empty), val_fraction=1.0))
