"""Digests an organisation pins for the release archives it mirrors.

The file is in `sha256sum`'s format, one archive per line, so that running
`sha256sum *.tar.gz *.tgz > SHA256SUMS` in the mirror's folders writes it:

    3f1c...e9  efficientdet-d0.tar.gz
    a07b...41  efficientdet-lite0.tgz

It is $EFFICIENTDET_KERAS_SHA256SUMS, else SHA256SUMS in the cache folder. An archive is matched
by its file name (a path before it is allowed). With a digest pinned, an archive is unpacked
only when its SHA-256 is that digest.
"""

import os
import re
from typing import Dict, Optional

SHA256SUMS_ENV = "EFFICIENTDET_KERAS_SHA256SUMS"
SHA256SUMS_FILE = "SHA256SUMS"
# "<64 hex digits>", one or two spaces (two, or " *" for binary mode, as sha256sum writes), name.
_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


def digests_file(cache: str) -> str:
    """The pinned-digests file for `cache` (which need not exist)."""
    return os.path.expanduser(os.environ.get(SHA256SUMS_ENV) or os.path.join(cache,
                                                                             SHA256SUMS_FILE))


def pinned_digest(file_name: str, cache: str) -> Optional[str]:
    """The SHA-256 (lower case hex) pinned for the archive `file_name`, or None when no
    digests file exists or it does not list the archive. A malformed line is a ValueError
    naming the file and the line."""
    path = digests_file(cache)
    if not os.path.isfile(path):
        if os.environ.get(SHA256SUMS_ENV):
            raise ValueError("%s=%s: no such file" % (SHA256SUMS_ENV, path))
        return None
    return read_digests(path).get(file_name)


def read_digests(path: str) -> Dict[str, str]:
    """{archive file name: sha256} from a file in sha256sum's format; blank lines and lines
    starting with '#' are skipped."""
    digests = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            match = _LINE.match(line)
            if not match:
                raise ValueError("%s, line %d: expected '<sha256>  <archive file name>' as "
                                 "sha256sum writes it, got %r" % (path, number, line[:80]))
            digests[os.path.basename(match.group(2).strip())] = match.group(1).lower()
    return digests
