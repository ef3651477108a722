"""The one stage record: an output is reused only when it exists and was made with the same settings."""

from __future__ import annotations

import json

from adwm.runtime.cache import StageRecord, entry_matches


def test_a_record_matches_only_its_settings_and_existing_outputs(tmp_path):
    out = tmp_path / "model.ckpt"
    record = StageRecord(tmp_path / "settings.json", [out])
    settings = {"steps": 10, "sizes": (2, 3), "nested": {"a": [1, 2]}}
    assert not record.matches(settings)  # nothing recorded
    record.save(settings, seconds=1.5)
    assert not record.matches(settings)  # recorded, but the output is missing
    out.write_text("weights")
    assert record.matches(settings)  # tuples compare as the lists JSON reads back
    assert not record.matches({**settings, "steps": 11})
    assert json.loads((tmp_path / "settings.json").read_text())["seconds"] == 1.5


def test_changed_names_the_keys_that_differ(tmp_path):
    record = StageRecord(tmp_path / "meta.json")
    assert record.changed({"a": 1}) == []  # nothing stored: nothing to refuse
    record.save({"a": 1, "b": 2})
    assert record.changed({"a": 1, "b": 3, "c": 0}) == ["b", "c"]
    record.clear()
    assert record.load() is None


def test_entry_matches_reads_the_settings_of_a_results_entry():
    entry = {"J": 0.4, "settings": {"policy": {"eps": 0.25}, "seed": 0}}
    assert entry_matches(entry, {"policy": {"eps": 0.25}, "seed": 0})
    assert not entry_matches(entry, {"policy": {"eps": 0.5}, "seed": 0})
    assert not entry_matches(None, {})
