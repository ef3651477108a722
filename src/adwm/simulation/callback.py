"""`RolloutEvaluator`: a Lightning Callback that estimates J_hat for a policy family during `adwm fit`.

Every `every_n_epochs` validation epochs and at the end of fitting (`adwm fit`: once the
heads' refit is done, in `rollouts_final.json`) it simulates
each policy in the current world model and logs `rollout/J_hat/<policy>`, and,
given true values, `rollout/spearman`, `rollout/kendall`, `rollout/regret_at_1`
and `rollout/nrmse`. The table of J vs J_hat goes to the logger when it can
take tables (W&B) and always to `<dir>/rollouts_epoch<k>.json`. The agents read
the nearest logged observation's text (the default reader, `ablation.reader=logged`; no projector exists
while the world model trains) unless a `reader_for(policy_cfg, module)` factory is given. Its values are the simulated ones,
uncalibrated (`adwm evaluate` calibrates on the behaviour agents; see adwm.simulation.calibration).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import lightning as L
import numpy as np

from adwm.evaluation.metrics import family_metrics
from adwm.guidance.config import GuidanceConfig
from adwm.policies.config import PolicyConfig
from adwm.policies.llm import LLMPolicy
from adwm.policies.sampling import uses_model
from adwm.runtime.atomic import atomic_write_json
from adwm.simulation.config import DiffusionConfig, SimulateConfig
from adwm.simulation.readers import NearestTextReader
from adwm.simulation.simulate import simulate
from adwm.simulation.starts import attach_logged_worlds, logged_reward_range, logged_starts


class RolloutEvaluator(L.Callback):
    def __init__(
        self,
        policies: list[PolicyConfig],
        datamodule,
        out_dir: str | Path,
        simulate_cfg: SimulateConfig,
        gamma: float,
        horizon: int,
        every_n_epochs: int = 1,
        truth: dict[str, float] | None = None,
        guidance: GuidanceConfig | None = None,
        seed: int = 0,
        reader_for: Callable | None = None,
        at_fit_end: bool = True,
        world: DiffusionConfig | None = None,
    ) -> None:
        self.policies, self.dm, self.out_dir = policies, datamodule, Path(out_dir)
        self.sim, self.gamma, self.horizon, self.every = simulate_cfg, gamma, horizon, every_n_epochs
        self.world = world  # the learned world's settings (evaluate.diffusion); None: the defaults
        self.truth, self.seed = truth, seed
        self.guidance = guidance or GuidanceConfig(eta=0.0)  # continuation guidance needs a projector and a tail
        self.reader_for = reader_for or self._nearest_text
        # False: the caller runs the final estimate itself once the world model is finished (`adwm fit`
        # refits the reward and termination heads after training, so an estimate at fit end would be stale)
        self.at_fit_end = at_fit_end
        self.history: list[dict] = []

    def _nearest_text(self, pcfg: PolicyConfig, module) -> NearestTextReader | None:
        if not uses_model(pcfg):
            return None
        return NearestTextReader(module, LLMPolicy(pcfg, f"family policy '{pcfg.name}'"))

    def on_validation_epoch_end(self, trainer: L.Trainer, module) -> None:
        if trainer.sanity_checking or (trainer.current_epoch + 1) % self.every:
            return
        self.run(trainer, module)

    def on_fit_end(self, trainer: L.Trainer, module) -> None:
        if self.at_fit_end and (not self.history or self.history[-1]["step"] != trainer.global_step):
            self.run(trainer, module)

    def run(self, trainer: L.Trainer, module, name: str | None = None) -> dict:
        """Estimate the family now; the table goes to `<dir>/rollouts_<name>.json` (default: the epoch)."""
        was_training = module.training
        module.eval()
        texts, admissible = self.dm.admissible_states("train")
        module.build_proposal_bank(texts, admissible)  # retrieval fallback and texts for the reader
        attach_logged_worlds(module, self.dm)
        starts, reward_range = logged_starts(self.dm), logged_reward_range(self.dm)
        j_hat = {}
        for pcfg in self.policies:
            reader = self.reader_for(pcfg, module)
            returns = simulate(
                module,
                pcfg,
                reader,
                starts,
                self.sim,
                self.guidance,
                self.gamma,
                self.horizon,
                self.seed,
                reward_range=reward_range,
                world=self.world,
            )
            j_hat[pcfg.name] = float(np.mean(returns))
        logs = {f"rollout/J_hat/{k}": v for k, v in j_hat.items()}
        row = {"epoch": trainer.current_epoch, "step": trainer.global_step, "J_hat": j_hat}
        if self.truth:
            names = list(j_hat)
            metrics = family_metrics([self.truth[n] for n in names], [j_hat[n] for n in names])
            logs.update({f"rollout/{k}": v for k, v in metrics.items()})
            row.update({"J": {n: self.truth[n] for n in names}, "metrics": metrics})
        if trainer.logger is not None:
            trainer.logger.log_metrics(logs, step=trainer.global_step)
            if hasattr(trainer.logger, "log_table"):
                cols = ["policy", "J_hat"] + (["J"] if self.truth else [])
                data = [[n, j_hat[n]] + ([self.truth[n]] if self.truth else []) for n in j_hat]
                trainer.logger.log_table(key="rollout/table", columns=cols, data=data, step=trainer.global_step)
        for k, v in logs.items():
            trainer.callback_metrics[k] = v
        atomic_write_json(self.out_dir / f"rollouts_{name or f'epoch{trainer.current_epoch}'}.json", row)
        self.history.append(row)
        if was_training:
            module.train()
        return row
