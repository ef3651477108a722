"""The learned world model picking each next state among the analogy world's proposals
(simulation/guided_analogy.py): the pick follows the sample, and the reward is the pick's edit or the heads'."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from adwm.data.schema import Episode, StepRecord
from adwm.guidance.config import GuidanceConfig
from adwm.policies.base import Policy
from adwm.simulation.analogy import AnalogyWorld
from adwm.simulation.config import GuidedAnalogyConfig
from adwm.simulation.guided_analogy import nearest_proposal, pick_probabilities, rollout_guided_analogy
from adwm.simulation.worlds import LoggedStart
from helpers import uniform_log_world_model

ROOM = "You are in the {}. The floor is empty. You carry nothing."
# `look` answered two ways in rooms the rollouts never visit: two proposals at every step of theirs
LOG = [
    Episode(
        "builtin",
        s,
        "Find the key.",
        "p",
        [StepRecord(ROOM.format(r), "look", w, False, ["look"])],
        f"{f} {ROOM.format(r)}",
    )
    for s, r, f, w in ((5, "cellar", "You look around.", 0.0), (6, "porch", "You see nothing new.", 0.25))
]
START = ROOM.format("study")
CALM, NEWS = f"You look around. {START}", f"You see nothing new. {START}"


class _Looks(Policy):
    name = "looks"

    def log_distributions(self, states):
        return [np.log(np.array([1.0 if a == "look" else 0.0 for a in s.admissible])) for s in states]


class _Toward:
    """A sampler whose every sample is one latent: the rollouts must pick the proposal of that text."""

    def __init__(self, z: torch.Tensor) -> None:
        self.z = z

    def sample(self, eps_fn, shape, gen, device):
        assert eps_fn(torch.zeros(shape), torch.zeros(shape[0], dtype=torch.long)).shape == shape
        return self.z.expand(shape).clone()


@pytest.fixture(scope="module")
def wm(tmp_path_factory):
    return uniform_log_world_model(tmp_path_factory.mktemp("guided"), 12, 6, 0.2, 3)[1].eval()


def _returns(wm, toward: str, rewards: str, reward_range=None, horizon=1, eta=0.0, temperature=0.0, n=6):
    starts = [LoggedStart("Find the key.", START, ["look"], 9)]
    return rollout_guided_analogy(
        wm,
        AnalogyWorld(LOG),
        _Looks(),
        starts,
        n,
        horizon,
        0.9,
        0,
        GuidanceConfig(eta=eta),
        _Toward(wm.encode([toward])[0]),
        rewards,
        reward_range,
        temperature=temperature,
    )


def test_the_nearest_proposal_is_the_one_closest_to_the_sample():
    latents = torch.randn(4, 2, 3, generator=torch.Generator().manual_seed(0))
    for k in range(4):
        assert nearest_proposal(latents[k] + 0.01, latents) == k


def test_each_rollout_takes_the_proposal_the_sample_lands_on_and_its_edits_reward(wm):
    # the log pays 0.25 for the second answer only; the frequency draw would mix them
    assert _returns(wm, NEWS, "edits").tolist() == [0.25] * 6
    assert _returns(wm, CALM, "edits").tolist() == [0.0] * 6
    # two steps: the second step's proposals are made from the state the first one picked
    assert _returns(wm, NEWS, "edits", horizon=2) == pytest.approx([0.25 + 0.9 * 0.25] * 6)


def test_a_soft_pick_weighs_the_logs_frequency_by_how_near_the_sample_lands():
    latents = torch.tensor([[[0.0, 0.0]], [[3.0, 0.0]], [[0.0, 1.0]]])
    sample = torch.tensor([[1.0, 0.0]])
    weights = torch.tensor([1.0, 2.0, 1.0])
    d2 = [1.0, 4.0, 2.0]  # squared distances to the sample; their mean is 7 / 3
    for temperature in (0.5, 2.0):
        logits = [np.log(w) - d / (temperature * 7 / 3) for w, d in zip([1.0, 2.0, 1.0], d2)]
        expected = np.exp(logits) / np.exp(logits).sum()
        got = pick_probabilities(sample, latents, weights, temperature)
        assert got.numpy() == pytest.approx(expected, rel=1e-9)
    assert pick_probabilities(sample, latents, weights, 0.0).tolist() == [1.0, 0.0, 0.0]  # the nearest
    far = pick_probabilities(sample, latents, weights, 1e9)  # the log's frequencies
    assert far.numpy() == pytest.approx([0.25, 0.5, 0.25], rel=1e-6)


def test_a_hot_pick_draws_both_answers_as_often_as_the_log_made_them(wm):
    # each answer logged once: at a high temperature the sample's pull fades and half the rollouts are paid
    returns = _returns(wm, NEWS, "edits", temperature=1e6, n=400)
    assert set(returns.tolist()) == {0.0, 0.25}
    assert returns.mean() == pytest.approx(0.125, abs=0.03)
    assert _returns(wm, NEWS, "edits", temperature=1e-3).tolist() == [0.25] * 6  # cold: the sample's pick


def test_the_heads_pay_what_they_read_on_the_picked_latent_clipped_to_the_logged_range(wm):
    from adwm.models.history import Window

    with torch.no_grad():
        window = Window.start(wm.encode([START]), wm.encode(["Find the key."]), wm.hparams.window, wm.cfg.d_action)
        a = wm.embed_actions(["look"])
        expected = float(wm.heads.transition(wm.encode([NEWS]), window.context(wm), a)[0][0])
    assert _returns(wm, NEWS, "heads") == pytest.approx([expected] * 6, abs=1e-6)
    assert _returns(wm, NEWS, "heads", reward_range=(0.1, 0.1)) == pytest.approx([0.1] * 6)


def test_continuation_guidance_and_an_unknown_reward_source_are_refused(wm):
    with pytest.raises(ValueError, match="guidance.eta=1.0: evaluate.world=guided_analogy"):
        _returns(wm, NEWS, "heads", eta=1.0)
    with pytest.raises(ValueError, match="evaluate.guided_analogy.rewards: expected one of"):
        _returns(wm, NEWS, "logged")
    with pytest.raises(ValueError, match="evaluate.guided_analogy.rewards: expected one of"):
        GuidedAnalogyConfig(rewards="logged")
    with pytest.raises(ValueError, match="evaluate.guided_analogy.temperature"):
        GuidedAnalogyConfig(temperature=-1.0)
