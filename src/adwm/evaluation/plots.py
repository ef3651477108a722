"""Plots of estimates against true values (PNG, written atomically)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from adwm.runtime.atomic import atomic_write_bytes


def plot_scatter(rows: Sequence[dict], path: Path, title: str) -> None:
    """J_hat against J per estimator (every policy and seed), with the diagonal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ests = list(dict.fromkeys(r["estimator"] for r in rows))
    n = len(ests)
    cols = min(3, n)
    fig, axes = plt.subplots(
        (n + cols - 1) // cols, cols, figsize=(4 * cols, 3.5 * ((n + cols - 1) // cols)), squeeze=False
    )
    true = [r["J_true"] for r in rows]
    lo, hi = min(true), max(true)
    for ax, est in zip(axes.flat, ests):
        pts = [(r["J_true"], r["J_hat"]) for r in rows if r["estimator"] == est and r["J_hat"] is not None]
        pts = [(x, y) for x, y in pts if np.isfinite(y)]
        if pts:
            ax.scatter(*zip(*pts), s=12)
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
        ax.set_title(est)
        ax.set_xlabel("J (on-policy)")
        ax.set_ylabel("J_hat")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


def save_figure(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
