"""The suite's own scheduling (tests/scheduling.py): groups, their order, the durations file."""

import json

import pytest

from scheduling import DurationRecorder, costliest_groups_first, group_of

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.


class FakeItem:
    """What the scheduling reads of a pytest item: its node id."""

    def __init__(self, nodeid):
        self.nodeid = nodeid


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


class FakeReport:
    def __init__(self, nodeid, duration):
        self.nodeid, self.duration = nodeid, duration


def test_the_recorder_adds_up_each_groups_phases(tmp_path):
    recorder = DurationRecorder(str(tmp_path / "durations.json"))
    for nodeid, seconds in [("tests/test_a.py::one", 1.25), ("tests/test_a.py::one", 2.0),
                            ("tests/test_a.py::TestLong::one", 7.0),
                            ("tests/test_b.py::one[x]", 0.5)]:
        recorder.pytest_runtest_logreport(FakeReport(nodeid, seconds))

    class Session:
        config = object()  # A controller's config: no workerinput.
    recorder.pytest_sessionfinish(Session())
    assert json.loads((tmp_path / "durations.json").read_text()) == {
        "tests/test_a.py": 3.2, "tests/test_a.py::TestLong": 7.0, "tests/test_b.py": 0.5}
