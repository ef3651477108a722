"""The README is a manual: short, and its one results table is the generated held-out table's figures."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# README row (by its backticked name or first words) -> the row of docs/results/heldout.md it quotes
QUOTED = {
    "**ADWM, uncalibrated**": "adwm_sim (full)",
    "ADWM, calibrated": "adwm (full)",
    "`ablation.world=diffusion`": "adwm (world_diffusion)",
    "`oracle`": "adwm (world_oracle)",
    "`nearest`": "adwm (world_nearest)",
    "`analogy`": "adwm (world_analogy)",
    "FQE": "fqe",
    "`wdr_est`": "wdr_est",
}


def _rows(text: str) -> dict[str, list[str]]:
    return {
        cells[0]: cells[1:]
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("|---")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }


def test_the_readme_is_a_manual_of_about_200_lines_with_own_logs_early():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200
    own = next(k for k, line in enumerate(lines) if line.startswith("## Your own agent and logs"))
    assert own < 80
    assert any("make demo" in line for line in lines[:12]) and any("make test" in line for line in lines[:12])


def test_the_readme_results_table_quotes_the_generated_heldout_table():
    readme = _rows((ROOT / "README.md").read_text())
    heldout = _rows((ROOT / "docs" / "results" / "heldout.md").read_text())
    assert "experiments/heldout.yaml" in (ROOT / "README.md").read_text()
    for key, source in QUOTED.items():
        row = next(cells for name, cells in readme.items() if key in name)
        spearman, nrmse = heldout[source][0], heldout[source][1]
        assert row[:2] == [spearman, nrmse], (key, row, heldout[source])
    assert re.search(r"\| \*\*ADWM, uncalibrated\*\*", (ROOT / "README.md").read_text())  # uncalibrated first
