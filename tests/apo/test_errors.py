"""Optimizer failures skip only what depended on them, with the reason logged and counted; bad
configurations fail at setup with an error that says what to do."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

import agl
from agl.testing.openai_server import Reply, error_reply


def test_optimizer_errors_skip_the_candidate_and_the_search_goes_on(
    rig: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def fault(kind: str, text: str, count: int) -> Reply | str | None:
        if kind == "rewrite" and count <= 4:  # round 1's four rewrites, in any order
            version = int(re.search(r"version (\d) of", text).group(1))  # type: ignore[union-attr]
            return {
                1: error_reply(500, "the optimizer exploded"),
                2: "Here is a better prompt: just answer.",  # no <prompt> block
                3: "<prompt>Answer in one word.</prompt>",  # lost {question}
            }.get(version)
        if kind == "critique" and count == 2:  # round 2: a reply slower than the timeout
            return Reply(text="MISSING: nothing", delay=1.0)
        return None

    rig.script.fault = fault
    train = rig.tasks("alpha", "beta", "gamma", "delta")
    val = rig.tasks("alpha", "beta", "gamma", "delta")
    apo = rig.apo(
        search={"branch_factor": 4, "beam_width": 1, "pareto": False},
        budgets={"max_rounds": 2},
        optimizer={"timeout": 0.3},
    )
    with caplog.at_level(logging.WARNING, logger="agl_apo"):
        run = rig.fit(apo, rig.tmp_path / "run", train, val)

    state = run.states()[-1]
    reasons = [(skip.round, skip.stage, skip.reason) for skip in state.skips]
    assert len(reasons) == 4, reasons
    assert (1, "rewrite", "rewrite failed: the optimizer model answered HTTP 500: "
            "the optimizer exploded") in reasons  # fmt: skip
    assert any(s == "rewrite" and "no <prompt>...</prompt> block" in r for _, s, r in reasons)
    assert (1, "check", "the template lost the placeholders ['question']") in reasons
    assert (2, "critique", "critique failed: the optimizer model did not answer within 0.3 s") in (
        reasons
    )
    # the one good rewrite (version 4 adds the 4th missing word) was scored and kept
    best = state.best_candidate()
    assert best is not None
    assert best.score == 0.25
    assert best.templates["prompt"].endswith("Remember: delta.")
    assert run.published[-1].resources["prompt"].template == best.templates["prompt"]  # type: ignore[attr-defined]
    # counted in the metrics, per round and in all; every reason in the log
    steps = {int(r["step"]): r for r in run.result.history if "apo/skipped" in r}
    assert steps[1]["apo/skipped_this_round"] == 3
    assert steps[2]["apo/skipped_this_round"] == 1
    assert run.result.last("apo/skipped") == 4
    logged = [r.getMessage() for r in caplog.records if "skipped a candidate" in r.getMessage()]
    assert len(logged) == 4
    assert any("did not answer within 0.3 s" in line for line in logged)


def test_an_unreachable_optimizer_skips_rounds_until_patience_ends_them(rig: Any) -> None:
    apo = rig.apo(
        optimizer={"base_url": "http://127.0.0.1:9/v1", "timeout": 2.0},
        budgets={"patience": 2, "max_rounds": 5},
    )
    run = rig.fit(apo, rig.tmp_path / "run", rig.tasks("alpha", "beta"), rig.tasks("alpha"))

    state = run.states()[-1]
    assert [c.id for c in state.candidates] == ["c0"]  # the seed alone, scored
    assert state.stopped == "patience: no improvement in 2 rounds"
    assert all(
        "cannot reach the optimizer at http://127.0.0.1:9/v1" in s.reason for s in state.skips
    )
    assert run.published[-1].resources["prompt"].template == rig.SEED  # type: ignore[attr-defined]


def test_without_an_optimizer_setup_fails_clearly(
    rig: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AGL_APO_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(agl.InvalidInputError, match="APO has no optimizer model to call"):
        rig.fit(agl_apo_default(), rig.tmp_path / "run", rig.tasks("alpha"))


def test_several_prompts_need_naming(rig: Any) -> None:
    resources = {
        "system": agl.PromptTemplate(template="You help."),
        "prompt": agl.PromptTemplate(template=rig.SEED),
    }
    with pytest.raises(
        agl.InvalidInputError, match=r"several PromptTemplate resources \['prompt', 'system'\]"
    ):
        rig.fit(rig.apo(), rig.tmp_path / "a", rig.tasks("alpha"), resources=resources)
    with pytest.raises(agl.InvalidInputError, match="names 'sytem', which the run does not have"):
        rig.fit(rig.apo(resources="sytem"), rig.tmp_path / "b", rig.tasks("x"), resources=resources)
    run = rig.fit(
        rig.apo(resources="prompt", budgets={"max_rounds": 1}),
        rig.tmp_path / "c",
        rig.tasks("alpha"),
        resources=resources,
    )
    assert run.states()[-1].resources == ["prompt"]
    assert {u.resources["system"].template for u in run.published} == {"You help."}  # type: ignore[attr-defined]


def agl_apo_default() -> agl.Algorithm:
    from agl_apo import APO

    return APO(console=False, plot=False)


def test_an_async_openai_client_is_the_optimizer(rig: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import openai

    from agl_apo import APO, OptimizerSettings, SearchSettings

    for name in ("AGL_APO_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    client = openai.AsyncOpenAI(base_url=rig.server.url, api_key="k", max_retries=0)
    # As Agent Lightning writes it: the client first.
    apo = APO(
        client,
        console=False,
        plot=False,
        optimizer=OptimizerSettings(model="optimizer"),
        loop=agl.LoopSettings(batch_size=2),
        search=SearchSettings(val_size=2),
    )
    assert apo.client is client
    assert apo.resources is None
    run = rig.fit(apo, rig.tmp_path / "run", rig.tasks("alpha", "beta"), rig.tasks("alpha"))
    assert rig.script.calls  # the optimizer was asked, through the given client
    assert run.states()[-1].candidates
    assert not client.is_closed()  # the caller's client is the caller's to close
    assert APO(client=client, resources="prompt").resources == ["prompt"]


def test_a_client_apo_cannot_use_is_named() -> None:
    import openai

    from agl_apo import APO

    with pytest.raises(agl.InvalidInputError, match=r"pass an openai\.AsyncOpenAI client"):
        APO(openai.OpenAI(api_key="k"))
    with pytest.raises(agl.InvalidInputError, match="got int"):
        APO(42)  # type: ignore[arg-type]
