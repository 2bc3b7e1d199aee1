"""A free TCP port on the loopback interface, for servers that tests start in other processes."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (the OS picks it).

    Another process could take it before the caller binds it; servers started in this process
    should bind port 0 themselves instead.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
