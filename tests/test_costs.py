"""runtime/costs.py: exclusive section times, counts per section, and a no-op outside a recording."""

from __future__ import annotations

import time

import pytest

from adwm.runtime import costs


def test_nested_sections_time_exclusively_and_add_up():
    with costs.recording() as record:
        start = time.perf_counter()
        with costs.section("outer"):
            time.sleep(0.05)
            with costs.section("inner"):
                time.sleep(0.1)
                costs.count("reads", 3)
            costs.count("reads")
        wall = time.perf_counter() - start
    s = record.seconds
    assert 0.09 <= s["inner"] < 0.2 and 0.04 <= s["outer"] < 0.09  # the inner time is not the outer's
    assert s["inner"] + s["outer"] == pytest.approx(wall, abs=0.01)
    assert record.counts == {"reads": 4, "reads@inner": 3, "reads@outer": 1}
    assert record.to_dict()["counts"]["reads"] == 4


def test_outside_a_recording_nothing_is_kept_and_recordings_do_not_nest():
    with costs.section("x"):
        costs.count("y")
    with costs.recording() as record:
        with pytest.raises(RuntimeError, match="already active"):
            with costs.recording():
                pass
    assert dict(record.seconds) == {} and dict(record.counts) == {}
    with costs.recording() as again:  # the failed inner one did not leave a recording behind
        costs.count("z")
    assert again.counts == {"z": 1}
