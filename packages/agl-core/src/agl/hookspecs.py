"""The hooks an agl plugin implements: this module is their reference documentation.

A plugin is a module of functions marked ``@agl.hookimpl``, each named after a hook below. Its
distribution points an entry point of group ``agl.plugins`` at the module, and agl finds it
once installed (``agl plugins`` lists what it found)::

    # pyproject.toml of the distribution agl-shout
    [project.entry-points."agl.plugins"]
    shout = "agl_shout.plugin"

    # src/agl_shout/plugin.py
    from __future__ import annotations

    import logging
    from collections.abc import Callable, Mapping, Sequence

    import agl
    from agl.tracing._instrumentor import Instrumentor

    logger = logging.getLogger("agl_shout")


    @agl.hookimpl
    def agl_algorithms() -> Mapping[str, type[agl.Algorithm]]:
        from agl_shout.algorithm import ShoutAlgorithm  # the class; torch & co. load in run()

        return {"shout": ShoutAlgorithm}


    @agl.hookimpl
    def agl_instrumentors() -> Mapping[str, Callable[[agl.Tracer], Instrumentor]]:
        from agl_shout.instrumentor import ShoutInstrumentor

        return {"shout": ShoutInstrumentor}  # built as ShoutInstrumentor(tracer)


    @agl.hookimpl
    def agl_resource_types() -> Sequence[type[agl.Resource]]:
        from agl_shout.resources import Megaphone

        return [Megaphone]


    @agl.hookimpl
    def agl_rollout_end(rollout: agl.Rollout, status: agl.AttemptStatus | None) -> None:
        logger.info("rollout %s ended: %s", rollout.rollout_id, status)

With it installed, ``agl.Trainer(algorithm="shout")``, ``agl.Runner(agent, store,
instrument=["shout"])`` and ``agl runner --instrument shout`` find the plugin's parts by name.

How agl calls hooks:

- **When.** Whatever resolves names builds a :class:`agl.plugins.PluginManager` (a trainer,
  a runner, each ``agl`` command); building one imports every plugin module and calls each
  *provider* hook (``agl_algorithms`` … ``agl_resource_types``) once; the manager keeps the
  answers.
  Provider hooks should only return classes and factories: import heavy libraries (torch, an
  agent framework) inside the algorithm's ``run`` or the factory, not at module level.
- **One plugin at a time.** agl calls each plugin's implementation on its own, so it knows who
  provided what and one plugin's failure does not hide another's answer. Hook wrappers
  (``wrapper=True``, ``hookwrapper=True``) are therefore refused; ``tryfirst``/``trylast``
  order the lifecycle hooks. An implementation may take fewer arguments than its hook.
- **Names.** A name two plugins provide goes to the first: the built-in plugin ``agl`` (core's
  ``baseline`` algorithm, ``openai`` instrumentor, store schemes and credit strategies), then
  installed plugins by entry point name, then plugins given in code
  (``PluginManager([plugin])``, ``Trainer(plugins=[plugin])``). The other is ignored with a
  warning naming both.
- **Mistakes that fail loudly.** A function named ``agl_*`` that is not a hook of this module
  (a misspelling), is not marked ``@agl.hookimpl``, asks for an argument its hook does not have,
  or is a wrapper: every lookup by name and every runner start raise
  :class:`agl.plugins.PluginError` naming the plugin and the hook (and ``agl plugins`` exits
  with 1), until the plugin is fixed or disabled. An implementation of a hook from a newer agl
  may be marked ``@agl.hookimpl(optionalhook=True)`` to be ignored here.
- **Failures that skip the plugin.** A module that does not import, a provider hook that
  raises or returns something other than what its hook promises: the plugin is skipped, with
  one warning on logger ``agl.plugins`` saying which and why, and everything else works.
- **Disabling.** ``AGL_DISABLE_PLUGINS=name1,name2`` (entry point names) or
  ``PluginManager(disable=[...])`` keeps plugins from loading at all.
- **Lifecycle hooks** run on the thread that reaches the moment (the runner's event loop, the
  training loop) and should return quickly. An exception from one is logged (the first time per
  plugin and hook) and does not stop the run.
"""

# The specifications are stubs: their bodies are their docstrings.
# mypy: disable-error-code="empty-body"

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import pluggy

if TYPE_CHECKING:
    from agl._resources import Resource
    from agl._rollouts import Attempt, AttemptStatus, Rollout
    from agl._train._algorithm import Algorithm
    from agl.lightning._credit import CreditAssigner
    from agl.store._base import Store
    from agl.tracing import Tracer
    from agl.tracing._instrumentor import Instrumentor

__all__ = ["LIFECYCLE_HOOKS", "PROJECT_NAME", "PROVIDER_HOOKS", "hookimpl", "hookspec"]

PROJECT_NAME: Final = "agl"
"""pluggy's project name: the markers' attribute names derive from it."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
"""Marks a hook specification (the functions below)."""

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marks a function as the implementation of the hook it is named after (``agl.hookimpl``)."""


# --- what a plugin provides -------------------------------------------------------------------


@hookspec
def agl_algorithms() -> Mapping[str, type[Algorithm]]:
    """Provide algorithms, by the public name users select them with.

    ``agl.Trainer(algorithm="name")`` and ``PluginManager().create_algorithm`` find them; the
    trainer builds one with no arguments, so give every constructor parameter a default.

    Returns:
        Public name → concrete subclass of :class:`agl.Algorithm`, e.g.
        ``{"best-of-n": BestOfN}``. The class's ``name`` attribute is what logs show; it is
        usually the same name.
    """


@hookspec
def agl_instrumentors() -> Mapping[str, Callable[[Tracer], Instrumentor]]:
    """Provide instrumentors: what turns a framework's activity into spans.

    ``agl.Runner(..., instrument=["name"])``, ``agl.Trainer(instrument=[...])`` and
    ``agl runner --instrument name`` build one per runner by calling the factory with the
    runner's :class:`agl.Tracer`, call ``instrument()`` before the first rollout and
    ``uninstrument()`` after the last.

    Returns:
        Name → factory taking the tracer and returning an
        :class:`~agl.tracing.Instrumentor` (usually the instrumentor class itself).
        It must record spans through ``tracer.provider``, be idempotent and fully reversible:
        :mod:`agl.testing.instrumentor` checks all of that.
    """


@hookspec
def agl_stores() -> Mapping[str, Callable[..., Store]]:
    """Provide store backends, by URL scheme.

    :func:`agl.open_store` (and every ``--store URL`` option) hands a URL whose scheme it does
    not know itself to the factory registered for that scheme.

    Returns:
        Lowercase URL scheme (``"postgresql"``) → factory called as
        ``factory(url, **options)`` that returns an :class:`agl.Store`, unopened connections
        allowed (the store is used as an async context manager). :mod:`agl.testing.store` is
        the conformance suite every store must pass.
    """


@hookspec
def agl_credit_assigners() -> Mapping[str, Callable[..., CreditAssigner]]:
    """Provide LightningRL credit-assignment strategies, by name.

    ``TransitionBuilder(credit="name")`` (see :func:`agl.lightning._credit.credit_assigner`) finds
    them.

    Returns:
        Name → factory (usually the class) that builds the strategy with no arguments: an
        object with ``assign(calls, final_reward) -> list[float]``, see
        :class:`agl.lightning.CreditAssigner`.
    """


@hookspec
def agl_resource_types() -> Sequence[type[Resource]]:
    """Provide resource classes, so resources of their ``type`` round-trip through any store.

    This hook is the one way to add resource types (core's built-in plugin lists its own,
    ``llm`` and ``prompt_template``, here too; ``agl.register_resource_type`` is deprecated).
    Stores and store clients keep a resource of a ``type`` that is not core's as an
    :class:`agl.GenericResource` with every field; whoever holds the plugins turns it into the
    plugin's class with :meth:`agl.plugins.PluginManager.upgrade_resources`: the runner does
    before the agent sees it. An algorithm reading its own type back from the store can do the
    same, or validate the generic one's ``model_dump()`` into its class.

    Returns:
        Subclasses of :class:`agl.Resource`, each with a unique literal default for ``type``.
    """


# --- lifecycle --------------------------------------------------------------------------------


@hookspec
def agl_rollout_start(rollout: Rollout, attempt: Attempt) -> None:
    """A runner is about to run the agent on an attempt it claimed.

    Called on the runner's event loop, before the attempt is reported ``running``, outside the
    rollout's trace.

    Args:
        rollout: The rollout, as the store handed it over.
        attempt: The new attempt (status ``preparing``).
    """


@hookspec
def agl_rollout_end(rollout: Rollout, attempt: Attempt, status: AttemptStatus | None) -> None:
    """A runner is done with an attempt; called once for every ``agl_rollout_start``.

    Called on the runner's event loop after the attempt's spans reached the store and its
    outcome was reported.

    Args:
        rollout: The rollout, as the store handed it over.
        attempt: The attempt, as claimed.
        status: What the runner reported: ``succeeded``, ``failed``, ``timeout`` or
            ``released``; None when the store had already ended the attempt (it timed out, was
            found unresponsive or was cancelled), or the runner itself failed.
    """


@hookspec
def agl_step_start(algorithm: str, step: int) -> None:
    """A training step begins.

    Args:
        algorithm: The running algorithm's ``name``.
        step: The step's number, as the algorithm logs it.
    """


@hookspec
def agl_step_end(algorithm: str, step: int, metrics: Mapping[str, float]) -> None:
    """A training step ended.

    Args:
        algorithm: The running algorithm's ``name``.
        step: The step's number.
        metrics: The metrics the algorithm logged for the step.
    """


PROVIDER_HOOKS: Final[tuple[str, ...]] = (
    "agl_algorithms",
    "agl_instrumentors",
    "agl_stores",
    "agl_credit_assigners",
    "agl_resource_types",
)
"""Hooks agl calls once per plugin, at load, for what the plugin provides."""

LIFECYCLE_HOOKS: Final[tuple[str, ...]] = (
    "agl_rollout_start",
    "agl_rollout_end",
    "agl_step_start",
    "agl_step_end",
)
"""Hooks agl calls when something happens (through ``PluginManager.hook``)."""
