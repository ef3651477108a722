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


def test_a_fit_resumes_across_budget_changes_but_not_across_a_changed_heads_refit(smoke_cfg):
    from omegaconf import OmegaConf

    from adwm.stages.fit import fit_settings, resume_mismatch

    started = {"settings": fit_settings(smoke_cfg)}
    longer = OmegaConf.merge(smoke_cfg, {"fit": {"max_steps": 99}})
    assert resume_mismatch(started, fit_settings(longer)) == []
    # a finished checkpoint holds refitted heads: another refit on top is not what a fresh fit makes
    refit = OmegaConf.merge(smoke_cfg, {"fit": {"rollout_heads": {"steps": 7}}})
    assert resume_mismatch(started, fit_settings(refit)) == ["fit.rollout_heads.steps (600 -> 7)"]
