"""The simulated rollouts' config and the worlds' names (light: no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from adwm.runtime.checks import at_least, require

CANDIDATE_RULES = ("retrieval", "sample", "threshold")

CALIBRATIONS = ("none", "shift", "backbone", "model_share")

PROPOSAL_REWARDS = ("heads", "edits")

SNAP_WORLD_RULES = ("none", "outcome", "state")


@dataclass(frozen=True)
class WorldSpec:
    """What the config needs to know of a world before anything is built (the classes: simulation/registry.py)."""

    learned: bool  # reads the fitted world model (`adwm fit` must have run)
    reads_latents: bool  # the agent reads latents: the projector and continuation guidance apply
    control: bool  # a control or reference beside the method, never a default
    summary: str


# what `adwm evaluate` rolls the agent out in (`evaluate.world`); each world's own settings are the config
# node of the same name under `evaluate` where it has any (`evaluate.diffusion`, `evaluate.guided_analogy`)
WORLDS = {
    "diffusion": WorldSpec(True, True, False, "the learned world model; the agent reads its latents"),
    "guided_analogy": WorldSpec(
        True, False, False, "the learned world model picks each next state among the analogy world's proposals"
    ),
    "oracle": WorldSpec(False, False, True, "the real environment from the logged starts: the estimator's floor"),
    "nearest": WorldSpec(False, False, True, "certainty equivalence on the log's transitions"),
    "stay": WorldSpec(False, False, True, "the state is kept; rewards and ends drawn as in `nearest`"),
    "analogy": WorldSpec(False, False, True, "the log's edits applied by analogy, picked by the log's frequencies"),
    "autoregressive": WorldSpec(
        False, False, True, "a causal language model of the log writes each next state token by token (a baseline)"
    ),
}


def world_spec(name: str, key: str = "evaluate.world") -> WorldSpec:
    if name not in WORLDS:
        raise ValueError(f"{key}: unknown world '{name}'; choose from {list(WORLDS)}")
    return WORLDS[name]


@dataclass
class SimulateConfig:
    """The rollouts every world runs: how many, how long, and the interval of their mean."""

    n_rollouts: int = 96  # per policy; start states drawn with replacement from the logged ones
    horizon: int = 0  # simulated steps; 0 = env.max_steps
    batch_size: int = 256  # rollouts advanced together
    ci_resamples: int = 2000  # bootstrap resamples of the rollout returns
    ci_level: float = 0.95

    def __post_init__(self) -> None:
        at_least(self, "evaluate.simulate", 1, ("n_rollouts", "batch_size", "ci_resamples"))
        at_least(self, "evaluate.simulate", 0, ("horizon",), "0 = env.max_steps")
        require(0 < self.ci_level < 1, "evaluate.simulate.ci_level", self.ci_level, "a value in (0, 1)")


@dataclass
class DiffusionConfig:
    """`evaluate.diffusion`: the learned world model's own settings (simulation/simulate.py)."""

    # each sampled latent replaced by the nearest logged one, so the agent, the heads and the next history read
    # only latents of real observations (sampled ones drift off them; decisions.md: snapping)
    snap: bool = True
    # the snap keeps to the logged states that the chosen action led to in the log (where it led anywhere):
    # the sample picks among the action's logged outcomes
    snap_by_action: bool = True
    # ... and to the logged states seen in the rollout's own logged world (the episodes it started from), so
    # the agent reads its world's text, not another world's: `outcome` = where the world showed the action's
    # outcome, else the outcomes anywhere; `state` = else any state of the world; `none` = every world alike
    # (so too where the bank was not told the logged worlds: `attach_logged_worlds`)
    snap_world: str = "state"
    # ... and, from a logged state by an action the rollout's world took there in the log, to the states that
    # transition led to; the other rules apply where the log never took the action from that state
    snap_by_transition: bool = True
    # with a reader that writes each state's text (ablation.reader=decoded): the rollout goes on from the
    # encoding of the text written, so the heads, the next candidates and the history read the state the agent
    # read (decisions.md: re-encoding); false: from the sample itself
    reencode: bool = True
    # where a snap followed a logged transition of the rollout's world, the reward is that transition's logged
    # one (its mean), not the reward head's
    logged_rewards: bool = False
    # an action pays at most once a rollout: after a step of it paid a positive reward, its later steps pay 0
    pay_once: bool = False
    max_candidates: int = 64  # cap on a simulated candidate set (0 = none); logged builtin lists hold <= 20
    # simulated rewards clipped to the logged range: the reward head is a regression that extrapolates on
    # latents unlike the logged ones
    clip_rewards: bool = True
    # the next candidate sets: `retrieval` = the logged list of the nearest logged state; `sample` = a draw from
    # the edit head; `threshold` = the edit head's calibrated cut. A writing agent also picks among them: the
    # world model only simulates actions of its logged vocabulary.
    candidates: str = "retrieval"
    # reverse diffusion steps a simulated transition takes; 0 = the world model's own
    # (world_model.sampler.steps, which its fit used); fewer cost less
    sampler_steps: int = 0
    # a writing agent's next-token logits after logged texts kept for the family's later rollouts, up to this
    # many MB per checkpoint and prompt (policies/prefix_tree.py; 0 = none): the draws are the agent's own
    write_cache_mb: float = 256.0
    # an agent of `mode: generate` writes its action in simulation as it does in the environment (the action
    # encoder embeds the text; its eps share draws from the nearest logged state's whole list) instead of
    # picking among the capped candidate set; in a free-form log (no lists) every agent writes
    agents_write: bool = True

    def __post_init__(self) -> None:
        if self.candidates not in CANDIDATE_RULES:
            raise ValueError(
                f"evaluate.diffusion.candidates: unknown rule '{self.candidates}'; choose from {list(CANDIDATE_RULES)}"
            )
        if self.snap_world not in SNAP_WORLD_RULES:
            raise ValueError(
                f"evaluate.diffusion.snap_world: expected one of {list(SNAP_WORLD_RULES)}, got '{self.snap_world}'"
            )
        at_least(self, "evaluate.diffusion", 0, ("max_candidates",), "0 = no cap")
        at_least(self, "evaluate.diffusion", 0, ("sampler_steps",), "0 = the world model's own")
        at_least(self, "evaluate.diffusion", 0, ("write_cache_mb",), "0 = no cache")


@dataclass
class GuidedAnalogyConfig:
    """`evaluate.guided_analogy`: the learned model picking among the analogy world's proposals
    (simulation/guided_analogy.py)."""

    # the reward and the end of a step are the chosen proposal's (`edits`: what the rollout's own logged world
    # paid for the action in that scene, else the mean of the logged outcomes that made its text) or the
    # heads' on its latent (`heads`)
    rewards: str = "edits"
    # 0 takes the proposal nearest to the learned model's sample; above 0 draws one, weighted by the log's
    # frequency times exp(-d^2 / (temperature * mean d^2))
    temperature: float = 0.0
    clip_rewards: bool = True  # the heads' rewards (`rewards: heads`) clipped to the logged range
    sampler_steps: int = 0  # reverse diffusion steps of the learned model's sample; 0 = its own

    def __post_init__(self) -> None:
        check_proposal_rewards(self.rewards)
        at_least(self, "evaluate.guided_analogy", 0, ("temperature",), "0 = the nearest proposal")
        at_least(self, "evaluate.guided_analogy", 0, ("sampler_steps",), "0 = the world model's own")


def check_proposal_rewards(source: str) -> None:
    if source not in PROPOSAL_REWARDS:
        raise ValueError(f"evaluate.guided_analogy.rewards: expected one of {list(PROPOSAL_REWARDS)}, got '{source}'")


def check_calibration(method: str) -> None:
    if method not in CALIBRATIONS:
        raise ValueError(f"evaluate.calibration: expected one of {list(CALIBRATIONS)}, got '{method}'")
