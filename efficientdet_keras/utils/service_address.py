"""Addresses of the gRPC services a run connects to (a tf.data service dispatcher, a remote
TPU): their form, and a quick check that something listens there.

    split_service_address("grpc://dispatcher:5050")   # ("dispatcher", 5050)
    check_reachable("grpc://10.0.0.2:8470", timeout=10.0)
"""

import re
import socket
from typing import Optional, Tuple

# [grpc://]host:port: a host name, an IPv4 address or an [IPv6] address in brackets, and a port
# number; the forms TensorFlow's gRPC clients take.
_SERVICE_ADDRESS = re.compile(
    r"^(?:grpc://)?(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*"
    r"[A-Za-z0-9])?)):(?P<port>[0-9]{1,5})$")


def split_service_address(address) -> Optional[Tuple[str, int]]:
    """(host, port) of "grpc://host:port" or "host:port" ("[::1]:5050" gives "::1"), or None
    when `address` has another form or its port is outside 1..65535."""
    match = _SERVICE_ADDRESS.match(address) if isinstance(address, str) else None
    if not match or not 0 < int(match.group("port")) < 65536:
        return None
    return match.group("ipv6") or match.group("host"), int(match.group("port"))


def check_reachable(address: str, timeout: float) -> None:
    """Raises OSError unless a TCP connection to `address` ([grpc://]host:port) opens within
    `timeout` seconds; ValueError when `address` is not of that form."""
    parts = split_service_address(address)
    if parts is None:
        raise ValueError("%r is not a host:port address" % (address,))
    with socket.create_connection(parts, timeout=timeout):
        pass
