"""Episode logs: round trip, privileged field handling, and one-line errors naming file:line and field."""

from __future__ import annotations

import json

import pytest

from adwm.data.schema import SCHEMA, Episode, LogFormatError, StepRecord, read_episodes


def episode(**over) -> dict:
    ep = Episode(
        env="builtin",
        seed=1,
        task="Put the apple in the box.",
        policy="agent",
        steps=[
            StepRecord("obs 0", "look", 0.0, False, ["look", "inventory"], -0.7),
            StepRecord("obs 1", "inventory", 1.0, True, ["look", "inventory"], -0.7),
        ],
        final_observation="obs 2",
        index=0,
    )
    d = json.loads(ep.to_json())
    d.update(over)
    return d


def write(tmp_path, lines: list[str]):
    path = tmp_path / "log.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_round_trip_and_privileged_field(tmp_path):
    path = write(tmp_path, [json.dumps(episode())])
    (ep,) = read_episodes(path)
    assert ep.steps[0].behavior_logprob is None  # hidden unless asked for
    assert read_episodes(path, privileged=True)[0].steps[0].behavior_logprob == -0.7
    assert ep.discounted_return(0.5) == pytest.approx(0.5)
    assert json.loads(ep.to_json())["schema"] == SCHEMA


def bad_step(**over) -> dict:
    d = episode()
    d["steps"][0].update(over)
    return d


def missing(key: str) -> dict:
    d = episode()
    del d[key]
    return d


CASES = [
    ("{not json", r"log.jsonl:2: not valid JSON"),
    (json.dumps([1, 2]), r"log.jsonl:2: expected a JSON object"),
    (json.dumps(episode(schema="v0")), r"log.jsonl:2: field 'schema': expected 'adwm.episode/1'"),
    (json.dumps(missing("task")), r"log.jsonl:2: missing field 'task'"),
    (json.dumps(episode(seed="3")), r"log.jsonl:2: field 'seed': expected an integer, got str"),
    (json.dumps(episode(steps=[])), r"log.jsonl:2: field 'steps': expected at least one step"),
    (json.dumps(bad_step(reward="high")), r"log.jsonl:2: field 'steps\[0\].reward': expected a finite number"),
    (json.dumps(bad_step(done=True)), r"log.jsonl:2: field 'steps\[0\].done': true before the last step"),
    (
        json.dumps(bad_step(admissible="look")),
        r"log.jsonl:2: field 'steps\[0\].admissible': expected a list of strings",
    ),
    (
        json.dumps(bad_step(behavior_logprob=0.5)),
        r"log.jsonl:2: field 'steps\[0\].behavior_logprob': expected a log-probability",
    ),
]


@pytest.mark.parametrize("line,message", CASES)
def test_bad_line_names_file_line_and_field(tmp_path, line, message):
    path = write(tmp_path, [json.dumps(episode()), line])
    with pytest.raises(LogFormatError, match=message) as err:
        read_episodes(path)
    assert "\n" not in str(err.value)


def test_missing_step_field(tmp_path):
    d = episode()
    del d["steps"][1]["action"]
    with pytest.raises(LogFormatError, match=r"log.jsonl:1: missing field 'steps\[1\].action'"):
        read_episodes(write(tmp_path, [json.dumps(d)]))


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="episode log .*nope.jsonl' does not exist"):
        read_episodes(tmp_path / "nope.jsonl")
    with pytest.raises(LogFormatError, match="no episodes"):
        read_episodes(write(tmp_path, []))
