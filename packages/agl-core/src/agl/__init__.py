"""agl: train any AI agent with reinforcement learning, prompt optimization and fine-tuning."""

from typing import TYPE_CHECKING, Any

from agl.emitters import (
    NoRolloutError,
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
from agl.spans import Span, SpanEvent, SpanKind, SpanLink, SpanStatus, StatusCode
from agl.store import Store, StoreStatistics, open_store

if TYPE_CHECKING:
    from agl.tracing import Tracer

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The tracer pulls in the OpenTelemetry SDK: load it on first use, keeping `import agl` light.
    if name == "Tracer":
        from agl.tracing import Tracer

        return Tracer
    raise AttributeError(f"module 'agl' has no attribute {name!r}")


__all__ = [
    "LLM",
    "AglError",
    "Attempt",
    "AttemptStatus",
    "Claim",
    "ConflictError",
    "GenericResource",
    "InvalidInputError",
    "NoRolloutError",
    "NotFoundError",
    "PromptTemplate",
    "Resource",
    "ResourcesUpdate",
    "Rollout",
    "RolloutConfig",
    "RolloutPage",
    "RolloutRequest",
    "RolloutStatus",
    "Span",
    "SpanEvent",
    "SpanKind",
    "SpanLink",
    "SpanStatus",
    "StatusCode",
    "Store",
    "StoreError",
    "StoreStatistics",
    "StoreUnavailableError",
    "TemplateFormatError",
    "Tracer",
    "UnauthorizedError",
    "Worker",
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_reward",
    "open_store",
    "operation",
    "register_resource_type",
    "resource_types",
]
