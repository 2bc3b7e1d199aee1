"""What a command-line agent harness needs to talk to agl's gateway, and nothing else.

A harness is a coding agent shipped as a program (Claude Code, the Codex CLI). Each reads its
model endpoint from a different place, and each, left alone, also talks to its vendor: update
checks, telemetry, plugin catalogues. For one rollout, :meth:`Harness.environment` returns the
environment variables (and writes the config files) that point the program at the attempt's
gateway URL and turn the rest off, inside a throwaway home so no state leaks between rollouts.

Measured with Claude Code 2.1.328 and Codex CLI 0.169.0 against a recording server: with these
settings each program made only its model calls (``POST /v1/messages?beta=true``,
``POST /v1/responses``), and no DNS lookup at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CLAUDE_CODE", "CODEX", "HARNESSES", "Harness", "harness_named"]

API_KEY_ENV = "AGL_LLM_API_KEY"
"""The variable the Codex CLI reads the gateway's key from (its provider's ``env_key``)."""


@dataclass(frozen=True)
class Harness:
    """One agent program: how to install it, and the environment that points it at agl.

    Attributes:
        name: ``"claude-code"`` or ``"codex"``.
        executable: The program's usual command name (picks the harness when none is named).
        install: The command that installs the version agl was checked with.
        scrub: Prefixes of inherited variables to drop (a user's real credentials and
            settings must not reach a rollout).
        settings: ``settings(endpoint, model, api_key, home) -> env``, writing any config
            file under ``home``.
    """

    name: str
    executable: str
    install: str
    scrub: tuple[str, ...]
    settings: Callable[[str, str, str, Path], dict[str, str]]

    def environment(
        self, base: Mapping[str, str], endpoint: str, model: str, api_key: str, home: Path
    ) -> dict[str, str]:
        """``base`` less the scrubbed variables, plus this harness's settings and ``HOME``."""
        env = {key: value for key, value in base.items() if not key.startswith(self.scrub)}
        env.update(self.settings(endpoint, model, api_key, home))
        env["HOME"] = str(home)
        return env


def _claude_code(endpoint: str, model: str, api_key: str, home: Path) -> dict[str, str]:
    return {
        # Claude Code appends /v1/messages to its base URL itself.
        "ANTHROPIC_BASE_URL": endpoint.rstrip("/").removesuffix("/v1"),
        "ANTHROPIC_API_KEY": api_key,  # sent as x-api-key
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        # Anthropic's thinking blocks have no counterpart in an engine's chat template.
        "CLAUDE_CODE_DISABLE_THINKING": "1",
        # Lets --dangerously-skip-permissions run as root (containers); the rollout's
        # directory is throwaway. Drop it with env={"IS_SANDBOX": None}.
        "IS_SANDBOX": "1",
    }


def _codex(endpoint: str, model: str, api_key: str, home: Path) -> dict[str, str]:
    # Codex ignores OPENAI_BASE_URL and would reach the internet (and try WebSockets); a
    # model provider with a base_url is the documented way to a local server. The features
    # turned off fetched plugin catalogues from github.com and chatgpt.com at start.
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f"""model = {json.dumps(model)}
model_provider = "agl"
check_for_update_on_startup = false
web_search = "disabled"

[model_providers.agl]
name = "agl gateway"
base_url = {json.dumps(endpoint.rstrip("/"))}
env_key = "{API_KEY_ENV}"
wire_api = "responses"

[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false
remote_plugin = false
apps = false
""",
        encoding="utf-8",
    )
    return {"CODEX_HOME": str(codex_home), API_KEY_ENV: api_key}


CLAUDE_CODE = Harness(
    name="claude-code",
    executable="claude",
    install="npm install -g @anthropic-ai/claude-code@2.1.328",
    scrub=("ANTHROPIC_", "CLAUDE_"),
    settings=_claude_code,
)
"""Claude Code: ``claude -p "{task}" --dangerously-skip-permissions`` (Anthropic Messages)."""

CODEX = Harness(
    name="codex",
    executable="codex",
    install="npm install -g @openai/codex@0.169.0",
    scrub=("CODEX_", "OPENAI_"),
    settings=_codex,
)
"""The Codex CLI: ``codex exec --skip-git-repo-check --sandbox workspace-write "{task}"``
(OpenAI Responses API)."""

HARNESSES = {harness.name: harness for harness in (CLAUDE_CODE, CODEX)}


def harness_named(name: str | None, executable: str) -> Harness | None:
    """The harness called ``name``; for ``"auto"``, the one whose program ``executable`` is.

    Raises:
        ValueError: ``name`` is none of ``"auto"``, ``None`` and the known harnesses.
    """
    if name is None:
        return None
    if name == "auto":
        program = Path(executable).name
        return next((h for h in HARNESSES.values() if h.executable == program), None)
    if name not in HARNESSES:
        raise ValueError(f"expected one of {['auto', *sorted(HARNESSES)]} or None")
    return HARNESSES[name]
