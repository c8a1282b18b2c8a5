"""How the suite's tests are shared between pytest-xdist workers: in groups, the costliest first.

A group is what one worker runs from start to end: by default a test file (its module
fixtures are then built once), or what a test names with `@pytest.mark.xdist_group(name)`
(a long test that should not hold up the rest of its file, the steps of one docs page that
build on each other). `make test` runs with `--dist loadgroup --no-loadscope-reorder`, so
workers take the groups in the order this module puts them: longest first by the last
profile's times (tests/durations.json), which keeps both cores busy to the end.
`make profile` rewrites that file.
"""

import json
import os
import statistics
from typing import Dict, List

import pytest

DURATIONS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")
GROUP_MARK = "xdist_group"


def group_of(item: pytest.Item) -> str:
    """The group an item runs in: its own xdist_group mark, else its test file."""
    mark = item.get_closest_marker(GROUP_MARK)
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    return file_group(item.nodeid)


def file_group(nodeid: str) -> str:
    """"tests/test_x.py::test_y[a]" -> "test_x": a file's default group."""
    return os.path.splitext(os.path.basename(nodeid.split("::")[0]))[0]


def report_group(nodeid: str) -> str:
    """The group of a test report: loadgroup appends "@group" to the ids it schedules."""
    test_id = nodeid.split("::", 1)[-1]
    return test_id.rsplit("@", 1)[1] if "@" in test_id else file_group(nodeid)


def mark_groups(items: List[pytest.Item]) -> None:
    """Gives every unmarked item its file's group, so loadgroup keeps files together."""
    for item in items:
        if item.get_closest_marker(GROUP_MARK) is None:
            item.add_marker(pytest.mark.xdist_group(file_group(item.nodeid)))


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
        first_seen.setdefault(group_of(item), index)
    return sorted(items, key=lambda item: (-durations.get(group_of(item), default),
                                           first_seen[group_of(item)]))


class DurationRecorder:
    """Adds up each group's setup, call and teardown seconds; writes them as JSON and prints
    the groups and files by time at the end of the run (`make profile`)."""

    def __init__(self, path: str):
        self.path = path
        self.groups: Dict[str, float] = {}
        self.files: Dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        group = report_group(report.nodeid)
        self.groups[group] = self.groups.get(group, 0.0) + report.duration
        name = report.nodeid.split("::")[0]
        self.files[name] = self.files.get(name, 0.0) + report.duration

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
        total = sum(self.files.values())
        terminalreporter.section("time by file (setup + call + teardown, summed over workers)")
        for name, seconds in sorted(self.files.items(), key=lambda kv: -kv[1]):
            write("%8.1f s  %5.1f%%  %s" % (seconds, 100 * seconds / max(total, 1e-9), name))
        write("%8.1f s  total; group times written to %s" % (total, self.path))
