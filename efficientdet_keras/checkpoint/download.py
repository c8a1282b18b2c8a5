"""Released checkpoints by name: downloaded once into a cache, checked, and found there after.

    folder = released_checkpoint_dir("efficientdet-d0")   # <cache>/efficientdet-d0
    path = checkpoint_location("efficientdet-d0")          # the same; a path is returned as is

The cache is $EFFICIENTDET_KERAS_HOME, else $KERAS_HOME/efficientdet_keras, else
~/.keras/efficientdet_keras. Archives come from $EFFICIENTDET_KERAS_BASE_URL (a mirror holding
the published paths, e.g. <base>/efficientdet/coco2/efficientdet-d0.tar.gz), else the
published address. Without network, put the archive (or the folder it unpacks to) in the
cache, or pass the folder's path instead of the name.

`keras.utils.get_file` downloads (with its progress bar) into a private staging folder. There
the archive's SHA-256 is checked against a pinned digest (digests.py) or the registry's, when
either is known; the archive is unpacked with every member checked first (unpack.py: nothing in
it can be written outside the staging folder); the unpacked folder must hold the named model;
then it is renamed into the cache in one step, so a reader never sees half an archive, and a
failed, refused or interrupted download leaves nothing behind. A lock file per checkpoint makes a second process
(another worker, another test) wait for the first download instead of repeating it.
"""

import contextlib
import datetime
import glob
import hashlib
import ipaddress
import json
import os
import shutil
import socket
import tarfile
import tempfile
import urllib.parse
import zlib
from typing import Iterator, Optional

import filelock
import tensorflow as tf
import tf_keras as keras
from absl import logging

from efficientdet_keras.checkpoint.architecture import infer_architecture
from efficientdet_keras.checkpoint.digests import digests_file, pinned_digest
from efficientdet_keras.checkpoint.paths import resolve_checkpoint_path
from efficientdet_keras.checkpoint.released import (BACKBONE, DEFAULT_BASE_URL,
                                                    RELEASED_CHECKPOINTS, ReleasedCheckpoint,
                                                    find_released)
from efficientdet_keras.checkpoint.unpack import UnsafeArchive, unpack_archive

HOME_ENV = "EFFICIENTDET_KERAS_HOME"
BASE_URL_ENV = "EFFICIENTDET_KERAS_BASE_URL"
# Seconds a connection may stay silent (connecting, or between two reads) before the download
# is given up: a slow mirror still gets through, an unreachable one ends the command quickly.
DOWNLOAD_TIMEOUT = 30.0
# Written into each fetched folder: where it came from and the digest of the archive.
PROVENANCE_FILE = "released.json"


class ReleasedCheckpointUnavailable(FileNotFoundError):
    """A released checkpoint is not in the cache and could not be downloaded."""


class ReleasedCheckpointInvalid(ValueError):
    """A downloaded or hand-placed release is not what the registry says it is."""


def cache_dir() -> str:
    """Where released checkpoints are kept (see the module docstring)."""
    if os.environ.get(HOME_ENV):
        return os.path.expanduser(os.environ[HOME_ENV])
    keras_home = os.environ.get("KERAS_HOME") or os.path.join("~", ".keras")
    return os.path.join(os.path.expanduser(keras_home), "efficientdet_keras")


def base_url() -> str:
    """The address the published archive paths are appended to."""
    return (os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")


def archive_url(entry: ReleasedCheckpoint, base: Optional[str] = None) -> str:
    return "%s/%s" % ((base or base_url()).rstrip("/"), entry.path)


def checkpoint_location(path_or_name: str) -> str:
    """The cache folder of a released checkpoint's name (downloaded on first use); any
    other value, which is a path, unchanged."""
    entry = find_released(path_or_name)
    return released_checkpoint_dir(entry.name) if entry else path_or_name


def released_checkpoint_dir(name: str, cache: Optional[str] = None, base: Optional[str] = None,
                            timeout: float = DOWNLOAD_TIMEOUT) -> str:
    """The folder of a released checkpoint in the cache, downloaded and unpacked when missing.

    Args:
      name: a key of RELEASED_CHECKPOINTS ("efficientdet-d0", "efficientnet-b0").
      cache: the cache folder (default: `cache_dir()`).
      base: the base address (default: `base_url()`).
      timeout: seconds without an answer before a download is given up.

    Raises:
      ValueError: an unknown name (the message lists the known ones).
      ReleasedCheckpointUnavailable (a FileNotFoundError): not cached and not downloadable;
        one line naming the model, the address tried and where to put the archive by hand.
      ReleasedCheckpointInvalid (a ValueError): the archive is damaged, has another digest
        than the one pinned (digests.py) or registered, holds a member that would be written
        outside its folder, or holds another model; nothing is kept in the cache. Also a cached
        folder fetched with another digest than the one pinned now.
    """
    if name not in RELEASED_CHECKPOINTS:
        raise ValueError("%r is not a released checkpoint; known names: %s"
                         % (name, ", ".join(RELEASED_CHECKPOINTS)))
    entry = RELEASED_CHECKPOINTS[name]
    cache = cache or cache_dir()
    folder = os.path.join(cache, entry.unpacks_to)
    if not os.path.isdir(folder):  # A folder in the cache is complete: it appears by a rename.
        os.makedirs(cache, exist_ok=True)
        with _download_lock(cache, entry):
            if not os.path.isdir(folder):
                _fetch_into_cache(entry, cache, folder, archive_url(entry, base), timeout)
    provenance = os.path.join(folder, PROVENANCE_FILE)
    if not os.path.exists(provenance):
        check_release(folder, entry)  # Placed by hand; a fetched folder was checked before.
    else:
        _check_cached_digest(entry, folder, provenance, cache)
    return folder


def _check_cached_digest(entry: ReleasedCheckpoint, folder: str, provenance: str,
                         cache: str) -> None:
    """A digest pinned after the folder was fetched must be the one it was fetched with."""
    pinned = pinned_digest(entry.file_name, cache)
    if pinned is None:
        return
    with open(provenance) as f:
        fetched = json.load(f).get("sha256")
    if fetched != pinned:
        raise ReleasedCheckpointInvalid(
            "%s: %s was unpacked from an archive with sha256 %s, but %s pins %s; delete the "
            "folder to fetch the pinned archive" % (entry.name, folder, fetched,
                                                   digests_file(cache), pinned))


def check_release(folder: str, entry: ReleasedCheckpoint) -> None:
    """Raises ReleasedCheckpointInvalid unless `folder` holds a checkpoint whose variable
    names and shapes are those of the model `entry` names."""
    try:
        prefix = resolve_checkpoint_path(folder)
    except FileNotFoundError:
        raise ReleasedCheckpointInvalid("%s: %s holds no checkpoint" % (entry.name, folder)) \
            from None
    architecture = infer_architecture(tf.train.load_checkpoint(prefix)
                                      .get_variable_to_shape_map())
    if entry.kind == BACKBONE:
        expected = architecture.backbone_only and architecture.backbone == entry.model_name
    else:
        expected = entry.model_name in architecture.family_names()
    if not expected:
        raise ReleasedCheckpointInvalid("%s: %s is not %s; its variables are those of %s"
                                        % (entry.name, folder, entry.name,
                                           architecture.describe()))


@contextlib.contextmanager
def _download_lock(cache: str, entry: ReleasedCheckpoint) -> Iterator[None]:
    lock = filelock.FileLock(os.path.join(cache, ".%s.lock" % entry.name))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        logging.info("Waiting for another process to finish fetching %s", entry.name)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _fetch_into_cache(entry: ReleasedCheckpoint, cache: str, folder: str, url: str,
                      timeout: float) -> None:
    """Downloads (or takes the archive placed in the cache), unpacks and checks in a staging
    folder, then renames the unpacked folder into place. Called with the lock held."""
    staging_prefix = ".%s.staging-" % entry.name
    for leftover in glob.glob(os.path.join(cache, staging_prefix + "*")):
        shutil.rmtree(leftover, ignore_errors=True)  # From a killed process: the lock is ours.
    staging = tempfile.mkdtemp(prefix=staging_prefix, dir=cache)
    try:
        placed = os.path.join(cache, entry.file_name)
        source = placed if os.path.isfile(placed) else url
        archive = os.path.join(staging, entry.file_name)
        if source == placed:  # get_file finds it and downloads nothing.
            _link_or_copy(placed, archive)
        elif travels_in_clear(url):
            logging.warning("%s: downloading over plain http from %s, where anyone on the way "
                            "can change the archive; pin its digest in %s (see the released "
                            "models guide)", entry.name, url, digests_file(cache))
        _get_file(entry, staging, url, cache, timeout)
        digest = _sha256(archive)
        pinned = pinned_digest(entry.file_name, cache)
        _check_digest(entry, source, digest, pinned, cache)
        _unpack(entry, source, archive, staging)
        unpacked = os.path.join(staging, entry.unpacks_to)
        if not os.path.isdir(unpacked):
            raise ReleasedCheckpointInvalid(
                "%s: %s does not unpack to a folder %s/" % (entry.name, source, entry.unpacks_to))
        check_release(unpacked, entry)
        with open(os.path.join(unpacked, PROVENANCE_FILE), "w") as f:
            json.dump({"name": entry.name, "source": source, "sha256": digest,
                       "bytes": os.path.getsize(archive),
                       "verified": ("pinned sha256" if pinned else "registry sha256"
                                    if entry.sha256 else "contents only: no digest known"),
                       "fetched": datetime.datetime.now(datetime.timezone.utc).isoformat(
                           timespec="seconds")}, f, indent=1)
        os.replace(unpacked, folder)
        logging.info("Released checkpoint %s is in %s", entry.name, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _check_digest(entry: ReleasedCheckpoint, source: str, digest: str, pinned: Optional[str],
                  cache: str) -> None:
    """The archive's digest against the pinned one, and against the registry's."""
    for expected, whose in ((pinned, "the one pinned in %s" % digests_file(cache)),
                            (entry.sha256, "the registry's")):
        if expected and digest != expected:
            raise ReleasedCheckpointInvalid(
                "%s: the archive from %s has sha256 %s, not %s %s; it was not kept"
                % (entry.name, source, digest, whose, expected))


def _unpack(entry: ReleasedCheckpoint, source: str, archive: str, staging: str) -> None:
    """unpack_archive into `staging`, its errors turned into one line each."""
    try:
        unpack_archive(archive, staging)
    except UnsafeArchive as e:
        raise ReleasedCheckpointInvalid("%s: the archive from %s was refused: %s; nothing was "
                                        "kept" % (entry.name, source, e)) from None
    except (tarfile.TarError, EOFError, zlib.error) as e:
        raise ReleasedCheckpointInvalid("%s: %s is not a readable archive (%s); nothing was kept"
                                        % (entry.name, source, e)) from e


def _get_file(entry: ReleasedCheckpoint, staging: str, url: str, cache: str,
              timeout: float) -> None:
    """keras.utils.get_file into `staging` (download only), its errors turned into one line."""
    try:
        with _socket_timeout(timeout):
            keras.utils.get_file(fname=entry.file_name, origin=url, cache_dir=staging,
                                 cache_subdir="", extract=False)
    except Exception as e:  # noqa: BLE001 (get_file raises a bare Exception for URL failures)
        reason = ("no answer within %g s" % timeout if isinstance(e, TimeoutError)
                  else str(e).rsplit(" -- ", 1)[-1])
        raise ReleasedCheckpointUnavailable(
            "%s: cannot download %s (%s). Without network, put %s (or the %s/ folder it "
            "unpacks to) in %s, or pass that folder's path instead of the name"
            % (entry.name, url, reason, entry.file_name, entry.unpacks_to, cache)) from e


def travels_in_clear(url: str) -> bool:
    """Whether an archive from `url` crosses a network unencrypted: plain http to a host that
    is not this machine."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme != "http":
        return False
    host = parsed.hostname or ""
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host != "localhost"


def _link_or_copy(source: str, target: str) -> None:
    """A hard link where the file system allows one: archives reach hundreds of megabytes."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


@contextlib.contextmanager
def _socket_timeout(seconds: float) -> Iterator[None]:
    """get_file opens its connection without a timeout; the default timeout of new sockets
    is the only way to give it one. Restored on the way out."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def _sha256(path: str) -> Optional[str]:
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
