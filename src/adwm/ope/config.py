"""The baselines' config (light: no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field

from adwm.ope import build_estimators

FEATURES = ("world_model", "text")


@dataclass
class SimulatedConfig:
    """`ope.simulated`: the world model's action values for `adwm_dr`, `adwm_wdr`, `adwm_magic` (ope/simulated.py)."""

    states: int = 64  # logged steps simulated from per policy; 0: every one (no value model)
    rollouts: int = 2  # per sampled step, for Q(s, a_logged) and for V(s) each
    ridge: float = 1.0  # L2 penalty of the value model that fills in the steps not simulated

    def __post_init__(self) -> None:
        if self.states < 0 or self.rollouts < 1 or self.ridge <= 0:
            raise ValueError(
                f"ope.simulated: expected states >= 0, rollouts >= 1 and ridge > 0, got {self.states}, "
                f"{self.rollouts}, {self.ridge}"
            )


@dataclass
class OPEConfig:
    estimators: list[str] = field(
        default_factory=lambda: [
            "is",
            "pdis",
            "wis",
            "wpdis",
            "dm",
            "dr",
            "wdr",
            "fqe",
            "adwm_dr",
            "adwm_wdr",
            "adwm_magic",
        ]
    )
    clip: list[float] = field(default_factory=list)  # adds `<name>_clip<c>` of each weighted estimator per cap c
    features: str = "world_model"  # world_model: the fitted world model's frozen encoder; text: `text_model`
    text_model: str = ""  # features=text: a Hugging Face encoder folder; "" = the packaged all-MiniLM-L6-v2
    ridge: float = 1.0  # L2 penalty of the linear Q models (DM, FQE)
    fqe_iterations: int = 0  # 0: until converged (at most the longest episode + 50 backups)
    max_episodes: int = 0  # 0: every logged episode; else the first N (bounds scoring time on long logs)
    simulated: SimulatedConfig = field(default_factory=SimulatedConfig)
    written_samples: int = 4  # writing (generate-mode) agents: actions written per logged state for E_pi[Q]
    # `<name>_est` beside each importance-weighted baseline: its weights from a behaviour policy estimated on
    # the log (ope/behaviour.py), the only weights a log without behaviour probabilities allows
    estimated_behaviour: bool = True
    behaviour_l2: float = 1.0  # the estimated behaviour model's L2 penalty (not scaled with the log's size)
    behaviour_iterations: int = 200  # its L-BFGS iterations
    ci_resamples: int = 2000  # bootstrap resamples per estimate (unit: logged episode)
    ci_level: float = 0.95
    log: str = "${data.log}"
    world_model: str = "${evaluate.world_model}"  # features=world_model
    out: str = "${run.root}/ope/estimates.json"
    scores: str = "${run.root}/ope/scores"  # cache of the agents' scores of the logged states, per checkpoint

    def __post_init__(self) -> None:
        if self.features not in FEATURES:
            raise ValueError(f"ope.features: unknown feature source '{self.features}'; choose from {list(FEATURES)}")
        if not 0 < self.ci_level < 1:
            raise ValueError(f"ope.ci_level: expected a value in (0, 1), got {self.ci_level}")
        if self.ci_resamples < 1 or self.max_episodes < 0:
            raise ValueError("ope.ci_resamples must be >= 1 and ope.max_episodes >= 0")
        if self.written_samples < 1:
            raise ValueError(f"ope.written_samples: expected >= 1, got {self.written_samples}")
        if not self.behaviour_l2 > 0 or self.behaviour_iterations < 1:
            raise ValueError(
                f"ope.behaviour_l2 and ope.behaviour_iterations: expected > 0 and >= 1, got {self.behaviour_l2}, "
                f"{self.behaviour_iterations}"
            )
        if self.ridge < 0 or self.fqe_iterations < 0:
            raise ValueError("ope.ridge and ope.fqe_iterations: expected >= 0")
        build_estimators(self.estimators, self.clip)  # unknown names and caps fail here
