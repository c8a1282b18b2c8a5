"""How the suite's tests are shared between pytest-xdist workers: in groups, the costliest first.

A group is what one worker runs from start to end: a test file (its module fixtures are then
built once), or a test class, for tests that must not wait for the rest of their file (a long
multi-process test) or that build on each other (the steps of one docs page). `make test` runs
with `--dist loadscope --no-loadscope-reorder`, so the workers take the groups in the order this
module gives them: longest first by the last profile's times (tests/durations.json), which keeps
both cores busy to the end. `make profile` rewrites that file.

The slow tests (`-m slow`) take turns: `make test` adds one shard of them (`--slow-shard`), the
shard chosen by the commit, so that every slow test runs every few landings without a full
`make test-all`. The shards are as many as it takes to keep each within the time the suite has
left, by the same file's times: a group's slow tests are kept under the key `<group> [slow]`.
"""

import json
import math
import os
import statistics
import subprocess
from typing import Dict, List, Sequence, Tuple

import pytest

DURATIONS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")
SLOW = " [slow]"  # The key of a group's slow tests in the durations file.


def group_of(nodeid: str) -> str:
    """"tests/test_x.py::test_y[a]" -> "tests/test_x.py"; "tests/test_x.py::TestZ::test_y" ->
    "tests/test_x.py::TestZ": the scope xdist's loadscope sends to one worker."""
    return nodeid.split("[", 1)[0].rsplit("::", 1)[0]


def load_durations(path: str = DURATIONS_PATH) -> Dict[str, float]:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def is_slow(item) -> bool:
    return item.get_closest_marker("slow") is not None


def duration_key(nodeid: str, slow: bool) -> str:
    """The durations file's key of a test: its group, or its group's slow part."""
    return group_of(nodeid) + (SLOW if slow else "")


def costliest_groups_first(items: List[pytest.Item],
                           durations: Dict[str, float]) -> List[pytest.Item]:
    """The items, groups in order of their recorded time (the parts of it that run: a group
    not yet profiled counts as a median one), each group's items together and in their own
    order."""
    default = statistics.median(durations.values()) if durations else 0.0
    first_seen: Dict[str, int] = {}
    parts: Dict[str, set] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(group_of(item.nodeid), index)
        parts.setdefault(group_of(item.nodeid), set()).add(
            duration_key(item.nodeid, is_slow(item)))
    cost = {group: sum(durations.get(part, default) for part in keys)
            for group, keys in parts.items()}
    return sorted(items, key=lambda item: (-cost[group_of(item.nodeid)],
                                           first_seen[group_of(item.nodeid)]))


def slow_shards(costs: Dict[str, float], budget: float) -> List[List[str]]:
    """The slow groups (name -> seconds) dealt into as few shards as keep each within budget
    seconds where they can: the costliest first, each to the lightest shard. A group costlier
    than the budget fills a shard alone."""
    count = max(1, math.ceil(sum(costs.values()) / max(budget, 1e-9)))
    count = min(count, max(1, len(costs)))
    shards: List[Tuple[float, int, List[str]]] = [(0.0, i, []) for i in range(count)]
    for name in sorted(costs, key=lambda n: (-costs[n], n)):
        load, index, names = min(shards)
        names.append(name)
        shards[index] = (load + costs[name], index, names)
    return [sorted(names) for _, _, names in shards]


def slow_shard_turn(repo_root: str) -> int:
    """Which shard a checkout runs: the number of commits up to it, so that landings in a row
    take the shards in turn. 0 outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=repo_root,
                             capture_output=True, text=True, timeout=30)
        return int(out.stdout.strip()) if out.returncode == 0 else 0
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def choose_slow_shard(items: Sequence[pytest.Item], durations: Dict[str, float],
                      suite_seconds: float, workers: int, turn: int
                      ) -> Tuple[List[pytest.Item], List[str], int, int]:
    """The items make test runs: every test not marked slow, and the slow groups of shard
    `turn` (modulo the shard count). A shard gets what the suite's time (suite_seconds of
    wall time on `workers` workers) leaves after the other tests by the recorded times, and
    at least a tenth of the suite's time, so the slow tests keep turning while the rest is
    over its time. Returns the items, the shard's groups, its number and the number of shards."""
    default = statistics.median(durations.values()) if durations else 0.0
    fast_keys = {duration_key(i.nodeid, False) for i in items if not is_slow(i)}
    slow_groups = sorted({group_of(i.nodeid) for i in items if is_slow(i)})
    if not slow_groups:
        return list(items), [], 0, 0
    total = suite_seconds * workers
    budget = max(total - sum(durations.get(k, default) for k in fast_keys), total / 10)
    shards = slow_shards({g: durations.get(g + SLOW, default) for g in slow_groups}, budget)
    number = turn % len(shards)
    chosen = set(shards[number])
    kept = [i for i in items if not is_slow(i) or group_of(i.nodeid) in chosen]
    return kept, shards[number], number, len(shards)


class SlowShardReport:
    """Names, at the end of the run, the slow groups this run's shard held and how they did,
    so that a landing's log says which slow tests it vouches for."""

    def __init__(self):
        self.outcomes: Dict[str, List[str]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if "slow" in report.keywords and (report.when == "call" or report.outcome != "passed"):
            self.outcomes.setdefault(group_of(report.nodeid), []).append(report.outcome)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if hasattr(terminalreporter.config, "workerinput"):
            return
        terminalreporter.section("slow tests in this run's shard (--slow-shard)")
        for group, outcomes in sorted(self.outcomes.items()):
            terminalreporter.write_line("%s: %s" % (group, ", ".join(
                "%d %s" % (outcomes.count(o), o) for o in sorted(set(outcomes)))))
        if not self.outcomes:
            terminalreporter.write_line("none")


class DurationRecorder:
    """Adds up each group's setup, call and teardown seconds; writes them into the JSON file
    and prints the groups by time at the end of the run (`make profile`)."""

    def __init__(self, path: str):
        self.path = path
        self.groups: Dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        group = duration_key(report.nodeid, "slow" in report.keywords)
        self.groups[group] = self.groups.get(group, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):  # Only the controller sees every report.
            return
        # Groups this run did not see (another shard's slow tests) keep their last times.
        times = dict(load_durations(self.path), **{g: round(s, 1) for g, s in self.groups.items()})
        with open(self.path, "w") as f:
            json.dump(dict(sorted(times.items())), f, indent=1)
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
