"""A mirror serving archives that try to write outside the cache, or other archives than the ones
an organisation pinned: refused in one line naming the member (or digest) and the mirror, with
nothing written in the cache or outside it."""

import hashlib
import io
import json
import os
import tarfile

import pytest

from helpers import LoopbackServer, absl_info_messages, write_release_archive
from efficientdet_keras.checkpoint import download, unpack
from efficientdet_keras.checkpoint.digests import SHA256SUMS_ENV, read_digests
from efficientdet_keras.checkpoint.download import (PROVENANCE_FILE, ReleasedCheckpointInvalid,
                                                    released_checkpoint_dir)

LITE0 = "efficientdet-lite0"
ARCHIVE = os.path.join("efficientdet", "coco", "efficientdet-lite0.tgz")


def _add(archive, name, data=b"written by the mirror\n", **fields):
    info = tarfile.TarInfo(name)
    info.size = len(data) if fields.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
    for key, value in fields.items():
        setattr(info, key, value)
    archive.addfile(info, io.BytesIO(data) if info.size else None)


def hostile_members(kind, outside, working_directory):
    """The extra members of each hostile archive, writing into the folder `outside` or, for
    '..', beside the cache, under a name that passes a check against the working directory
    made by string prefix (as keras.utils.get_file's is)."""
    climb = "../../%s/%s-escaped/escaped-dotdot.txt" % (
        os.path.basename(os.path.dirname(working_directory)),
        os.path.basename(working_directory))
    return {
        "dot-dot": [dict(name=climb)],
        "absolute": [dict(name=os.path.join(outside, "escaped-absolute.txt"))],
        "link-out": [dict(name="efficientdet-lite0/outside", type=tarfile.SYMTYPE,
                          linkname=outside),
                     dict(name="efficientdet-lite0/outside/escaped-link.txt")],
    }[kind]


def publish_hostile(bucket, reference, kind, outside, working_directory):
    """The real Lite0 archive, with the hostile members appended, as the mirror serves it."""
    path = write_release_archive(bucket, LITE0, reference)
    with tarfile.open(path) as clean:
        members = [(m, clean.extractfile(m).read()) for m in clean.getmembers()]
    with tarfile.open(path, "w:gz") as archive:
        for member, data in members:
            archive.addfile(member, io.BytesIO(data))
        for fields in hostile_members(kind, outside, working_directory):
            _add(archive, **fields)


def written_files(root):
    return sorted(os.path.relpath(os.path.join(folder, name), root)
                  for folder, _, names in os.walk(root) for name in names)


@pytest.mark.parametrize("working_directory", ["parent of the cache", "home"])
@pytest.mark.parametrize("kind, member", [
    ("dot-dot", "'{climb}' climbs out of its folder with '..'"),
    ("absolute", "'{outside}/escaped-absolute.txt' has an absolute path"),
    ("link-out", "'efficientdet-lite0/outside' is a link to '{outside}', outside its folder"),
])
def test_members_that_leave_the_cache_are_refused_and_nothing_is_written(
        kind, member, working_directory, tmp_path, reference_dir, monkeypatch):
    home = tmp_path / "home"
    cache = home / ".keras" / "efficientdet_keras"
    cache.mkdir(parents=True)
    cwd = cache.parent if working_directory != "home" else home
    outside = cwd / "outside"  # Where get_file's check lets a member through.
    outside.mkdir()
    bucket = tmp_path / "bucket"
    publish_hostile(bucket, reference_dir(LITE0), kind, str(outside), str(cwd))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    before = written_files(tmp_path)
    with LoopbackServer(bucket) as server:
        with pytest.raises(ReleasedCheckpointInvalid) as refused:
            released_checkpoint_dir(LITE0, str(cache), server.url)
    message = str(refused.value)
    assert message == ("%s: the archive from %s/%s was refused: member %s; nothing was kept"
                       % (LITE0, server.url, ARCHIVE.replace(os.sep, "/"),
                          member.format(outside=outside, climb=hostile_members(
                              "dot-dot", str(outside), str(cwd))[0]["name"])))
    assert "\n" not in message
    created = sorted(set(written_files(tmp_path)) - set(before))
    assert [f for f in created if not f.endswith(".lock")] == []
    assert os.listdir(outside) == []


def test_a_pinned_digest_is_checked_before_unpacking(tmp_path, reference_dir, monkeypatch):
    bucket, cache = tmp_path / "bucket", tmp_path / "cache"
    archive = write_release_archive(bucket, LITE0, reference_dir(LITE0))
    right = hashlib.sha256(open(archive, "rb").read()).hexdigest()
    cache.mkdir()
    sums = cache / "SHA256SUMS"
    sums.write_text("# pinned by us\n%s  efficientdet-lite0.tgz\n" % ("ab" * 32))
    with LoopbackServer(bucket) as server:
        with pytest.raises(ReleasedCheckpointInvalid) as refused:
            released_checkpoint_dir(LITE0, str(cache), server.url)
        assert str(refused.value) == (
            "%s: the archive from %s/efficientdet/coco/efficientdet-lite0.tgz has sha256 %s, "
            "not the one pinned in %s %s; it was not kept" % (LITE0, server.url, right, sums,
                                                              "ab" * 32))
        assert sorted(os.listdir(cache)) == [".efficientdet-lite0.lock", "SHA256SUMS"]

        sums.write_text("%s *efficientdet/coco/efficientdet-lite0.tgz\n" % right.upper())
        folder = released_checkpoint_dir(LITE0, str(cache), server.url)
    with open(os.path.join(folder, PROVENANCE_FILE)) as f:
        provenance = json.load(f)
    assert provenance["sha256"] == right and provenance["verified"] == "pinned sha256"

    # Pinning another digest later: the cached folder is not the pinned archive's.
    other = tmp_path / "elsewhere" / "sums.txt"
    other.parent.mkdir()
    other.write_text("%s  efficientdet-lite0.tgz\n" % ("cd" * 32))
    monkeypatch.setenv(SHA256SUMS_ENV, str(other))
    with pytest.raises(ReleasedCheckpointInvalid, match="efficientdet-lite0: .* was unpacked "
                       "from an archive with sha256 %s, but %s pins c" % (right, other)):
        released_checkpoint_dir(LITE0, str(cache), "http://127.0.0.1:1")
    monkeypatch.setenv(SHA256SUMS_ENV, str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match="EFFICIENTDET_KERAS_SHA256SUMS=.*missing.txt: no such"):
        released_checkpoint_dir(LITE0, str(cache), "http://127.0.0.1:1")


def test_an_unpinned_fetch_says_what_was_verified(tmp_path, reference_dir):
    bucket = tmp_path / "bucket"
    write_release_archive(bucket, LITE0, reference_dir(LITE0))
    with LoopbackServer(bucket) as server:
        folder = released_checkpoint_dir(LITE0, str(tmp_path / "cache"), server.url)
    with open(os.path.join(folder, PROVENANCE_FILE)) as f:
        assert json.load(f)["verified"] == "contents only: no digest known"


def test_a_malformed_digests_line_is_named(tmp_path):
    sums = tmp_path / "SHA256SUMS"
    sums.write_text("%s  a.tgz\n\nnot a digest  b.tgz\n" % ("0" * 64))
    with pytest.raises(ValueError, match=r"SHA256SUMS, line 3: expected '<sha256>  <archive "
                                         r"file name>' as sha256sum writes it, got 'not a"):
        read_digests(str(sums))


def test_plain_http_to_another_machine_is_warned_about_once_per_download(
        tmp_path, reference_dir, monkeypatch):
    assert download.travels_in_clear("http://mirror.example.com/x.tgz")
    assert not download.travels_in_clear("https://mirror.example.com/x.tgz")
    for local in ("http://127.0.0.1:8000/x", "http://localhost/x", "http://[::1]:80/x"):
        assert not download.travels_in_clear(local), local
    bucket = tmp_path / "bucket"
    write_release_archive(bucket, LITE0, reference_dir(LITE0))
    monkeypatch.setattr(download, "travels_in_clear", lambda url: True)  # As if not loopback.
    with LoopbackServer(bucket) as server, absl_info_messages() as messages:
        for _ in range(2):  # The second finds the cache: no download, no warning.
            released_checkpoint_dir(LITE0, str(tmp_path / "cache"), server.url)
    warnings = [m for m in messages if "plain http" in m]
    assert len(warnings) == 1 and warnings[0].startswith(
        "efficientdet-lite0: downloading over plain http from %s/" % server.url)
    assert "SHA256SUMS" in warnings[0]


def _archive(path, members):
    with tarfile.open(path, "w") as archive:
        for fields in members:
            _add(archive, **fields)
    return str(path)


@pytest.mark.quick
def test_unpacking_refuses_devices_outside_hard_links_and_oversized_archives(tmp_path,
                                                                           monkeypatch):
    target = tmp_path / "into"
    target.mkdir()
    cases = {
        "device": ([dict(name="d/null", type=tarfile.CHRTYPE, devmajor=1, devminor=3)],
                   "member 'd/null' is a device file or FIFO"),
        "hard link": ([dict(name="d/h", type=tarfile.LNKTYPE, linkname="../../etc/passwd")],
                      "member 'd/h' is a hard link to '../../etc/passwd', outside its folder"),
        "many": ([dict(name="d/%d" % i) for i in range(unpack.MAX_MEMBERS + 1)],
                 "it has more than %d members" % unpack.MAX_MEMBERS),
    }
    for name, (members, message) in cases.items():
        with pytest.raises(unpack.UnsafeArchive, match=message):
            unpack.unpack_archive(_archive(tmp_path / ("%s.tar" % name), members), str(target))
        assert os.listdir(target) == [], name
    monkeypatch.setattr(unpack, "MAX_UNPACKED_BYTES", 100)
    with pytest.raises(unpack.UnsafeArchive, match="it unpacks to more than 100 bytes .at "
                                                   "member 'd/big'."):
        unpack.unpack_archive(_archive(tmp_path / "big.tar", [dict(name="d/big", data=b"x" * 101)]),
                              str(target))
    assert os.listdir(target) == []


@pytest.mark.quick
def test_links_inside_the_folder_unpack(tmp_path):
    target = tmp_path / "into"
    target.mkdir()
    path = _archive(tmp_path / "ok.tar", [
        dict(name="d/model.index", data=b"index"),
        dict(name="d/latest", type=tarfile.SYMTYPE, linkname="model.index"),
        dict(name="d/sub/again", type=tarfile.SYMTYPE, linkname="../model.index")])
    unpack.unpack_archive(path, str(target))
    assert (target / "d" / "latest").read_bytes() == b"index"
    assert (target / "d" / "sub" / "again").read_bytes() == b"index"
