"""The suite's own scheduling (tests/scheduling.py): groups, their order, the durations file."""

import json
import os

import pytest

from scheduling import (DurationRecorder, choose_slow_shard, costliest_groups_first, group_of,
                        slow_shard_turn, slow_shards)
from helpers import REPO_ROOT

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.


class FakeItem:
    """What the scheduling reads of a pytest item: its node id and whether it is slow."""

    def __init__(self, nodeid, slow=False):
        self.nodeid, self.slow = nodeid, slow

    def get_closest_marker(self, name):
        return object() if name == "slow" and self.slow else None


def test_a_group_is_a_test_file_or_a_test_class():
    assert group_of("tests/test_x.py::test_a[1-2]") == "tests/test_x.py"
    assert group_of("tests/test_x.py::TestB::test_a") == "tests/test_x.py::TestB"
    assert group_of("tests/test_x.py::TestB::test_a[docs/a.md-line5::b]") == \
        "tests/test_x.py::TestB"


def test_groups_run_costliest_first_and_keep_their_own_order():
    items = [FakeItem("tests/test_a.py::one"), FakeItem("tests/test_b.py::one"),
             FakeItem("tests/test_a.py::two"), FakeItem("tests/test_a.py::TestLong::one"),
             FakeItem("tests/test_new.py::one"), FakeItem("tests/test_b.py::two")]
    durations = {"tests/test_a.py": 10.0, "tests/test_b.py": 30.0,
                 "tests/test_a.py::TestLong": 100.0, "tests/test_gone.py": 20.0}
    order = [item.nodeid for item in costliest_groups_first(items, durations)]
    # test_new is unknown: a median group (25 s here), between test_b and test_a.
    assert order == ["tests/test_a.py::TestLong::one", "tests/test_b.py::one",
                     "tests/test_b.py::two", "tests/test_new.py::one", "tests/test_a.py::one",
                     "tests/test_a.py::two"]
    # Without any durations: each group's items together, the groups as first collected.
    assert [item.nodeid for item in costliest_groups_first(items, {})] == [
        "tests/test_a.py::one", "tests/test_a.py::two", "tests/test_b.py::one",
        "tests/test_b.py::two", "tests/test_a.py::TestLong::one", "tests/test_new.py::one"]


def test_a_groups_slow_part_counts_only_when_it_runs():
    items = [FakeItem("tests/test_a.py::one"), FakeItem("tests/test_b.py::one"),
             FakeItem("tests/test_b.py::two", slow=True)]
    durations = {"tests/test_a.py": 10.0, "tests/test_a.py [slow]": 100.0,
                 "tests/test_b.py": 5.0, "tests/test_b.py [slow]": 50.0}
    # test_a's slow part is not collected; test_b's is: 55 s against 10 s.
    assert [i.nodeid for i in costliest_groups_first(items, durations)] == [
        "tests/test_b.py::one", "tests/test_b.py::two", "tests/test_a.py::one"]


def test_slow_groups_are_dealt_into_shards_within_the_budget():
    costs = {"a": 50.0, "b": 40.0, "c": 30.0, "d": 20.0, "e": 10.0}
    shards = slow_shards(costs, budget=60.0)
    assert sorted(sum(shards, [])) == sorted(costs)  # Each group in exactly one shard.
    assert len(shards) == 3  # 150 s in shards of at most 60 s.
    assert sorted(sum(costs[g] for g in shard) for shard in shards) == [50.0, 50.0, 50.0]
    # A group over the budget fills a shard alone; there are never more shards than groups.
    assert slow_shards({"long": 500.0, "short": 1.0}, budget=60.0) == [["long"], ["short"]]
    assert slow_shards({"only": 500.0}, budget=60.0) == [["only"]]


def test_make_test_takes_every_fast_test_and_the_shard_of_its_turn():
    items = [FakeItem("tests/test_a.py::fast"), FakeItem("tests/test_a.py::slow", slow=True),
             FakeItem("tests/test_b.py::TestSeed::one", slow=True),
             FakeItem("tests/test_b.py::TestSeed::two", slow=True),
             FakeItem("tests/test_c.py::slow", slow=True)]
    durations = {"tests/test_a.py": 100.0, "tests/test_a.py [slow]": 60.0,
                 "tests/test_b.py::TestSeed [slow]": 120.0, "tests/test_c.py [slow]": 50.0}
    # 2 workers x 90 s, 100 s of fast tests: 80 s left, so 230 s of slow tests in 3 shards.
    seen = []
    for turn in range(3):
        kept, groups, number, count = choose_slow_shard(items, durations, 90.0, 2, turn)
        assert (number, count) == (turn, 3)
        assert kept[0].nodeid == "tests/test_a.py::fast"
        assert {group_of(i.nodeid) for i in kept if i.slow} == set(groups)
        seen += groups
    # Over three turns every slow group ran once; a class's tests stay in one shard.
    assert sorted(seen) == ["tests/test_a.py", "tests/test_b.py::TestSeed", "tests/test_c.py"]
    assert choose_slow_shard(items, durations, 90.0, 2, 3)[1] == \
        choose_slow_shard(items, durations, 90.0, 2, 0)[1]
    # A suite already over its time still gives the slow tests a tenth of it.
    kept, groups, _, count = choose_slow_shard(items, durations, 50.0, 2, 0)
    assert count == 3 and groups


def test_the_turn_is_the_commits_number():
    turn = slow_shard_turn(REPO_ROOT)
    assert turn > 0 or not (os.path.isdir(os.path.join(REPO_ROOT, ".git"))
                            or os.path.isfile(os.path.join(REPO_ROOT, ".git")))
    assert slow_shard_turn(os.path.dirname(REPO_ROOT) + "/no-such-folder") == 0


class FakeReport:
    def __init__(self, nodeid, duration, keywords=()):
        self.nodeid, self.duration = nodeid, duration
        self.keywords = {k: 1 for k in keywords}


def test_the_recorder_adds_up_each_groups_phases(tmp_path):
    (tmp_path / "durations.json").write_text(json.dumps({"tests/test_a.py": 99.0,
                                                         "tests/test_c.py [slow]": 4.0}))
    recorder = DurationRecorder(str(tmp_path / "durations.json"))
    for nodeid, seconds in [("tests/test_a.py::one", 1.25), ("tests/test_a.py::one", 2.0),
                            ("tests/test_a.py::TestLong::one", 7.0),
                            ("tests/test_b.py::one[x]", 0.5)]:
        recorder.pytest_runtest_logreport(FakeReport(nodeid, seconds))
    recorder.pytest_runtest_logreport(FakeReport("tests/test_b.py::two", 9.0, ["slow"]))

    class Session:
        config = object()  # A controller's config: no workerinput.
    recorder.pytest_sessionfinish(Session())
    assert json.loads((tmp_path / "durations.json").read_text()) == {
        "tests/test_a.py": 3.2, "tests/test_a.py::TestLong": 7.0, "tests/test_b.py": 0.5,
        "tests/test_b.py [slow]": 9.0, "tests/test_c.py [slow]": 4.0}  # Another shard's.
