"""Each framework adapter installs alone with its framework and traces it there.

For every adapter: build the wheels of agl-core and the adapter, install just those two into a
new virtual environment (versions held to the lock's, so the installs come from uv's cache),
and, in that environment, check that agl finds the adapter's instrumentor through its entry
point, that the instrumentor instruments and uninstruments the real framework (which imports
the framework and its openinference instrumentation: every dependency the adapter needs must be
declared), and that neither the other adapters nor their frameworks are installed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ADAPTERS = {
    # distribution: (instrumentor name, import package, the framework's import package)
    "agl-langchain": ("langchain", "agl_langchain", "langchain_core"),
    "agl-openai-agents": ("openai-agents", "agl_openai_agents", "agents"),
    "agl-autogen": ("autogen", "agl_autogen", "autogen_agentchat"),
    "agl-crewai": ("crewai", "agl_crewai", "crewai"),
    "agl-agent-framework": ("agent-framework", "agl_agent_framework", "agent_framework"),
    "agl-pydantic-ai": ("pydantic-ai", "agl_pydantic_ai", "pydantic_ai"),
    "agl-google-adk": ("google-adk", "agl_google_adk", "google.adk"),
    "agl-llama-index": ("llama-index", "agl_llama_index", "llama_index.core"),
}
OWN_OPENTELEMETRY = {"agl-google-adk"}
"""Adapters whose framework caps OpenTelemetry below the workspace's (which holds it with an
override): they install with the OpenTelemetry their framework allows, as a user's would."""

CHECK = textwrap.dedent(
    """
    import asyncio, importlib.util, os, sys
    os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
    import agl
    from agl.plugins import PluginManager
    from agl.store._memory import MemoryStore

    name, package, framework, others = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    factories = PluginManager().provided("agl_instrumentors")
    assert name in factories, sorted(factories)
    def installed(module):
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # its parent package (google for google.adk) is not there
            return False

    for other in others:
        assert not installed(other), f"{other} is installed"

    async def main():
        async with MemoryStore() as store:
            with agl.Tracer(store) as tracer:
                instrumentor = factories[name](tracer)
                instrumentor.instrument()
                assert instrumentor.instrumented
                instrumentor.uninstrument()
                assert not instrumentor.instrumented

    asyncio.run(main())
    assert framework in sys.modules, f"instrumenting did not import {framework}"
    print("ok", name, sorted(factories))
    """
)


def _uv() -> list[str]:
    found = shutil.which("uv")
    return [found] if found else [sys.executable, "-m", "uv"]


def _run(*args: str | Path, cwd: Path = ROOT) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The wheels of agl-core and every adapter, and the lock's versions as constraints."""
    out = tmp_path_factory.mktemp("install-alone")
    wheels = out / "wheels"
    for package in ["agl-core", *ADAPTERS]:
        _run(*_uv(), "build", "--wheel", "--package", package, "-o", wheels, "-q")
    constraints = out / "constraints.txt"
    _run(
        *_uv(), "export", "--format", "requirements-txt", "--all-packages", "--no-hashes",
        "--no-emit-workspace", "--frozen", "-q", "-o", constraints,
    )  # fmt: skip
    return wheels, constraints


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("distribution", sorted(ADAPTERS))
def test_an_adapter_installs_alone_and_instruments_its_framework(
    distribution: str, built: tuple[Path, Path], tmp_path: Path
) -> None:
    wheels, constraints = built
    name, package, framework = ADAPTERS[distribution]
    others = [p for d, (_, p, _) in ADAPTERS.items() if d != distribution]
    others += [f for d, (_, _, f) in ADAPTERS.items() if d != distribution and f != framework]
    venv = tmp_path / "venv"
    _run(*_uv(), "venv", "-q", venv, "--python", sys.executable)
    python = venv / "bin" / "python"
    [core] = wheels.glob("agl_core-*.whl")
    [adapter] = wheels.glob(f"{package}-*.whl")
    if distribution in OWN_OPENTELEMETRY:
        lines = constraints.read_text().splitlines()
        constraints = tmp_path / "constraints.txt"
        constraints.write_text(
            "\n".join(line for line in lines if not line.startswith("opentelemetry-")) + "\n"
        )
    _run(*_uv(), "pip", "install", "-q", "--python", python, "-c", constraints, core, adapter)
    out = _run(python, "-c", CHECK, name, package, framework, *others, cwd=tmp_path)
    assert out.startswith(f"ok {name} "), out
    # agl-core's own instrumentor and this adapter's, nothing else
    assert out.strip().endswith(f"{sorted(['openai', name])}"), out


def test_agl_plugins_lists_every_adapter_of_the_workspace() -> None:
    """``agl plugins --json`` in the workspace, where every adapter is installed."""
    import json

    out = _run(sys.executable, "-m", "agl", "plugins", "--json")
    found = {p["distribution"]: p["instrumentors"] for p in json.loads(out)["plugins"]}
    for distribution, (name, _, _) in ADAPTERS.items():
        assert found.get(distribution) == [name], (distribution, found.get(distribution))
    assert len(ADAPTERS) == 8
