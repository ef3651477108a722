"""The demo on a GPU in one command: fit and estimate with every device from config; figures to
benchmarks/results/gpu.json and the cost table.

    .venv/bin/python benchmarks/gpu.py [overrides ...]     # default overrides: seed=3 run.root=runs/gpu3

1. `adwm quickstart trainer=gpu device=cuda <overrides>`: agents, log, ground truth, world model, projectors,
   estimates and baselines, trained and run on the GPU (resumable: a rerun skips what is done);
2. `benchmarks/cost.py --cell builtin --label gpu device=cuda <overrides>` on that run: the online ground
   truth beside the estimate, with the peak GPU memory.

Needs a CUDA build of torch (`make install TORCH_SPEC="torch==2.13.0 --index-url <CUDA wheel index>"`) and a
CUDA device; without one it stops with a named error before any work.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from adwm.runtime.atomic import atomic_write_json, read_json
from adwm.runtime.provenance import benchmark_stamp

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "gpu.json"


def main(overrides: list[str]) -> Path:
    if not torch.cuda.is_available():
        raise SystemExit(
            f"benchmarks/gpu.py: no CUDA device is available (torch {torch.__version__}); install a CUDA build "
            "with TORCH_SPEC and run it on a machine with a GPU"
        )
    overrides = overrides or ["seed=3", "run.root=runs/gpu3"]
    adwm = str(Path(sys.executable).with_name("adwm"))
    subprocess.run([adwm, "quickstart", "trainer=gpu", "device=cuda", *overrides], check=True, cwd=ROOT)
    cost = [sys.executable, str(ROOT / "benchmarks" / "cost.py"), "--cell", "builtin", "--label", "gpu"]
    subprocess.run([*cost, "device=cuda", *overrides], check=True, cwd=ROOT)
    root = next((o.split("=", 1)[1] for o in overrides if o.startswith("run.root=")), "runs/default")
    summary = read_json(ROOT / root / "quickstart" / "summary.json")
    entry = {
        "overrides": overrides,
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "stage_seconds": summary["stage_seconds"],
        "metrics": summary["metrics"],
        "cost": read_json(ROOT / "benchmarks" / "results" / "cost.json")["builtin/gpu"],
        "provenance": benchmark_stamp(),
    }
    atomic_write_json(OUT, entry)
    return OUT


if __name__ == "__main__":
    print(main(sys.argv[1:]))
