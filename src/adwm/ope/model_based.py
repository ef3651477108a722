"""Model-based estimators read off a fitted action-value model: V_hat = mean_i E_{a~pi_e} Q(s_i0, a).

`dm` reads the regression of the logged discounted return-to-go on (state,
action) features (the paper's "direct method", `linear_q.fit_return_regression`);
`fqe` reads fitted Q evaluation (`linear_q.fit_fqe`). Their effective sample
size is the number of episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adwm.ope.base import Estimator, OPEData


@dataclass
class ModelEstimate(Estimator):
    q_model: str = "fqe"  # which fitted action values of the data to read

    def __post_init__(self) -> None:
        self.name = self.name or self.q_model

    def requires(self) -> str:
        return self.q_model

    def uses_weights(self) -> bool:
        return False

    def values(self, data: OPEData, counts: np.ndarray) -> np.ndarray:
        return counts @ data.q[self.q_model].v[:, 0] / data.n
