"""The hook specifications are the reference documentation: complete, typed, and the example
plugin in their module docstring is a valid plugin."""

from __future__ import annotations

import inspect
import re
import textwrap
import types
import typing
from collections.abc import Callable
from typing import Any

import pluggy
import pytest

import agl
from agl import hookspecs
from agl.hookspecs import LIFECYCLE_HOOKS, PROVIDER_HOOKS


def specs() -> dict[str, Callable[..., Any]]:
    return {
        name: value
        for name, value in vars(hookspecs).items()
        if callable(value) and hasattr(value, "agl_spec")
    }


def test_every_hook_is_listed_once() -> None:
    assert sorted(specs()) == sorted([*PROVIDER_HOOKS, *LIFECYCLE_HOOKS])
    assert len(set(PROVIDER_HOOKS) | set(LIFECYCLE_HOOKS)) == len(specs())


@pytest.mark.parametrize("name", sorted(specs()))
def test_every_hook_is_typed_and_documented(name: str) -> None:
    from agl import Algorithm, Attempt, AttemptStatus, Rollout
    from agl.lightning._credit import CreditAssigner
    from agl.tracing._instrumentor import Instrumentor

    spec = specs()[name]
    namespace = {
        **vars(hookspecs),
        "Algorithm": Algorithm,
        "CreditAssigner": CreditAssigner,
        "Resource": agl.Resource,
        "Attempt": Attempt,
        "AttemptStatus": AttemptStatus,
        "Rollout": Rollout,
        "Store": agl.Store,
        "Tracer": agl.Tracer,
        "Instrumentor": Instrumentor,
    }
    hints = typing.get_type_hints(spec, globalns=namespace)
    parameters = list(inspect.signature(spec).parameters)
    assert set(hints) == {*parameters, "return"}
    doc = inspect.getdoc(spec) or ""
    assert doc.split("\n")[0].endswith("."), "a one-line summary first"
    if name in PROVIDER_HOOKS:
        assert parameters == []
        assert "Returns:" in doc
    else:
        assert hints["return"] is type(None)
        for parameter in parameters:
            assert f"    {parameter}: " in doc, f"{name}: argument {parameter} is not documented"


def test_the_example_plugin_in_the_module_docstring_is_valid() -> None:
    doc = hookspecs.__doc__ or ""
    match = re.search(r"# src/agl_shout/plugin.py\n(.*?)\nWith it installed", doc, re.S)
    assert match, "the module docstring shows a plugin module"
    module = types.ModuleType("agl_shout_plugin")
    exec(textwrap.dedent(match.group(1)), module.__dict__)

    manager = pluggy.PluginManager("agl")
    manager.add_hookspecs(hookspecs)
    manager.register(module)
    manager.check_pending()
    implemented = {caller.name for caller in manager.get_hookcallers(module) or []}
    assert implemented == {
        "agl_algorithms",
        "agl_instrumentors",
        "agl_resource_types",
        "agl_rollout_end",
    }
