"""How the suite's tests are shared between pytest-xdist workers: in groups, the costliest first.

A group is what one worker runs from start to end: a test file (its module fixtures are then
built once), or a test class, for tests that must not wait for the rest of their file (a long
multi-process test) or that build on each other (the steps of one docs page). `make test` runs
with `--dist loadscope --no-loadscope-reorder`, so the workers take the groups in the order this
module gives them: longest first by the last profile's times (tests/durations.json), which keeps
both cores busy to the end. `make profile` rewrites that file.
"""

import json
import os
import statistics
from typing import Dict, List

import pytest

DURATIONS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")


def group_of(nodeid: str) -> str:
    """"tests/test_x.py::test_y[a]" -> "tests/test_x.py"; "tests/test_x.py::TestZ::test_y" ->
    "tests/test_x.py::TestZ": the scope xdist's loadscope sends to one worker."""
    return nodeid.split("[", 1)[0].rsplit("::", 1)[0]


def load_durations(path: str = DURATIONS_PATH) -> Dict[str, float]:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def costliest_groups_first(items: List[pytest.Item],
                           durations: Dict[str, float]) -> List[pytest.Item]:
    """The items, groups in order of their recorded time (a group not yet profiled counts as
    a median one), each group's items together and in their own order."""
    default = statistics.median(durations.values()) if durations else 0.0
    first_seen: Dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(group_of(item.nodeid), index)

    def key(item):
        group = group_of(item.nodeid)
        return -durations.get(group, default), first_seen[group]
    return sorted(items, key=key)


class DurationRecorder:
    """Adds up each group's setup, call and teardown seconds; writes them as JSON and prints
    the groups by time at the end of the run (`make profile`)."""

    def __init__(self, path: str):
        self.path = path
        self.groups: Dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        group = group_of(report.nodeid)
        self.groups[group] = self.groups.get(group, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):  # Only the controller sees every report.
            return
        with open(self.path, "w") as f:
            json.dump({g: round(s, 1) for g, s in sorted(self.groups.items())}, f, indent=1)
            f.write("\n")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if hasattr(terminalreporter.config, "workerinput"):
            return
        write = terminalreporter.write_line
        total = sum(self.groups.values())
        terminalreporter.section("time by group (setup + call + teardown, both workers)")
        for name, seconds in sorted(self.groups.items(), key=lambda kv: -kv[1]):
            write("%8.1f s  %5.1f%%  %s" % (seconds, 100 * seconds / max(total, 1e-9), name))
        write("%8.1f s  in all; written to %s" % (total, self.path))
