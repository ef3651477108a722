"""Fidelity metrics (simulation/fidelity.py) on a hand-built case: a world model whose sampler returns the
true next observation's latent must score 1 at every k; the controls' accuracies are computed by hand."""

from __future__ import annotations

import numpy as np

from adwm.data.schema import read_episodes
from adwm.envs.builtin import builtin_state_key
from adwm.envs.registry import state_key
from adwm.simulation.fidelity import replay_fidelity
from helpers import uniform_log_world_model


def test_builtin_state_key_reads_room_and_inventory():
    obs = "You take the key. You are in the kitchen. A box is here. You carry a key and a lamp."
    assert builtin_state_key(obs) == ("kitchen", "a key and a lamp")
    # the description's inventory, not `inventory`'s feedback; the items as a set
    assert builtin_state_key("You carry a pen. You are in the hall. You carry an owl, a pen and a cup.") == (
        "hall",
        "a cup, a pen and an owl",
    )
    assert builtin_state_key("You are in the hall. You carry a cup, an owl and a pen.")[1] == "a cup, a pen and an owl"
    assert state_key("builtin") is builtin_state_key and state_key("shop")("x") == "x"


def test_textworld_and_scienceworld_keys_read_what_the_env_exposes():
    # observations as the TextWorld adapter writes them (feedback, then the inventory line)
    arrive = (
        "-= Corridor =-\nYou arrive in a corridor. A standard one.\n\nThere is an exit to the north. "
        "Don't worry, there is no door.\nYou are carrying nothing."
    )
    took = "You take the knife from the table.\nYou are carrying: a knife and a fried purple potato."
    tw = state_key("textworld")
    assert tw(arrive) == ("Corridor", "nothing")
    assert tw(took) == (None, "a knife and a fried purple potato")
    assert tw("You open the fridge.") == (None, None)
    # ScienceWorld's look part names the room; object descriptions are left out
    look = "You move to the kitchen.\nThis room is called the kitchen. In it, you see: \n\tthe agent\n\ta fridge"
    assert state_key("scienceworld")(look) == "kitchen"
    assert state_key("scienceworld")("The door is now open.") is None


def test_a_perfect_model_scores_one_and_the_controls_score_as_computed_by_hand(tmp_path):
    dm, wm = uniform_log_world_model(tmp_path, n_episodes=12, max_steps=12, val_fraction=0.25, sampler_steps=2)
    episodes = read_episodes(dm.cfg.log, env="builtin")
    held, train = episodes[:4], episodes[4:]
    texts = list(
        dict.fromkeys(o for ep in episodes for o in [*(s.observation for s in ep.steps), ep.final_observation])
    )
    wm.build_proposal_bank(texts, [[] for _ in texts])
    step, horizon = [0], max(len(ep.steps) for ep in held)

    def perfect(eps_fn, shape, generator=None, device=None):  # the true next observation of each replay
        t = step[0] % horizon  # the learned model's replay, then the guided analogy's
        step[0] += 1
        return wm.encode(
            [ep.steps[t + 1].observation if t + 1 < len(ep.steps) else ep.final_observation for ep in held]
        )

    wm.sampler.sample = perfect
    out = replay_fidelity(wm, held, train, builtin_state_key, 0.9, 0, ks=(1, 5, 10))
    for k in (1, 5, 10):
        rows = [ep for ep in held if len(ep.steps) >= k]
        true = [ep.final_observation if k == len(ep.steps) else ep.steps[k].observation for ep in rows]
        assert out[f"fidelity/state_acc@{k}"] == 1.0
        stay = np.mean(
            [builtin_state_key(ep.steps[0].observation) == builtin_state_key(y) for ep, y in zip(rows, true)]
        )
        assert out[f"fidelity/stay_state_acc@{k}"] == stay
        assert 0.0 <= out[f"fidelity/nearest_state_acc@{k}"] <= 1.0
        assert 0.0 <= out[f"fidelity/analogy_state_acc@{k}"] <= 1.0
        assert out[f"fidelity/snap_ceiling_state_acc@{k}"] == 1.0  # every true observation is in the bank
        assert out[f"fidelity/snap_reachable@{k}"] == 1.0
        assert 0.0 <= out[f"fidelity/guided_analogy_state_acc@{k}"] <= 1.0
    # replayed in the analogy world of their own episodes, each step's proposal is its logged successor, so the
    # row reads the truth at every k (the pick among several proposals: tests/test_guided_analogy.py)
    step[0] = 0
    own = replay_fidelity(wm, held, held, builtin_state_key, 0.9, 0, ks=(1, 5, 10))
    for k in (1, 5, 10):
        assert own[f"fidelity/guided_analogy_state_acc@{k}"] == 1.0
    assert out["fidelity/logged_end_rate"] == np.mean([not ep.info.get("truncated", False) for ep in held])
    assert 0.0 <= out["fidelity/sim_end_prob"] <= 1.0 and out["fidelity/episodes"] == 4


def test_the_snap_ceiling_is_the_state_of_the_banked_text_nearest_to_the_true_one(tmp_path):
    """A bank of the training split's texts alone: the ceiling is read off the nearest banked latent of
    each true observation, found here by a plain distance matrix."""
    import torch

    dm, wm = uniform_log_world_model(tmp_path, n_episodes=12, max_steps=12, val_fraction=0.25, sampler_steps=2)
    episodes = read_episodes(dm.cfg.log, env="builtin")
    held, train = episodes[:4], episodes[4:]
    bank = list(dict.fromkeys(o for ep in train for o in [*(s.observation for s in ep.steps), ep.final_observation]))
    wm.build_proposal_bank(bank, [[] for _ in bank])
    out = replay_fidelity(wm, held, train, builtin_state_key, 0.9, 0, ks=(1, 5), by_action=False)
    keys = [builtin_state_key(t) for t in bank]
    for k in (1, 5):
        rows = [ep for ep in held if len(ep.steps) >= k]
        true = [ep.final_observation if k == len(ep.steps) else ep.steps[k].observation for ep in rows]
        nearest = torch.cdist(wm.encode(true).flatten(1), wm.encode(bank).flatten(1)).argmin(1).tolist()
        expected = np.mean([keys[j] == builtin_state_key(y) for j, y in zip(nearest, true)])
        assert out[f"fidelity/snap_ceiling_state_acc@{k}"] == expected
        assert out[f"fidelity/snap_reachable@{k}"] == np.mean([builtin_state_key(y) in keys for y in true])
