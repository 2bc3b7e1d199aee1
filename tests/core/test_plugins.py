"""Plugin discovery: real entry points of a real (if tiny) installed distribution.

Each test writes a distribution's ``.dist-info`` directory and its modules to a temporary
folder and puts that folder on ``sys.path``, which is all ``importlib.metadata`` needs to find
the entry points, just as it finds those of a wheel pip installed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agl.cli import app
from agl.plugins import ENTRY_POINT_GROUP, PluginInfo, installed_plugins

OK_MODULE = "agl_test_plugin_ok"
BROKEN_MODULE = "agl_test_plugin_broken"
NAMES = {"test-ok", "test-broken"}


@pytest.fixture
def fake_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Install ``agl-test-plugins`` 1.2.3 with one plugin that imports and one that does not."""
    (tmp_path / f"{OK_MODULE}.py").write_text("LOADED = True\n")
    (tmp_path / f"{BROKEN_MODULE}.py").write_text("import agl_no_such_dependency\n")
    dist_info = tmp_path / "agl_test_plugins-1.2.3.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: agl-test-plugins\nVersion: 1.2.3\n"
    )
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\ntest-ok = {OK_MODULE}\ntest-broken = {BROKEN_MODULE}\n\n"
        "[console_scripts]\nnot-a-plugin = agl_test_plugin_ok:main\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for module in (OK_MODULE, BROKEN_MODULE):
        sys.modules.pop(module, None)


def ours(plugins: list[PluginInfo]) -> dict[str, PluginInfo]:
    """The test plugins among whatever else this environment has installed."""
    return {plugin.name: plugin for plugin in plugins if plugin.name in NAMES}


def test_installed_plugins_reports_both_and_imports_the_good_one(
    fake_distribution: Path,
) -> None:
    found = ours(installed_plugins())

    assert found["test-ok"] == PluginInfo(
        name="test-ok",
        module=OK_MODULE,
        distribution="agl-test-plugins",
        version="1.2.3",
        error=None,
    )
    assert sys.modules[OK_MODULE].LOADED is True
    broken = found["test-broken"]
    assert (broken.module, broken.distribution, broken.version) == (
        BROKEN_MODULE,
        "agl-test-plugins",
        "1.2.3",
    )
    assert broken.error == "ModuleNotFoundError: No module named 'agl_no_such_dependency'"
    assert "not-a-plugin" not in {plugin.name for plugin in installed_plugins()}


def test_without_the_distribution_the_plugins_are_gone() -> None:
    assert ours(installed_plugins()) == {}


def test_cli_plugins_table(fake_distribution: Path) -> None:
    result = CliRunner().invoke(app, ["plugins"], env={"COLUMNS": "200", "FORCE_COLOR": None})

    assert result.exit_code == 0, result.output
    lines = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if "│" in line}
    assert OK_MODULE in lines["test-ok"]
    assert "agl-test-plugins" in lines["test-ok"]
    assert "1.2.3" in lines["test-ok"]
    assert "│ ok" in lines["test-ok"]
    assert BROKEN_MODULE in lines["test-broken"]
    assert (
        "error: ModuleNotFoundError: No module named 'agl_no_such_dependency'"
        in (lines["test-broken"])
    )


def test_cli_plugins_json(fake_distribution: Path) -> None:
    result = CliRunner().invoke(app, ["plugins", "--json"])

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    found = {plugin["name"]: plugin for plugin in data["plugins"] if plugin["name"] in NAMES}
    assert found["test-ok"] == {
        "name": "test-ok",
        "module": OK_MODULE,
        "distribution": "agl-test-plugins",
        "version": "1.2.3",
        "error": None,
    }
    assert found["test-broken"]["error"].startswith("ModuleNotFoundError:")
