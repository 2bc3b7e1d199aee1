"""The public surface of `agl` is deliberate: this test changes whenever it does."""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import subprocess
import sys

import pytest

import agl

EXPECTED = {
    "LLM", "AglError", "Attempt", "AttemptStatus", "Claim", "ConflictError", "GenericResource",
    "InvalidInputError", "NotFoundError", "PromptTemplate", "Resource", "ResourcesUpdate",
    "ResourcesPage", "MetricsRow", "MetricsPage",
    "Rollout", "RolloutConfig", "RolloutPage", "RolloutRequest", "RolloutStatus", "Span",
    "SpanEvent", "SpanKind", "SpanLink", "SpanStatus", "StatusCode", "Store", "StoreError",
    "StoreStatistics", "StoreFullError", "StoreUnavailableError", "TemplateFormatError",
    "UnauthorizedError",
    "Worker", "open_store", "register_resource_type", "resource_types", "NoRolloutError",
    "Tracer", "emit_annotation", "emit_exception", "emit_message", "emit_object", "emit_reward",
    "operation", "Algorithm", "AlgorithmContext", "Baseline", "FitResult", "LitAgent",
    "RolloutResult", "Runner", "Trainer", "rollout", "agent_span", "hookimpl", "TransitionBuilder",
    "Transition", "TransitionBatch", "PerAgent", "StepAlgorithm", "StepBatch", "LoopSettings",
    "SamplingSettings", "DatasetSource", "ServerThread", "check_at_least", "load_tasks",
    "model_or_env", "plot_metrics", "read_metrics", "reward_metrics", "settings",
    "CommandAgent", "CommandResult", "Script", "ScriptRun",
}  # fmt: skip


FACADES = {
    "agl.store": {
        "ClosingStore", "HttpStore", "MemoryStore", "PostgresStore", "SQLiteStore", "Store",
        "StoreServer", "StoreStatistics", "open_store",
    },
    "agl.tracing": {
        "Instrumentor", "InstrumentorFactory", "Normalize", "NormalizingSpan",
        "NormalizingTracerProvider", "OpenAIInstrumentation", "OpenInferenceInstrumentor",
        "PatchingInstrumentor", "RolloutBinding", "ScriptAPI", "ScriptInstrumentation",
        "SenderStats", "SpanSender", "Tracer", "agent_attributes", "current_binding",
        "genai_attributes",
        "is_llm_span", "note_response", "openinference_attributes", "patch", "script_api",
        "tool_attributes",
    },
    "agl.lightning": {
        "GRPO", "INFRASTRUCTURE_STATUSES", "RLOO", "AdvantageEstimator", "AgentSelector",
        "AgentStats", "AttemptCalls", "CreditAssigner", "DiscountedReturn", "DropReport",
        "FinalReward", "Group", "LLMCall", "TransitionBuilder", "Reinforce", "StepRewards",
        "Transition", "TransitionBatch", "agent_stats", "agent_steps_table", "agents_table",
        "best_transitions", "extract_calls",
    },
    "agl.cli": {"app", "main"},
    "agl.gateway": {"Gateway", "GatewayServer"},
    "agl.openai_wire": {
        "ANTHROPIC_VERSION", "DONE", "MAX_TOP_LOGPROBS", "WIRES", "Api", "ChatAnswer", "ChatReader",
        "Logprob", "MessagesWire", "ResponsesWire", "TokenLogprobs", "Wire", "WireError",
        "WireRequest", "WireJSONResponse", "WireStream", "anthropic_error", "serve_wire",
        "upstream_error",
        "chat_body", "chat_choice", "chat_chunk", "chat_logprobs", "check_context",
        "completion_body", "completion_choice", "completion_chunk", "completion_logprobs",
        "content_text", "error_body", "error_type", "head", "model_list", "new_id", "now",
        "read_json", "read_request", "role_chunk", "sse", "sse_data",
        "tool_call", "usage", "usage_chunk", "WEIGHT_VERSION_HEADER",
    },
    "agl.plugins": {
        "DISABLE_ENV", "ENTRY_POINT_GROUP", "PluginError", "PluginInfo", "PluginManager",
        "hookimpl", "open_store",
    },
    "agl.hookspecs": {"LIFECYCLE_HOOKS", "PROJECT_NAME", "PROVIDER_HOOKS", "hookimpl", "hookspec"},
}  # fmt: skip


def isort_order(name: str) -> tuple[int, str]:
    """ruff's order for ``__all__`` (RUF022): constants, then classes, then the rest."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


def test_the_order_check_can_fail() -> None:
    assert sorted(["open_store", "Store", "ENTRY"], key=isort_order) == [
        "ENTRY",
        "Store",
        "open_store",
    ]


@pytest.mark.parametrize("facade", ["agl", *FACADES])
def test_each_facade_exports_what_it_says(facade: str) -> None:
    module = importlib.import_module(facade)
    exported = list(module.__all__)
    assert set(exported) == (EXPECTED if facade == "agl" else FACADES[facade])
    assert exported == sorted(exported, key=isort_order)
    for name in exported:
        assert getattr(module, name) is not None, name


def test_the_version_is_the_installed_distributions() -> None:
    assert agl.__version__ == importlib.metadata.version("agl-core")


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


PRIVATE_BEHIND_FACADE = [
    "agl.cli", "agl.dashboard", "agl.gateway", "agl.lightning", "agl.openai_wire", "agl.store",
    "agl.tracing",
]  # fmt: skip
"""Facades whose implementation modules are all private: their __all__ is the whole API."""


@pytest.mark.parametrize("facade", PRIVATE_BEHIND_FACADE)
def test_a_facades_implementation_modules_are_private(facade: str) -> None:
    package = importlib.import_module(facade)
    public = [
        info.name
        for info in pkgutil.iter_modules(package.__path__)
        if not info.name.startswith("_")
    ]
    assert public == [], f"{facade} has public implementation modules: {public}"


PUBLIC_MODULES = [
    "auto", "cli", "compat", "dashboard", "gateway", "hookspecs", "lightning", "openai_wire",
    "plugins", "semconv", "store", "testing", "tracing",
]  # fmt: skip
"""agl's public modules: the facades, ``import agl.auto``, the CLI and the conventions."""


def test_agl_has_no_other_public_modules() -> None:
    public = [info.name for info in pkgutil.iter_modules(agl.__path__) if info.name[0] != "_"]
    assert public == PUBLIC_MODULES


def test_the_semantic_conventions_are_constants_all_exported() -> None:
    from agl import semconv

    constants = {name for name in vars(semconv) if name.isupper()}
    assert set(semconv.__all__) == constants
    assert semconv.__all__ == sorted(semconv.__all__)
    assert all(isinstance(getattr(semconv, name), str) for name in constants)


PLUGIN_TREES = ["packages", "examples"]
"""Code that uses agl as its users do: only the public modules, never an underscored one."""


def test_plugins_and_examples_import_public_modules_only() -> None:
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found = []
    for tree in PLUGIN_TREES:
        for path in sorted((root / tree).rglob("*.py")):
            if "agl-core" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                for name in names:
                    parts = name.split(".")
                    if parts[0] == "agl" and any(part.startswith("_") for part in parts):
                        found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    assert found == []
