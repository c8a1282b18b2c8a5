"""The suite's own scheduling (tests/scheduling.py): groups, their order, the durations file."""

import json

import pytest

from scheduling import DurationRecorder, costliest_groups_first, file_group, report_group

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.


class FakeItem:
    """What the scheduling reads of a pytest item: its node id and its xdist_group mark."""

    def __init__(self, nodeid, group=None):
        self.nodeid = nodeid
        self.mark = pytest.mark.xdist_group(group).mark if group else None

    def get_closest_marker(self, name):
        return self.mark if name == "xdist_group" else None


def test_a_file_is_a_group_and_loadgroup_ids_name_theirs():
    assert file_group("tests/test_x.py::test_a[1-2]") == "test_x"
    assert report_group("tests/test_x.py::test_a[1-2]") == "test_x"
    assert report_group("tests/test_x.py::test_a[1-2]@docs:README.md") == "docs:README.md"


def test_groups_run_costliest_first_and_keep_their_own_order():
    items = [FakeItem("tests/test_a.py::one"), FakeItem("tests/test_b.py::one"),
             FakeItem("tests/test_a.py::two"), FakeItem("tests/test_a.py::long", "long"),
             FakeItem("tests/test_new.py::one"), FakeItem("tests/test_b.py::two")]
    durations = {"test_a": 10.0, "test_b": 30.0, "long": 100.0, "gone": 20.0}
    order = [item.nodeid for item in costliest_groups_first(items, durations)]
    # test_new is unknown: a median group (25 s here), between test_b and test_a.
    assert order == ["tests/test_a.py::long", "tests/test_b.py::one", "tests/test_b.py::two",
                     "tests/test_new.py::one", "tests/test_a.py::one", "tests/test_a.py::two"]
    # Without any durations: each group's items together, the groups as first collected.
    assert [item.nodeid for item in costliest_groups_first(items, {})] == [
        "tests/test_a.py::one", "tests/test_a.py::two", "tests/test_b.py::one",
        "tests/test_b.py::two", "tests/test_a.py::long", "tests/test_new.py::one"]


class FakeReport:
    def __init__(self, nodeid, duration):
        self.nodeid, self.duration = nodeid, duration


def test_the_recorder_adds_up_each_groups_phases(tmp_path):
    recorder = DurationRecorder(str(tmp_path / "durations.json"))
    for nodeid, seconds in [("tests/test_a.py::one@test_a", 1.25),
                            ("tests/test_a.py::one@test_a", 2.0),
                            ("tests/test_a.py::long@long", 7.0), ("tests/test_b.py::one", 0.5)]:
        recorder.pytest_runtest_logreport(FakeReport(nodeid, seconds))

    class Session:
        config = object()  # A controller's config: no workerinput.
    recorder.pytest_sessionfinish(Session())
    assert json.loads((tmp_path / "durations.json").read_text()) == {
        "long": 7.0, "test_a": 3.2, "test_b": 0.5}
    assert recorder.files == {"tests/test_a.py": 10.25, "tests/test_b.py": 0.5}
