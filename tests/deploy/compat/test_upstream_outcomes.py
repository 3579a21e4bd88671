"""The upstream runner's outcomes: a run cut down to some modules or tests is timed by its own
tests' durations, never by the whole suite's time."""

from __future__ import annotations

from pathlib import Path

from compat_suite.upstream.outcomes import KNOWN_RACES, Run, compare, read_junit, summary

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
 <testcase classname="t.integration.test_inspect.test_Inspect" name="test_ping" time="2.5"/>
 <testcase classname="t.integration.test_inspect.test_Inspect" name="test_ping" time="0.5">
  <error message="teardown broke">x</error></testcase>
 <testcase classname="t.integration.test_tasks.test_tasks" name="test_a" time="4.0">
  <failure message="AssertionError: no&#10;more">x</failure></testcase>
 <testcase classname="t.integration.test_canvas.test_chain" name="test_b" time="100"/>
</testsuite></testsuites>
"""


def full_run(tmp_path: Path) -> Run:
    (tmp_path / "junit.xml").write_text(JUNIT)
    outcomes, messages, durations = read_junit(tmp_path / "junit.xml")
    return Run("redis", "5.7.0", outcomes, messages, 1357.0, (1.0, 2.0), [], durations)


def test_junit_outcomes_messages_and_durations(tmp_path: Path) -> None:
    run = full_run(tmp_path)
    assert run.outcomes == {"test_inspect.py::test_Inspect::test_ping": "error",
                            "test_tasks.py::test_tasks::test_a": "failed",
                            "test_canvas.py::test_chain::test_b": "passed"}
    assert run.messages["test_tasks.py::test_tasks::test_a"] == "AssertionError: no"
    assert run.durations["test_inspect.py::test_Inspect::test_ping"] == 3.0
    assert run.time_text() == "1357s"


def test_a_run_restricted_to_modules_shows_their_tests_time_not_the_whole_run(
        tmp_path: Path) -> None:
    part = full_run(tmp_path).restricted(["test_inspect.py", "test_tasks.py"])
    assert set(part.outcomes) == {"test_inspect.py::test_Inspect::test_ping",
                                  "test_tasks.py::test_tasks::test_a"}
    assert part.seconds == 7.0
    assert part.time_text() == "7s of test time in a 1357s run of more tests"
    # Cut down again (e.g. -k): still the share of the whole run.
    again = part.only({"test_tasks.py::test_tasks::test_a"})
    assert (again.seconds, again.part_of) == (4.0, 1357.0)


def test_a_stored_run_keeps_its_durations(tmp_path: Path) -> None:
    full_run(tmp_path).save(tmp_path / "run.json")
    loaded = Run.load_file(tmp_path / "run.json")
    assert loaded.restricted(["test_canvas.py"]).seconds == 100.0


def test_a_known_race_in_celerys_suite_is_reported_but_no_regression() -> None:
    race = next(iter(KNOWN_RACES))
    other = "test_inspect.py::test_Inspect::test_ping"
    reference = Run("redis", "5.7.0", {race: "passed", other: "passed"})
    run = Run("plus+redis", "5.7.0", {race: "failed", other: "passed"}, {race: "assert False"})
    (diff,) = compare(reference, run)
    assert diff.known_race and not diff.regression
    assert "known race: " + race in summary(reference, run)
    assert "1 do not: 0 regression(s), 1 known race(s)" in summary(reference, run)
    # Any other test that stops passing is still a regression.
    broken = Run("plus+redis", "5.7.0", {race: "passed", other: "failed"})
    assert [d.regression for d in compare(reference, broken)] == [True]
