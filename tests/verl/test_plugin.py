"""agl-verl registers its algorithm through agl's plugin entry point."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agl import InvalidInputError
from agl.plugins import PluginManager
from agl_verl.rl import LightningRLVerl
from agl_verl.sft import SFTVerl


def test_both_algorithms_are_found_by_name() -> None:
    assert PluginManager().provided("agl_algorithms")["lightningrl-verl"] is LightningRLVerl
    assert PluginManager().provided("agl_algorithms")["sft-verl"] is SFTVerl


@pytest.mark.parametrize(
    ("name", "cls"), [("lightningrl-verl", LightningRLVerl), ("sft-verl", SFTVerl)]
)
def test_building_by_name_reads_the_model_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, model_dir: Path, name: str, cls: type
) -> None:
    monkeypatch.setenv("AGL_VERL_MODEL", str(model_dir))
    algorithm = PluginManager().create_algorithm(name)
    assert isinstance(algorithm, cls)
    assert algorithm.model == str(model_dir)


def test_a_missing_model_is_refused_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    monkeypatch.delenv("AGL_VERL_MODEL", raising=False)
    with pytest.raises(InvalidInputError, match="needs a model to train"):
        asyncio.run(LightningRLVerl().setup(None))  # type: ignore[arg-type]


def test_looking_the_algorithm_up_loads_neither_verl_nor_torch() -> None:
    code = (
        "import sys\n"
        "from agl.plugins import PluginManager\n"
        "found = set(PluginManager().provided('agl_algorithms'))\n"
        "assert {'lightningrl-verl', 'sft-verl'} <= found\n"
        "print(sorted(m for m in ('verl', 'torch', 'ray') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
