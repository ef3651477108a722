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


def plot_credit(rows: Sequence[dict], path: Path, title: str, drops: int = 2) -> None:
    """An episode's V(s_t) over its steps, the value after each step (its reward counted in), the agent's
    preferred action's value, and its `drops` most negative credits marked with their actions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.array([r["t"] for r in rows])
    v = np.array([r["V"] for r in rows])
    after = v + np.array([r["credit"] for r in rows])
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(rows)), 3.6))
    ax.plot(t, v, marker="o", ms=3, label="V(s_t)")
    ax.step(t + 1, after, where="pre", color="grey", lw=0.8, alpha=0.7, label="after the step")
    ax.plot(t, [r["Q_preferred"] for r in rows], ls=":", lw=1, label="agent's preferred action")
    worst = sorted(rows, key=lambda r: r["credit"])[:drops]
    for r in worst:
        if r["credit"] < 0:
            ax.annotate(
                f"{r['action'][:28]} ({r['credit']:+.2f})",
                (r["t"], r["V"]),
                xytext=(0, -22),
                textcoords="offset points",
                fontsize=7,
                color="crimson",
                arrowprops={"arrowstyle": "->", "color": "crimson"},
            )
            ax.plot([r["t"]], [r["V"]], "v", color="crimson")
    ax.set_ylim(-0.15, 1.05)
    ax.set_xlabel("step")
    ax.set_ylabel("value (normalised)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    save_figure(fig, path)


def save_figure(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
