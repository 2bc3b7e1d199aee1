"""Secrets off the command line: tokens from files (``--token-file`` and friends) or the
environment, the PostgreSQL password from libpq's own places; none of them in ``ps`` or a log.

The deployed checks start ``agl store serve`` and ``agl runner`` as separate processes over a
real SQLite file and a real PostgreSQL server that asks for a password (``scram-sha-256``).
"""

from __future__ import annotations

import io
import json
import signal
import sys
from pathlib import Path

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

import agl
from agl import RolloutRequest, RolloutStatus
from agl._secrets import env_secret, read_secret_file, secret_option
from agl.cli import app
from agl.lightning import extract_calls
from agl.testing.openai_server import OpenAIServer
from agl.testing.ports import free_port
from agl.testing.postgres import PostgresServer
from agl.testing.processes import Child, Processes, calling_agent, runner_summary, write_agent

pytestmark = pytest.mark.anyio

SECRET = "s3cret-token-4f1b9c"

AGENT = """
import agl


@agl.rollout
def agent(task):
    return task / 10
"""


def _secret_file(path: Path, content: str = SECRET + "\n") -> Path:
    path.write_text(content)
    path.chmod(0o600)
    return path


def _cmdline(child: Child) -> str:
    """The child's command line as ``ps`` shows it to every user of the machine."""
    return Path(f"/proc/{child.process.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


# --- the file itself --------------------------------------------------------------------------


def test_a_secret_file_loses_its_trailing_newline_only(tmp_path: Path) -> None:
    assert read_secret_file(_secret_file(tmp_path / "t"), option="--token-file") == SECRET
    crlf = _secret_file(tmp_path / "crlf", f" {SECRET}\r\n")
    assert read_secret_file(crlf, option="--token-file") == f" {SECRET}"


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "does not exist"), ("", "is empty"), ("\n", "is empty"), ("a\nb\n", "more than one")],
)
def test_a_bad_secret_file_is_named_with_what_is_wrong(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "token"
    if content is not None:
        _secret_file(path, content)
    with pytest.raises(agl.InvalidInputError, match=problem) as caught:
        read_secret_file(path, option="--token-file")
    assert caught.value.message.startswith(f"--token-file: the file {str(path)!r} ")
    with pytest.raises(agl.InvalidInputError, match="is a folder"):
        read_secret_file(tmp_path, option="--token-file")


def test_a_secret_given_twice_is_refused(tmp_path: Path) -> None:
    path = _secret_file(tmp_path / "token")
    with pytest.raises(agl.InvalidInputError, match="give --token or --token-file, not both"):
        secret_option("x", path, option="--token", file_option="--token-file")
    assert secret_option(None, path, option="--token", file_option="--token-file") == SECRET
    assert secret_option("x", None, option="--token", file_option="--token-file") == "x"


def test_the_environment_names_the_secret_or_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGL_TEST_TOKEN", raising=False)
    monkeypatch.delenv("AGL_TEST_TOKEN_FILE", raising=False)
    assert env_secret("AGL_TEST_TOKEN") is None
    monkeypatch.setenv("AGL_TEST_TOKEN_FILE", str(_secret_file(tmp_path / "token")))
    assert env_secret("AGL_TEST_TOKEN") == SECRET
    monkeypatch.setenv("AGL_TEST_TOKEN", "other")
    with pytest.raises(agl.InvalidInputError, match="AGL_TEST_TOKEN or AGL_TEST_TOKEN_FILE"):
        env_secret("AGL_TEST_TOKEN")


# --- every command that takes a secret takes it from a file -----------------------------------

COMMANDS = [
    ("store", "serve", "--token-file"),
    ("gateway", "serve", "--upstream", "http://127.0.0.1:9/v1", "--store", "http://x:1",
     "--token-file"),
    ("gateway", "serve", "--upstream", "http://127.0.0.1:9/v1", "--store", "http://x:1",
     "--store-token-file"),
    ("gateway", "serve", "--upstream", "http://127.0.0.1:9/v1", "--store", "http://x:1",
     "--upstream-api-key-file"),
    ("runner", "--agent", "no_such_module:agent", "--store", "http://x:1", "--store-token-file"),
    ("runner", "--agent", "no_such_module:agent", "--store", "http://x:1", "--gateway-token-file"),
]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c[0]} {c[-1]}")
def test_every_secret_option_names_a_missing_file(tmp_path: Path, command: tuple[str, ...]) -> None:
    missing = tmp_path / "no-such-token"
    env = {"AGL_STORE_TOKEN": None, "AGL_GATEWAY_TOKEN": None, "AGL_UPSTREAM_API_KEY": None}
    result = CliRunner().invoke(app, [*command, str(missing)], env={"COLUMNS": "400", **env})
    assert result.exit_code in (1, 2), result.output
    assert f"error: {command[-1]}: the file '{missing}' does not exist" in result.output


# --- the trainer's runner processes ------------------------------------------------------------


def test_a_trainers_runner_processes_use_its_own_token_whatever_the_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer serves its SQLite store to its runner processes with a fresh token; a token
    file the environment names (for another store) is not theirs, nor a reason to refuse."""
    (tmp_path / "pool_agent.py").write_text(AGENT)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("AGL_STORE_TOKEN", raising=False)
    monkeypatch.setenv("AGL_STORE_TOKEN_FILE", str(_secret_file(tmp_path / "other-token")))
    import pool_agent  # type: ignore[import-not-found]

    try:
        trainer = agl.Trainer(run_dir=tmp_path / "run", n_runners=2, console=False)
        result = trainer.dev(pool_agent.agent, [1, 2, 3, 4])
    finally:
        sys.modules.pop("pool_agent", None)
    assert [r.reward for r in result.results] == [0.1, 0.2, 0.3, 0.4]


# --- deployed --------------------------------------------------------------------------------


async def test_a_store_server_and_a_runner_take_the_token_from_a_file(
    tmp_path: Path, processes: Processes
) -> None:
    token_file = _secret_file(tmp_path / "store-token")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    store_server = await processes.store_server(
        "store",
        db=f"sqlite:///{tmp_path / 'agl.db'}",
        port=port,
        options=("--token-file", str(token_file), "--log-level", "debug"),
    )
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"{url}/v1/rollouts")).status_code == 401
    runner = processes.runner(
        "runner", url, write_agent(tmp_path, "agent_mod", AGENT),
        "--store-token-file", str(token_file), "--log-level", "debug",
    )  # fmt: skip
    async with agl.open_store(url, token=SECRET) as store:
        await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(3)])

        async def done() -> bool:
            page = await store.query_rollouts(status=[RolloutStatus.SUCCEEDED])
            return page.total == 3

        await processes.until(done, "the runner to run three rollouts", 120, runner)
        assert SECRET not in _cmdline(store_server)
        assert SECRET not in _cmdline(runner)
        assert "--token-file" in _cmdline(store_server)
        runner.process.send_signal(signal.SIGTERM)
        assert runner.exit_code(timeout=120) == 0
    assert runner_summary(runner)["succeeded"] == 3
    # agl rollouts, like every client, reads the token from the file AGL_STORE_TOKEN_FILE names
    listed = processes.start(
        "rollouts", "rollouts", "list", "--store", url, "--json",
        env={"AGL_STORE_TOKEN_FILE": str(token_file)},
    )  # fmt: skip
    assert listed.exit_code(timeout=120) == 0, listed.log()
    assert json.loads(listed.log())["total"] == 3
    assert "(token required)" in store_server.log()
    assert SECRET not in store_server.log()
    assert SECRET not in runner.log()


async def test_a_store_server_over_postgresql_finds_the_password_in_pgpassfile(
    tmp_path: Path, processes: Processes
) -> None:
    with PostgresServer() as database:
        database.create_database("agl")
        db = database.url_of("agl", with_password=False)
        assert database.password not in db
        passfile = database.write_passfile(tmp_path / "pgpass")
        refused = processes.start(
            "refused", "store", "serve", "--db", db, "--port", str(free_port()),
            env={"PGPASSFILE": str(tmp_path / "no-such-passfile"), "PGPASSWORD": ""},
        )  # fmt: skip
        assert refused.exit_code(timeout=120) == 2
        assert "refused the credentials" in refused.log()
        assert "PGPASSWORD or a password file (PGPASSFILE" in refused.log()

        port = free_port()
        store_server = await processes.store_server(
            "store",
            db=db,
            port=port,
            options=("--log-level", "debug"),
            env={"PGPASSFILE": str(passfile)},
        )
        async with agl.open_store(f"http://127.0.0.1:{port}") as store:
            await store.enqueue_rollouts([RolloutRequest(input=1, rollout_id="r1")])
            assert [r.rollout_id for r in (await store.query_rollouts()).rollouts] == ["r1"]
        assert database.password not in _cmdline(store_server)
        # A gateway writing straight to the database names it without the password too.
        gateway = await processes.gateway_server(
            "gateway", upstreams=["http://127.0.0.1:9/v1"], store=database.url_of("agl"),
            port=free_port(), options=("--log-level", "debug"),
        )  # fmt: skip
        gateway.process.send_signal(signal.SIGTERM)
        gateway.exit_code(timeout=120)
        assert f"spans to postgresql://agl:***@127.0.0.1:{database.port}/agl" in gateway.log()
        assert database.password not in gateway.log()
        # So does a trainer on it, in its start line and its summary's hint.
        shown = io.StringIO()
        trainer = agl.Trainer(
            store=database.url_of("agl"),
            run_dir=tmp_path / "run",
            console=Console(file=shown, width=400),
            progress=False,
        )
        assert [r.reward for r in (await trainer.dev_async(lambda task: 1.0, [1])).results] == [1.0]
        hidden = f"postgresql://agl:***@127.0.0.1:{database.port}/agl"
        assert f"store {hidden}" in shown.getvalue()
        assert f"agl rollouts list --store {hidden}" in shown.getvalue()
        assert database.password not in shown.getvalue()
        store_server.process.send_signal(signal.SIGTERM)
        store_server.exit_code(timeout=120)
        log = store_server.log()
        assert f"serving postgresql://agl@127.0.0.1:{database.port}/agl" in log
        assert database.password not in log
        assert database.password not in refused.log()


async def test_a_gateway_and_a_runner_take_every_secret_from_a_file(
    tmp_path: Path, processes: Processes
) -> None:
    secrets = {name: f"{name}-{SECRET}" for name in ("store", "gateway", "upstream")}
    files = {name: _secret_file(tmp_path / name, value + "\n") for name, value in secrets.items()}
    store_port, gateway_port = free_port(), free_port()
    store_url = f"http://127.0.0.1:{store_port}"
    with OpenAIServer() as model:
        store_server = await processes.store_server(
            "store",
            db=f"sqlite:///{tmp_path / 'agl.db'}",
            port=store_port,
            options=("--token-file", str(files["store"])),
        )
        gateway = await processes.gateway_server(
            "gateway",
            upstreams=[model.url],
            store=store_url,
            port=gateway_port,
            options=(
                "--token-file", str(files["gateway"]),
                "--store-token-file", str(files["store"]),
                "--upstream-api-key-file", str(files["upstream"]),
            ),
        )  # fmt: skip
        endpoint = (
            f"http://127.0.0.1:{gateway_port}/rollout/{{rollout_id}}/attempt/{{attempt_id}}/v1"
        )
        async with agl.open_store(store_url, token=secrets["store"]) as store:
            await store.add_resources({"llm": agl.LLM(endpoint=endpoint, model="policy")})
            await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(2)])
            runner = processes.runner(
                "runner", store_url, write_agent(tmp_path, "calls", calling_agent()),
                "--max-rollouts", "2",
                "--store-token-file", str(files["store"]),
                "--gateway-token-file", str(files["gateway"]),
            )  # fmt: skip
            assert runner.exit_code(timeout=120) == 0, processes.logs()
            assert runner_summary(runner)["succeeded"] == 2
            page = await store.query_rollouts(status=[RolloutStatus.SUCCEEDED])
            assert page.total == 2
            for rollout in page.rollouts:  # the gateway recorded each call in the store
                calls = extract_calls(await store.query_spans(rollout.rollout_id)).calls
                assert len(calls) == 2
                assert all(call.has_tokens for call in calls)
        # The agents' key was the gateway's token; upstream got the upstream's key only.
        sent = {request.headers.get("authorization") for request in model.requests}
        assert sent == {f"Bearer {secrets['upstream']}"}
    for child in (store_server, gateway, runner):
        for secret in secrets.values():
            assert secret not in child.log()
    for child in (store_server, gateway):
        for secret in secrets.values():
            assert secret not in _cmdline(child)
