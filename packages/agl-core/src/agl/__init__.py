"""agl: train any AI agent with reinforcement learning, prompt optimization and fine-tuning."""

from typing import TYPE_CHECKING, Any

from agl._errors import (
    AglError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
    TemplateFormatError,
    UnauthorizedError,
)
from agl._metric_rows import MetricsPage, MetricsRow
from agl._resources import (
    LLM,
    GenericResource,
    PromptTemplate,
    Resource,
    ResourcesPage,
    ResourcesUpdate,
    register_resource_type,
    resource_types,
)
from agl._rollouts import (
    Attempt,
    AttemptStatus,
    Claim,
    Rollout,
    RolloutConfig,
    RolloutPage,
    RolloutRequest,
    RolloutStatus,
    Worker,
)
from agl._run._agent import LitAgent, rollout
from agl._run._emitters import (
    NoRolloutError,
    agent_span,
    emit_annotation,
    emit_exception,
    emit_message,
    emit_object,
    emit_reward,
    operation,
)
from agl._settings import SamplingSettings, check_at_least, settings
from agl._spans import Span, SpanEvent, SpanKind, SpanLink, SpanStatus, StatusCode
from agl.store import Store, StoreStatistics, open_store

if TYPE_CHECKING:
    from agl._results import FitResult, RolloutResult
    from agl._run._command_agent import CommandAgent, CommandResult
    from agl._run._runner import Runner
    from agl._serving._server_thread import ServerThread
    from agl._train._algorithm import (
        Algorithm,
        AlgorithmContext,
        Baseline,
        LoopSettings,
        StepAlgorithm,
        StepBatch,
        model_or_env,
        reward_metrics,
    )
    from agl._train._datasets import DatasetSource, load_tasks
    from agl._train._metrics_read import plot_metrics, read_metrics
    from agl._train._per_agent import PerAgent
    from agl._train._script import Script, ScriptRun
    from agl._train._trainer import Trainer
    from agl.hookspecs import hookimpl
    from agl.lightning import Transition, TransitionBatch, TransitionBuilder
    from agl.tracing import Tracer


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agl-core")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"


_LAZY = {
    "Algorithm": "agl._train._algorithm",
    "AlgorithmContext": "agl._train._algorithm",
    "Baseline": "agl._train._algorithm",
    "CommandAgent": "agl._run._command_agent",
    "CommandResult": "agl._run._command_agent",
    "DatasetSource": "agl._train._datasets",
    "ServerThread": "agl._serving._server_thread",
    "load_tasks": "agl._train._datasets",
    "model_or_env": "agl._train._algorithm",
    "plot_metrics": "agl._train._metrics_read",
    "read_metrics": "agl._train._metrics_read",
    "reward_metrics": "agl._train._algorithm",
    "FitResult": "agl._results",
    "TransitionBuilder": "agl.lightning",
    "LoopSettings": "agl._settings",
    "PerAgent": "agl._train._per_agent",
    "StepAlgorithm": "agl._train._algorithm",
    "StepBatch": "agl._train._algorithm",
    "Transition": "agl.lightning",
    "TransitionBatch": "agl.lightning",
    "hookimpl": "agl.hookspecs",
    "RolloutResult": "agl._results",
    "Runner": "agl._run._runner",
    "Script": "agl._train._script",
    "ScriptRun": "agl._train._script",
    "Tracer": "agl.tracing",
    "Trainer": "agl._train._trainer",
}


def __getattr__(name: str) -> Any:
    # These pull in the OpenTelemetry SDK, rich's progress bars and the like: load them on
    # first use, keeping `import agl` light. __version__ (agl-core's version, as its installed
    # distribution says) too: importlib.metadata costs ~35 ms at import.
    if name == "__version__":
        return _version()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agl' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "LLM",
    "AglError",
    "Algorithm",
    "AlgorithmContext",
    "Attempt",
    "AttemptStatus",
    "Baseline",
    "Claim",
    "CommandAgent",
    "CommandResult",
    "ConflictError",
    "DatasetSource",
    "FitResult",
    "GenericResource",
    "InvalidInputError",
    "LitAgent",
    "LoopSettings",
    "MetricsPage",
    "MetricsRow",
    "NoRolloutError",
    "NotFoundError",
    "PerAgent",
    "PromptTemplate",
    "Resource",
    "ResourcesPage",
    "ResourcesUpdate",
    "Rollout",
    "RolloutConfig",
    "RolloutPage",
    "RolloutRequest",
    "RolloutResult",
    "RolloutStatus",
    "Runner",
    "SamplingSettings",
    "Script",
    "ScriptRun",
    "ServerThread",
    "Span",
    "SpanEvent",
    "SpanKind",
    "SpanLink",
    "SpanStatus",
    "StatusCode",
    "StepAlgorithm",
    "StepBatch",
    "Store",
    "StoreError",
    "StoreFullError",
    "StoreStatistics",
    "StoreUnavailableError",
    "TemplateFormatError",
    "Tracer",
    "Trainer",
    "Transition",
    "TransitionBatch",
    "TransitionBuilder",
    "UnauthorizedError",
    "Worker",
    "agent_span",
    "check_at_least",
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_reward",
    "hookimpl",
    "load_tasks",
    "model_or_env",
    "open_store",
    "operation",
    "plot_metrics",
    "read_metrics",
    "register_resource_type",
    "resource_types",
    "reward_metrics",
    "rollout",
    "settings",
]
