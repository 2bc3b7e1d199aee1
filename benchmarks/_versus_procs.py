"""Processes for ``versus.py``: the reference's throwaway environment, servers and runners
that log to files, and load-client processes spoken to over pipes (``_versus_wire.py``)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Pinned beside it: with OpenTelemetry 1.39+ its AgentOps tracer's span exporter fails
# ("'BypassableAuthenticatedOTLPExporter' object has no attribute '_headers'") and no traced
# call reaches its store; the openai client of its time (1.x) goes with it.
REFERENCE = [
    "agentlightning==0.3.0",
    "opentelemetry-api<1.39",
    "opentelemetry-sdk<1.39",
    "opentelemetry-exporter-otlp<1.39",
    "openai<1.100",
]
# litellm (imported by agentlightning) fetches a price list from the internet at import time
# unless told to use its bundled copy.
REFERENCE_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "AGENTOPS_API_KEY": "unused"}


def reference_python(venv: Path, reuse: bool) -> str:
    """Make a virtual environment at ``venv`` with agentlightning 0.3.0 (or reuse the one there,
    with ``reuse``); return its python."""
    python = venv / "bin" / "python"
    probe = [
        str(python),
        "-c",
        "import importlib.metadata as m; print(m.version('agentlightning'))",
    ]
    if reuse and python.exists():
        with contextlib.suppress(subprocess.CalledProcessError):
            if subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip():
                return str(python)
    if not shutil.which("uv"):
        raise RuntimeError("uv is needed to build the reference's environment (pip install uv)")
    print(f"installing {REFERENCE[0]} into {venv} (a few minutes)…", file=sys.stderr)
    shutil.rmtree(venv, ignore_errors=True)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    env = {**os.environ}
    if "PIP_FIND_LINKS" in env:  # uv does not read pip's settings
        env.setdefault("UV_FIND_LINKS", env["PIP_FIND_LINKS"])
    subprocess.run(["uv", "venv", "-q", "--python", version, str(venv)], check=True, env=env)
    install = ["uv", "pip", "install", "-q", "--python", str(python), *REFERENCE]
    subprocess.run(install, check=True, env=env)
    return str(python)


@contextlib.contextmanager
def processes(commands: list[list[str]], logs: Path, env: dict[str, str]) -> Iterator[None]:
    """Run ``commands`` in ``logs`` (their output to files there: the reference's AgentOps
    writes ``agentops.log`` where it runs); terminate them on the way out."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for command in commands:
            with open(logs / f"{len(os.listdir(logs))}.log", "wb") as log:
                procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=log, cwd=logs))
        yield
    finally:
        stop(procs)


def stop(procs: list[subprocess.Popen[Any]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class LoadClient:
    """One load-client process: JSON lines to its stdin, JSON lines back from its stdout."""

    def __init__(self, command: list[str], log: Path, env: dict[str, str]) -> None:
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=log.parent,
            )
        self.log, self._buffer = log, b""

    def send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        line = message if isinstance(message, str) else json.dumps(message)
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout: float) -> dict[str, Any]:
        """The next message; raises on a reported error, an exit or the timeout."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"load client {self.proc.pid} gave no answer:\n{tail}")
            if select.select([self.proc.stdout], [], [], min(left, 1.0))[0]:
                self._buffer += os.read(self.proc.stdout.fileno(), 1 << 20)
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        if "error" in message:
            raise RuntimeError(f"load client {self.proc.pid} failed: {message['error']}")
        return message


@contextlib.contextmanager
def load_clients(
    python: str, script: Path, count: int, logs: Path, env: dict[str, str]
) -> Iterator[list[LoadClient]]:
    """``count`` load-client processes of ``script``, started together, each ready (imports
    done) before this yields; stopped on the way out."""
    clients: list[LoadClient] = []
    try:
        for i in range(count):
            log = logs / f"{script.stem}-{i}.log"
            clients.append(LoadClient([python, str(script), str(i)], log, env))
        for client in clients:
            client.recv(timeout=600)
        yield clients
    finally:
        stop([client.proc for client in clients])
