"""Unpacking a downloaded archive so that nothing in it lands outside its folder.

    unpack_archive("efficientdet-d0.tar.gz", staging)   # raises UnsafeArchive, writes nothing

Every member is checked before the first byte is written, against the folder it is unpacked
into (not the working directory): no absolute name, no `..`, no link whose target leaves the
folder, no device file or FIFO, and no more members or bytes than a checkpoint could need.
Then Python's own `data` extraction filter, where this Python has it, checks each member again
as it is written.
"""

import os
import tarfile
from typing import List

# A released checkpoint archive holds one folder with a `checkpoint` file, an index, a few data
# shards and at most some notes: under ten members. 256 leaves room for any sharding.
MAX_MEMBERS = 256
# The largest release, efficientdet-d7x (77M parameters), is under 1 GB even with an average
# and an optimizer slot stored beside every weight (3 x 4 bytes x 77M); 8 GiB is 8 times that
# and still well below what an archive bomb would fill a disk with.
MAX_UNPACKED_BYTES = 8 << 30


class UnsafeArchive(ValueError):
    """An archive member that would be written outside its folder, or an archive too large for
    what it claims to be. The message names the member."""


def unpack_archive(path: str, folder: str) -> None:
    """Unpacks the tar archive at `path` (any compression) into `folder`, all members checked
    first. Raises UnsafeArchive (nothing written), or tarfile's errors for a damaged file."""
    with tarfile.open(path, "r:*") as archive:
        members = checked_members(archive, folder)
        if hasattr(tarfile, "data_filter"):  # Python 3.8.17, 3.9.17, 3.10.12, 3.11.4 and up.
            archive.extractall(folder, members=members, filter="data")
        else:
            archive.extractall(folder, members=members)


def checked_members(archive: tarfile.TarFile, folder: str) -> List[tarfile.TarInfo]:
    """The archive's members, each one safe to write into `folder`; raises UnsafeArchive at the
    first that is not, or when the archive is too large for a checkpoint."""
    root = os.path.realpath(folder)
    members, total = [], 0
    for member in archive:  # Reads headers one by one: a huge archive stops at the bound.
        members.append(member)
        if len(members) > MAX_MEMBERS:
            raise UnsafeArchive("it has more than %d members, more than a checkpoint needs"
                                % MAX_MEMBERS)
        total += member.size
        if total > MAX_UNPACKED_BYTES:
            raise UnsafeArchive("it unpacks to more than %s bytes (at member %r), more than "
                                "any released checkpoint" % (format(MAX_UNPACKED_BYTES, ","),
                                                             member.name))
        _check_member(member, root)
    return members


def _check_member(member: tarfile.TarInfo, root: str) -> None:
    name = member.name
    if os.path.isabs(name) or name.startswith(("/", "\\")):
        raise UnsafeArchive("member %r has an absolute path" % name)
    if ".." in name.replace("\\", "/").split("/"):
        raise UnsafeArchive("member %r climbs out of its folder with '..'" % name)
    if not _inside(os.path.join(root, name), root):
        raise UnsafeArchive("member %r would be written outside its folder" % name)
    if member.issym():
        target = member.linkname
        if os.path.isabs(target) or not _inside(
                os.path.join(root, os.path.dirname(name), target), root):
            raise UnsafeArchive("member %r is a link to %r, outside its folder" % (name, target))
    elif member.islnk():
        if os.path.isabs(member.linkname) or not _inside(os.path.join(root, member.linkname),
                                                         root):
            raise UnsafeArchive("member %r is a hard link to %r, outside its folder"
                                % (name, member.linkname))
    elif not (member.isfile() or member.isdir()):
        raise UnsafeArchive("member %r is a device file or FIFO, which no checkpoint holds"
                            % name)


def _inside(path: str, root: str) -> bool:
    """Whether `path`, normalised without touching the disk, is `root` or below it."""
    path = os.path.normpath(path)
    return path == root or path.startswith(root + os.sep)
