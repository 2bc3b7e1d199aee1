"""The plugin template, as a user gets it: built into a wheel, installed into a fresh
environment, found by ``agl plugins``, trained with by name, and passing its own tests there.

The build runs offline when it can: uv is given the package indexes pip is configured with (uv
does not read pip's configuration) and its own cache, and only reaches for the network when
neither has hatchling. The fresh environment sees this one's packages (agl-core and its
dependencies, pytest) through a ``.pth`` file, so nothing but the template is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TEMPLATE = Path(__file__).resolve().parents[2] / "examples" / "plugin-template"

TRAIN_BY_NAME = """
import json, sys
import agl
import agl_best_of_n

@agl.rollout
def agent(task, prompt_template: agl.PromptTemplate) -> float:
    return 1.0 if prompt_template.format(**task).startswith("Think step by step") else 0.0

trainer = agl.Trainer(
    algorithm="best-of-n",
    store="memory://",
    run_dir=sys.argv[1],
    resources={"prompt": agl.PromptTemplate(template="What is {x} squared?")},
    console=False, progress=False, plot=False,
)
result = trainer.fit(agent, [{"x": 2}, {"x": 3}])
print(json.dumps({
    "class": type(trainer.algorithm).__module__ + "." + type(trainer.algorithm).__qualname__,
    "module_file": agl_best_of_n.__file__,
    "best": trainer.algorithm.best.template,
    "best_candidate": result.last("best/candidate"),
}))
"""


def run(*command: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def uv() -> list[str]:
    found = shutil.which("uv")
    return [found] if found else [sys.executable, "-m", "uv"]


def uv_environment() -> dict[str, str]:
    """This environment for uv, plus the indexes pip is configured with (uv ignores pip's)."""
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    pip = {"find-links": "UV_FIND_LINKS", "index-url": "UV_INDEX_URL"}
    pip["extra-index-url"] = "UV_EXTRA_INDEX_URL"
    for python in (sys.executable, "python3"):
        try:
            listed = subprocess.run(
                [python, "-m", "pip", "config", "list"],
                capture_output=True, text=True, timeout=60, check=True,
            ).stdout  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            continue
        for line in listed.splitlines():  # global.find-links='/some/wheels'
            key, _, value = line.partition("=")
            name = pip.get(key.rpartition(".")[2])
            if name and name not in env:
                env[name] = " ".join(value.strip("'\"").split())
        break
    for option, name in pip.items():
        value = os.environ.get("PIP_" + option.upper().replace("-", "_"))
        if value and name not in env:
            env[name] = value
    if "UV_FIND_LINKS" in env:  # uv separates find-links with commas, pip with spaces
        env["UV_FIND_LINKS"] = ",".join(env["UV_FIND_LINKS"].split())
    return env


def build_wheel(source: Path, out: Path, env: dict[str, str]) -> Path:
    """Build the template's wheel offline if the indexes or uv's cache allow, else online."""
    outputs = []
    for offline in (["--offline"], []):
        done = subprocess.run(
            [*uv(), "build", "--wheel", *offline, "--out-dir", str(out), str(source)],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if done.returncode == 0:
            [wheel] = out.glob("agl_best_of_n-*.whl")
            return wheel
        outputs.append(done.stderr)
    pytest.fail("cannot build the template's wheel:\n" + "\n".join(outputs))


def test_the_template_installs_as_a_plugin_and_passes_its_tests(tmp_path: Path) -> None:
    source = tmp_path / "plugin-template"
    shutil.copytree(
        TEMPLATE, source, ignore=shutil.ignore_patterns("__pycache__", ".*cache", "dist", "build")
    )
    env = uv_environment()
    wheel = build_wheel(source, tmp_path / "dist", env)

    venv = tmp_path / "venv"
    run(*uv(), "venv", "--offline", "--python", sys.executable, venv, env=env)
    python = venv / "bin" / "python"
    purelib = run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").strip()
    parent = [path for path in site.getsitepackages() if Path(path).is_dir()]
    lines = "".join(f"import site; site.addsitedir({path!r})\n" for path in parent)
    (Path(purelib) / "_agl_parent_environment.pth").write_text(lines)
    # Only the template: agl-core, its requirement, comes from this environment.
    run(*uv(), "pip", "install", "--offline", "--no-deps", "--python", python, wheel, env=env)
    metadata = "import importlib.metadata as m; print(m.requires('agl-best-of-n'))"
    assert run(python, "-c", metadata).startswith("['agl-core>=0.1', ")
    run(python, "-c", "import importlib.metadata as m; m.distribution('agl-core')")  # visible

    child = {**env, "AGL_DISABLE_PLUGINS": ""}
    listed = json.loads(run(python, "-m", "agl", "plugins", "--json", env=child))
    [plugin] = [p for p in listed["plugins"] if p["name"] == "best-of-n"]
    assert plugin["module"] == "agl_best_of_n.plugin"
    assert (plugin["distribution"], plugin["version"]) == ("agl-best-of-n", "0.1.0")
    assert (plugin["status"], plugin["algorithms"]) == ("ok", ["best-of-n"])

    script = tmp_path / "train_by_name.py"
    script.write_text(textwrap.dedent(TRAIN_BY_NAME))
    trained = json.loads(run(python, script, tmp_path / "run", cwd=tmp_path, env=child))
    assert trained["class"] == "agl_best_of_n.algorithm.BestOfNAlgorithm"
    assert Path(trained["module_file"]).is_relative_to(purelib)  # the installed wheel
    assert trained["best"].startswith("Think step by step, then give the final answer.\nWhat is")
    assert trained["best_candidate"] == 3.0

    tests = run(python, "-m", "pytest", "-p", "no:cacheprovider", "-q", cwd=source, env=child)
    assert " passed" in tests
    assert "failed" not in tests
    assert "error" not in tests.lower()
