"""Core's own plugin, ``agl``: what agl-core provides under names, as any plugin would.

It is registered before every installed plugin, so these names are never shadowed: a plugin
that provides one of them too is ignored for that name, with a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from agl.hookspecs import hookimpl

if TYPE_CHECKING:
    from agl._resources import Resource
    from agl._train._algorithm import Algorithm
    from agl.lightning._credit import CreditAssigner
    from agl.store._base import Store
    from agl.tracing import Tracer
    from agl.tracing._instrumentor import Instrumentor


@hookimpl
def agl_algorithms() -> Mapping[str, type[Algorithm]]:
    from agl._train._algorithm import Baseline

    return {"baseline": Baseline}


@hookimpl
def agl_instrumentors() -> Mapping[str, Callable[[Tracer], Instrumentor]]:
    return {"openai": _openai}


def _openai(tracer: Tracer) -> Instrumentor:
    # Imported on use: the instrumentation pulls in opentelemetry-instrumentation-openai.
    from agl.tracing._openai import OpenAIInstrumentation

    return OpenAIInstrumentation(tracer)


@hookimpl
def agl_stores() -> Mapping[str, Callable[..., Store]]:
    # open_store handles these schemes itself; listing them here puts them in `agl plugins`
    # and keeps a plugin from claiming them.
    from agl.store._open import SCHEMES, open_store

    return dict.fromkeys(SCHEMES, open_store)


@hookimpl
def agl_credit_assigners() -> Mapping[str, Callable[..., CreditAssigner]]:
    from agl.lightning._credit import BUILTIN_CREDIT

    return dict(BUILTIN_CREDIT)


@hookimpl
def agl_resource_types() -> Sequence[type[Resource]]:
    from agl._resources import CORE_TYPES

    return list(CORE_TYPES.values())
