"""Simulated hosts for deployment tests: one network namespace per host, on one private switch.

Each host is a Linux network namespace with its own loopback and one interface ``eth0``; all are
joined by a bridge living in a namespace of its own, so nothing is added to the machine's own
network (addresses are in ``10.x.y.0/24``, reachable only from these namespaces). A test runs
the real ``agl`` processes inside the hosts (see :class:`agl.testing.processes.Processes`'
``netns``), cuts a host's link (:meth:`Hosts.cut`: packets are dropped, as when a cable is
pulled or a switch port dies; sockets are not told) and restores it.

Making namespaces needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN); :func:`unavailable` says why
they cannot be made here, for a test's skip message.

    with Hosts(["store", "runner-1"]) as hosts:
        hosts.address("store")            # "10.23.7.1"
        hosts.netns("runner-1")           # the name to give ``ip netns exec``
        hosts.cut("runner-1"); ...; hosts.restore("runner-1")
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import TracebackType
from typing import Self

__all__ = ["Hosts", "unavailable"]


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if sys.platform != "linux":
        return f"network namespaces are Linux's; this is {sys.platform}"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"agl-probe-{secrets.token_hex(3)}"
    made = subprocess.run(
        ["ip", "netns", "add", probe], capture_output=True, text=True, check=False
    )
    if made.returncode != 0:
        return f"cannot make a network namespace ({made.stderr.strip()}): needs root"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


class Hosts:
    """A few simulated hosts on one switch. See the module docstring."""

    def __init__(self, names: Sequence[str]) -> None:
        if len(set(names)) != len(names) or not 0 < len(names) < 250:
            raise ValueError(f"host names must be distinct, 1 to 249 of them: {names!r}")
        tag = secrets.token_hex(3)
        self._switch = f"agl-{tag}-sw"
        self._names = list(names)
        self._netns = {name: f"agl-{tag}-h{index}" for index, name in enumerate(names)}
        self._ports = {name: f"p{index}" for index, name in enumerate(names)}
        subnet = f"10.{secrets.randbelow(200) + 20}.{secrets.randbelow(250) + 1}"
        self._addresses = {name: f"{subnet}.{index + 1}" for index, name in enumerate(names)}
        self._made: list[str] = []

    def netns(self, name: str) -> str:
        """The namespace of host ``name`` (for ``ip netns exec``)."""
        return self._netns[name]

    def address(self, name: str) -> str:
        """Host ``name``'s address on the switch."""
        return self._addresses[name]

    def cut(self, name: str) -> None:
        """Pull host ``name``'s cable: its packets are dropped until :meth:`restore`."""
        _ip("-n", self._switch, "link", "set", self._ports[name], "down")

    def restore(self, name: str) -> None:
        """Plug host ``name`` back in."""
        _ip("-n", self._switch, "link", "set", self._ports[name], "up")

    def run(
        self, name: str, *command: str, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a command on host ``name``; never raises on its exit status."""
        return subprocess.run(
            ["ip", "netns", "exec", self._netns[name], *command],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def __enter__(self) -> Self:
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Kill whatever still runs in the hosts and delete their namespaces."""
        for namespace in reversed(self._made):
            pids = subprocess.run(
                ["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False
            ).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
        self._made.clear()

    def _make(self) -> None:
        _ip("netns", "add", self._switch)
        self._made.append(self._switch)
        _ip("-n", self._switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self._switch, "link", "set", "br0", "up")
        for name in self._names:
            namespace, port = self._netns[name], self._ports[name]
            _ip("netns", "add", namespace)
            self._made.append(namespace)
            _ip("-n", namespace, "link", "set", "lo", "up")
            _ip(
                "-n", namespace, "link", "add", "eth0", "type", "veth",
                "peer", "name", port, "netns", self._switch,
            )  # fmt: skip
            _ip("-n", self._switch, "link", "set", port, "master", "br0")
            _ip("-n", self._switch, "link", "set", port, "up")
            _ip("-n", namespace, "addr", "add", f"{self._addresses[name]}/24", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
