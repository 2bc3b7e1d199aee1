"""Declared requirements checked against what is installed: :mod:`agl._requirements`, what
``agl plugins`` says of a plugin whose requirement is off, and the instrumentor's warning.

The distributions are real, if tiny: a ``.dist-info`` folder (``METADATA`` with
``Requires-Dist`` lines, ``entry_points.txt``) in a folder on ``sys.path``, which is all
``importlib.metadata`` reads for a wheel pip installed. Each test names its own distributions
(the check is cached per distribution for the life of the process).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agl
from agl._requirements import UnmetRequirement, unmet_requirements
from agl.cli import app
from agl.plugins import DISABLE_ENV, ENTRY_POINT_GROUP, PluginManager
from agl.store._memory import MemoryStore

Install = Callable[..., str]

PACKAGING = importlib.metadata.version("packaging")

INSTRUMENTOR_PLUGIN = """
    import agl
    from agl.tracing._instrumentor import PatchingInstrumentor


    class Nothing(PatchingInstrumentor):
        def apply(self, undo):
            pass


    @agl.hookimpl
    def agl_instrumentors():
        return {"{name}": Nothing}
"""


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """Install a distribution (a unique name from ``stem``) with these ``Requires-Dist`` lines
    and, given ``plugin``, a plugin module as its ``agl.plugins`` entry point; return its name."""
    modules: list[str] = []
    monkeypatch.delenv(DISABLE_ENV, raising=False)

    def install(
        stem: str, requires: list[str], plugin: str | None = None, *, name: str | None = None
    ) -> str:
        name = name or f"agl-t-{stem}-{uuid.uuid4().hex[:8]}"
        root = tmp_path / name
        dist_info = root / f"{name.replace('-', '_')}-0.1.0.dist-info"
        dist_info.mkdir(parents=True)
        lines = "".join(f"Requires-Dist: {line}\n" for line in requires)
        extras = {line.split("extra == ")[1].strip("'\" ") for line in requires if "extra" in line}
        provides = "".join(f"Provides-Extra: {extra}\n" for extra in sorted(extras))
        (dist_info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n{provides}{lines}"
        )
        if plugin is not None:
            module = name.replace("-", "_")
            source = textwrap.dedent(plugin).replace("{name}", stem)
            (root / f"{module}.py").write_text(source)
            (dist_info / "entry_points.txt").write_text(
                f"[{ENTRY_POINT_GROUP}]\n{stem} = {module}\n"
            )
            modules.append(module)
        monkeypatch.syspath_prepend(str(root))
        return name

    yield install
    for module in modules:
        sys.modules.pop(module, None)


def test_each_unmet_requirement_is_named_with_what_is_installed(install: Install) -> None:
    name = install(
        "reqs",
        [
            "packaging>=1000",  # installed, too old
            "agl-no-such-distribution>=1.0",  # missing
            "pluggy>=1",  # met
            "agl-not-on-this-platform>=1; sys_platform == 'no-such-platform'",  # not here
            "agl-only-with-an-extra>=1; extra == 'more'",  # nobody asked for the extra
            f"packaging<{PACKAGING}; python_version >= '3'",  # a marker that holds
        ],
    )
    unmet = unmet_requirements(name)
    assert [str(problem) for problem in unmet] == [
        f"packaging>=1000 (installed: {PACKAGING})",
        "agl-no-such-distribution>=1.0 (installed: missing)",
        f"packaging<{PACKAGING} (installed: {PACKAGING})",
    ]
    assert unmet[1] == UnmetRequirement(name, "agl-no-such-distribution", ">=1.0", None)
    with_extra = [str(p) for p in unmet_requirements(name, ("more",))]
    assert with_extra == [str(p) for p in unmet[:2]] + [
        "agl-only-with-an-extra>=1 (installed: missing)",
        str(unmet[2]),
    ]


def test_an_extra_another_distribution_asks_for_is_checked(install: Install) -> None:
    base = install("base", ["agl-needed-for-x>=2; extra == 'x'"])
    user = install("user", [f"{base}[x]>=0.1"])
    assert [str(p) for p in unmet_requirements(user)] == [
        "agl-needed-for-x>=2 (installed: missing)"
    ]
    assert unmet_requirements(base) == ()


def test_extras_that_ask_for_each_other_in_a_cycle_are_checked_once(install: Install) -> None:
    suffix = uuid.uuid4().hex[:8]
    a, b = f"agl-t-cyclea-{suffix}", f"agl-t-cycleb-{suffix}"
    install("cyclea", [f"{b}[x]", "agl-missing-for-y>=1; extra == 'y'"], name=a)
    install("cycleb", [f"{a}[y]; extra == 'x'"], name=b)
    assert [str(p) for p in unmet_requirements(a)] == ["agl-missing-for-y>=1 (installed: missing)"]


def test_agl_plugins_says_which_requirement_is_off(install: Install) -> None:
    name = install("pinned", ["packaging<1", "agl-no-such-framework>=1.7,<1.8"], "")
    env = {"COLUMNS": "300", "FORCE_COLOR": None, "TTY_COMPATIBLE": None}
    result = CliRunner().invoke(app, ["plugins"], env=env)
    assert result.exit_code == 0, result.output
    row = " ".join(line for line in result.stdout.splitlines() if name in line or "not met" in line)
    assert f"requirement not met: packaging<1 (installed: {PACKAGING})" in row
    assert "requirement not met: agl-no-such-framework<1.8,>=1.7 (installed: missing)" in row
    assert f"warning: plugin 'pinned' ({name} 0.1.0) may fail" in result.stderr
    assert "agl-no-such-framework<1.8,>=1.7 (installed: missing)" in result.stderr

    result = CliRunner().invoke(app, ["plugins", "--json"], env=env)
    found = {p["name"]: p for p in json.loads(result.stdout)["plugins"]}
    assert found["pinned"]["unmet_requirements"] == [
        {"name": "packaging", "specifier": "<1", "installed": PACKAGING},
        {"name": "agl-no-such-framework", "specifier": "<1.8,>=1.7", "installed": None},
    ]
    assert found["agl"]["unmet_requirements"] == []


def test_an_instrumentor_whose_requirements_are_off_warns_when_built(
    install: Install, caplog: pytest.LogCaptureFixture
) -> None:
    name = install("framework", ["agl-no-such-framework>=2"], INSTRUMENTOR_PLUGIN)
    with (
        caplog.at_level(logging.WARNING, logger="agl._requirements"),
        agl.Tracer(MemoryStore()) as tracer,
    ):
        instrumentor = PluginManager().create_instrumentor("framework", tracer)
    assert instrumentor is not None
    [warning] = [r.getMessage() for r in caplog.records if r.name == "agl._requirements"]
    assert warning.startswith(
        f"instrumentor 'framework' comes from {name}, whose requirements are not met: "
        "agl-no-such-framework>=2 (installed: missing)"
    )


def test_an_adapters_own_instrument_function_warns_too(
    install: Install, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    name = install("script", ["agl-no-such-framework>=3"])
    package = name.replace("-", "_")
    root = tmp_path / name
    (root / package).mkdir()
    (root / package / "__init__.py").write_text(
        "from agl.tracing._instrumentor import script_api\n\n"
        f'instrument, uninstrument, __getattr__ = script_api("{package}.instrumentor:Nothing", '
        '"Nothing")\n'
    )
    (root / package / "instrumentor.py").write_text(
        textwrap.dedent(INSTRUMENTOR_PLUGIN).split("@agl.hookimpl")[0]
    )
    (next(root.glob("*.dist-info")) / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nscript = {package}\n"
    )
    module = importlib.import_module(package)
    try:
        with (
            caplog.at_level(logging.WARNING, logger="agl._requirements"),
            agl.Tracer(MemoryStore()) as tracer,
        ):
            module.instrument(tracer)
            module.uninstrument()
    finally:
        for loaded in [m for m in sys.modules if m.split(".")[0] == package]:
            del sys.modules[loaded]
    [warning] = [r.getMessage() for r in caplog.records if r.name == "agl._requirements"]
    assert warning.startswith(
        f"{package}.instrument comes from {name}, whose requirements are not met: "
        "agl-no-such-framework>=3 (installed: missing)"
    )
