"""A real, throwaway PostgreSQL server for tests: ``initdb`` in a temp folder, then ``postgres``.

The binaries come from the ``pgserver`` wheel (the development environment installs it: its
wheel bundles a whole PostgreSQL) or, without it, from the machine's own PostgreSQL (``postgres``
on ``PATH`` or under ``/usr/lib/postgresql``). PostgreSQL refuses to run as root; under root the
server runs as the unprivileged user ``nobody`` over a private copy of the binaries that user can
read. Passwords are checked (``scram-sha-256``) on TCP connections, so wrong credentials fail as
they would in production.

    with PostgresServer() as server:
        url = server.create_database("agl")   # postgresql://agl:…@127.0.0.1:PORT/agl

``netns`` runs the server inside a network namespace (``ip netns exec``), listening on
``host``, for tests that simulate hosts.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from agl.testing.ports import free_port

__all__ = ["PostgresServer", "postgres_bin_dir"]

_UNPRIVILEGED = "nobody"


def postgres_bin_dir() -> Path | None:
    """The folder holding ``initdb`` and ``postgres``, or None where none is installed."""
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "pginstall" / "bin"
            if (candidate / "postgres").exists():
                return candidate
    found = shutil.which("postgres")
    if found:
        return Path(found).resolve().parent
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "postgres").exists():
            return candidate
    return None


class PostgresServer:
    """One PostgreSQL cluster in a temp folder, started and stopped by the test."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        user: str = "agl",
        password: str | None = None,
        netns: str | None = None,
        max_connections: int = 200,
        small_disk_mb: int | None = None,
    ) -> None:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise RuntimeError(
                "no PostgreSQL binaries: install the development environment "
                "(bash scripts/setup.sh installs the pgserver wheel) or the postgresql package"
            )
        self.host = host
        self.port = port or free_port()
        self.user = user
        self.password = password or secrets.token_hex(8)
        self.netns = netns
        self._max_connections = max_connections
        self._small_disk_mb = small_disk_mb
        self._root = Path(tempfile.mkdtemp(prefix="agl-postgres-"))
        self._as_root = os.geteuid() == 0
        self._bin = self._readable_bin(bin_dir)
        self.data_dir = self._root / "data"
        self._socket_dir = self._root / "socket"
        self.log_path = self._root / "server.log"
        self.small_disk = self._root / "small-disk"
        """With ``small_disk_mb``: a folder on a disk of that size that only the server sees
        (for ``CREATE TABLESPACE … LOCATION``), to fill up in tests of a full disk."""
        self._process: subprocess.Popen[bytes] | None = None
        self._init()

    @property
    def url(self) -> str:
        """The URL of the ``postgres`` maintenance database, as the superuser."""
        return self.url_of("postgres")

    def url_of(
        self, database: str, *, password: str | None = None, with_password: bool = True
    ) -> str:
        """The URL of ``database`` on this server (``password`` overrides the real one).

        ``with_password=False``: a URL without one, for the client to find it the way libpq
        does (``PGPASSWORD``, the password file :meth:`write_passfile` writes).
        """
        secret = self.password if password is None else password
        credentials = f"{self.user}:{secret}" if with_password else self.user
        return f"postgresql://{credentials}@{self.host}:{self.port}/{database}"

    def write_passfile(self, path: Path) -> Path:
        """Write a libpq password file (``PGPASSFILE``) giving this server's password, mode
        0600 as libpq requires; return its path."""
        path.write_text(f"{self.host}:{self.port}:*:{self.user}:{self.password}\n")
        path.chmod(0o600)
        return path

    @property
    def small_disk_here(self) -> Path:
        """:attr:`small_disk` as this process reaches it, through the running server's mount
        namespace (root only): for a test to fill that disk with a file of its own, and to free
        it again."""
        if self.pid is None:
            raise RuntimeError("the server is not running: its small disk is not mounted")
        return Path(f"/proc/{self.pid}/root") / self.small_disk.relative_to(self.small_disk.anchor)

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (its backends are its children)."""
        return self._process.pid if self._process is not None else None

    # --- lifecycle ------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until it accepts connections."""
        if self._process is not None and self._process.poll() is None:
            return
        command = [
            str(self._bin / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
            "-k", str(self._socket_dir), "-c", f"listen_addresses={self.host}",
            "-c", f"max_connections={self._max_connections}",
        ]  # fmt: skip
        log = self.log_path.open("ab")
        try:
            self._process = subprocess.Popen(
                self._wrap(command, small_disk=True),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self._process.poll() is not None:
                raise RuntimeError(f"PostgreSQL exited at start:\n{self.log()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"PostgreSQL did not start in {timeout:g} s:\n{self.log()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server cleanly (a fast shutdown: open sessions are ended)."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._process = None

    def kill(self) -> None:
        """SIGKILL the server and its backends, as a crash would."""
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(timeout=30)
            # Its backends too (a loaded machine may run them a moment after the postmaster
            # is gone): until then a connection could still answer.
            deadline = time.monotonic() + 30
            while _running_in_group(self._process.pid) and time.monotonic() < deadline:
                time.sleep(0.01)
        self._process = None

    def close(self) -> None:
        """Stop the server and delete its files."""
        self.stop()
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # --- databases ------------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """Create an empty database and return its URL."""
        self.sql(f'CREATE DATABASE "{name}"')
        return self.url_of(name)

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one statement with ``psql`` over the local socket; return its output."""
        socket = str(self._socket_dir)
        result = self._tool(
            "psql", "-h", socket, "-p", str(self.port), "-U", self.user, "-d", database,
            "-v", "ON_ERROR_STOP=1", "-At", "-c", statement,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"psql failed on {statement!r}: {result.stderr.strip()}")
        return result.stdout.strip()

    def log(self) -> str:
        """The server's log so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # --- internals ------------------------------------------------------------------------

    def _init(self) -> None:
        self._socket_dir.mkdir()
        password_file = self._root / "password"
        password_file.write_text(self.password + "\n")
        if self._as_root:
            for path in (self._root, self._socket_dir, password_file):
                shutil.chown(path, _UNPRIVILEGED)
        result = self._tool(
            "initdb", "-D", str(self.data_dir), "-U", self.user, f"--pwfile={password_file}",
            "--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-sync",
            timeout=120,
        )  # fmt: skip
        password_file.unlink()
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed: {result.stderr.strip() or result.stdout.strip()}")

    def _tool(self, name: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run one of PostgreSQL's programs as the server's user; never raises on its status."""
        command = self._wrap([str(self._bin / name), *args])
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)

    def _wrap(self, command: list[str], small_disk: bool = False) -> list[str]:
        """Run as the unprivileged user under root, inside the namespace when there is one,
        and killed by the kernel when the test process dies, however it dies (no server
        outlives a killed test run). ``small_disk``: with the small disk mounted, in a mount
        namespace of the server's own."""
        user: list[str] = []
        if self._as_root:
            group = _group_of(_UNPRIVILEGED)
            user = [f"--reuid={_UNPRIVILEGED}", f"--regid={group}", "--clear-groups"]
        command = ["setpriv", *user, "--pdeathsig=KILL", "--", *command]
        if small_disk and self._small_disk_mb is not None:
            if not self._as_root:
                raise RuntimeError("small_disk_mb needs root: it mounts a tmpfs")
            self.small_disk.mkdir(exist_ok=True)
            mount = (
                'mount -t tmpfs -o "size=$1m,mode=0700,uid=$2" tmpfs "$3" && shift 3 && exec "$@"'
            )
            command = [
                "unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh",
                str(self._small_disk_mb), str(_uid_of(_UNPRIVILEGED)), str(self.small_disk),
                *command,
            ]  # fmt: skip
        if self.netns is not None:
            command = ["ip", "netns", "exec", self.netns, *command]
        return command

    def _readable_bin(self, bin_dir: Path) -> Path:
        """Binaries the server's user can run: under root, where a folder above them is closed
        to others (a private checkout, say), a private copy with the same layout (the wheel's
        binaries find their libraries by a path relative to themselves)."""
        if not self._as_root or all(
            folder.stat().st_mode & 0o001 for folder in (bin_dir, *bin_dir.parents)
        ):
            return bin_dir
        install = bin_dir.parent
        site = install.parent.parent
        copy = self._root / "site"
        for source in (install, *site.glob(f"{install.parent.name}.libs")):
            _copy_tree(source, copy / source.relative_to(site))
        os.chmod(self._root, 0o755)
        return copy / install.relative_to(site) / bin_dir.name

    def _ready(self) -> bool:
        result = self._tool("pg_isready", "-q", "-h", str(self._socket_dir), "-p", str(self.port))
        return result.returncode == 0


def _copy_tree(source: Path, target: Path) -> None:
    try:
        shutil.copytree(source, target, copy_function=os.link, symlinks=True)
    except OSError:  # another file system: hard links cannot cross it
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, symlinks=True)


def _uid_of(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_uid


def _group_of(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_gid


def _running_in_group(group: int) -> bool:
    """Whether a process of process group ``group`` is still running (zombies aside)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] != "Z" and int(fields[2]) == group:  # state, ppid, pgrp
            return True
    return False
