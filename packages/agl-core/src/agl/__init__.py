"""agl: train any AI agent with reinforcement learning, prompt optimization and fine-tuning."""

from typing import TYPE_CHECKING, Any

from agl.agent import LitAgent, rollout
from agl.emitters import (
    NoRolloutError,
    agent_span,
    emit_annotation,
    emit_exception,
    emit_message,
    emit_object,
    emit_reward,
    operation,
)
from agl.errors import (
    AglError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
    TemplateFormatError,
    UnauthorizedError,
)
from agl.resources import (
    LLM,
    GenericResource,
    PromptTemplate,
    Resource,
    ResourcesUpdate,
    register_resource_type,
    resource_types,
)
from agl.rollouts import (
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
from agl.settings import SamplingSettings
from agl.spans import Span, SpanEvent, SpanKind, SpanLink, SpanStatus, StatusCode
from agl.store import Store, StoreStatistics, open_store

if TYPE_CHECKING:
    from agl.algorithm import (
        Algorithm,
        AlgorithmContext,
        Baseline,
        LoopSettings,
        StepAlgorithm,
        StepBatch,
    )
    from agl.hookspecs import hookimpl
    from agl.lightning import Transition, TransitionBatch, TransitionBuilder
    from agl.per_agent import PerAgent
    from agl.results import RolloutResult
    from agl.runner import Runner
    from agl.tracing import Tracer
    from agl.trainer import FitResult, Trainer


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agl-core")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"


__version__ = _version()
"""agl-core's version, as its installed distribution says."""


_LAZY = {
    "Algorithm": "agl.algorithm",
    "AlgorithmContext": "agl.algorithm",
    "Baseline": "agl.algorithm",
    "FitResult": "agl.trainer",
    "TransitionBuilder": "agl.lightning",
    "LoopSettings": "agl.algorithm",
    "PerAgent": "agl.per_agent",
    "StepAlgorithm": "agl.algorithm",
    "StepBatch": "agl.algorithm",
    "Transition": "agl.lightning",
    "TransitionBatch": "agl.lightning",
    "hookimpl": "agl.hookspecs",
    "RolloutResult": "agl.results",
    "Runner": "agl.runner",
    "Tracer": "agl.tracing",
    "Trainer": "agl.trainer",
}


def __getattr__(name: str) -> Any:
    # These pull in the OpenTelemetry SDK, rich's progress bars and the like: load them on
    # first use, keeping `import agl` light.
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
    "ConflictError",
    "FitResult",
    "GenericResource",
    "InvalidInputError",
    "LitAgent",
    "LoopSettings",
    "NoRolloutError",
    "NotFoundError",
    "PerAgent",
    "PromptTemplate",
    "Resource",
    "ResourcesUpdate",
    "Rollout",
    "RolloutConfig",
    "RolloutPage",
    "RolloutRequest",
    "RolloutResult",
    "RolloutStatus",
    "Runner",
    "SamplingSettings",
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
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_reward",
    "hookimpl",
    "open_store",
    "operation",
    "register_resource_type",
    "resource_types",
    "rollout",
]
