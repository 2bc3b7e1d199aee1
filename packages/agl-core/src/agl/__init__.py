"""agl: train any AI agent with reinforcement learning, prompt optimization and fine-tuning."""

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

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "AglError",
    "Attempt",
    "AttemptStatus",
    "Claim",
    "ConflictError",
    "GenericResource",
    "InvalidInputError",
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
    "UnauthorizedError",
    "Worker",
    "open_store",
    "register_resource_type",
    "resource_types",
]
