"""``import agl.auto``: runners trace every installed library, ``instrument`` adding to them,
unless ``auto_instrument=False``.

The switch is process-wide, so each check runs in a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def _run(code: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


FRAMEWORK_ADAPTERS = (
    "agent-framework", "autogen", "crewai", "google-adk", "langchain", "llama-index",
    "openai-agents", "pydantic-ai",
)  # fmt: skip
"""The workspace's adapter plugins: instrumenting them all loads every framework (~25 s)."""


def test_runners_trace_nothing_by_default_and_everything_after_the_import() -> None:
    _run(
        """
        import agl
        from agl.plugins import PluginManager

        assert agl.Runner(lambda task: 1.0, "memory://").instrument == []
        import agl.auto  # noqa: F401

        everything = sorted(PluginManager().provided("agl_instrumentors"))
        assert "openai" in everything, everything
        assert agl.Runner(lambda task: 1.0, "memory://").instrument == everything
        added = agl.Runner(lambda task: 1.0, "memory://", instrument=["openai"])
        assert added.instrument == ["openai", *(n for n in everything if n != "openai")]
        only = agl.Runner(
            lambda task: 1.0, "memory://", instrument=["openai"], auto_instrument=False
        )
        assert only.instrument == ["openai"]
        """
    )


def test_an_agent_module_that_imports_it_is_traced_by_the_trainers_runner_processes(
    tmp_path: Path,
) -> None:
    (tmp_path / "auto_agent.py").write_text(
        textwrap.dedent(
            """
            import openai

            import agl
            import agl.auto  # noqa: F401


            @agl.rollout
            async def ask(task: str, llm: agl.LLM) -> float:
                async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-") as client:
                    await client.chat.completions.create(
                        model=llm.model, messages=[{"role": "user", "content": task}]
                    )
                return 1.0
            """
        )
    )
    _run(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})

        import agl
        from agl.testing.openai_server import OpenAIServer
        from auto_agent import ask

        with OpenAIServer() as server:
            trainer = agl.Trainer(
                run_dir={str(tmp_path / "run")!r},
                n_runners=2,
                resources={{"llm": agl.LLM(endpoint=server.url, model="m")}},
                console=False,
            )
            result = trainer.dev(ask, ["hello", "there"])
        for r in result.results:
            assert r.succeeded, r.error
            names = [span.name for span in r.spans]
            assert any(span.attributes.get("gen_ai.response.id") for span in r.spans), names
        """,
        cwd=tmp_path,
        # What is checked is that runner processes see the agent module's import; the agent
        # calls the openai client only, so the framework adapters stay out (each runner process
        # would otherwise load every framework installed here).
        env={"AGL_DISABLE_PLUGINS": ",".join(FRAMEWORK_ADAPTERS)},
    )
