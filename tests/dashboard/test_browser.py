"""The dashboard in a real headless Chromium, against a real run in ``agl store serve``.

Each test leaves ``screenshot.png`` in its own folder (pytest's ``tmp_path``), passed or not.
What the page shows is checked against what the store's HTTP API says, read independently.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import agl
from agl.lightning import TransitionBuilder, extract_calls

from .conftest import PROMPTS, TOKEN, RunStore, add_rerendered_group, run_async

pytestmark = pytest.mark.slow


def signed_in(page: Any) -> Any:
    """The page with the store's token already in the tab's session storage."""
    page.context.add_init_script(f"sessionStorage.setItem('agl-token', {TOKEN!r})")
    return page


async def _calls(run: RunStore, rollout_id: str) -> Any:
    async with agl.open_store(run.url, token=TOKEN) as store:
        rollout = await store.get_rollout(rollout_id)
        spans = await store.query_spans(rollout_id, rollout.latest_attempt_id)
        return rollout, spans


def test_the_list_asks_for_the_token_once_and_filters_failed_rollouts(
    run_store: RunStore, page: Any
) -> None:
    page.goto(run_store.url + "/")
    page.fill("#token-input", TOKEN)
    page.click("#token-form button")
    rows = page.locator("[data-testid=rollout-row]")
    rows.first.wait_for()
    assert rows.count() == len(run_store.rollout_ids) == 16
    assert page.inner_text("[data-testid=count-failed]") == f"failed {len(run_store.failed_ids)}"
    assert "token" not in page.url.lower()

    page.select_option("[data-testid=filter-status]", "failed")
    page.wait_for_url(re.compile(r"status=failed"))
    failed = len(run_store.failed_ids)
    page.wait_for_function(
        f"document.querySelectorAll('[data-testid=rollout-row]').length === {failed}"
    )
    shown = page.locator("[data-testid=rollout-row] td:first-child").all_inner_texts()
    assert sorted(shown) == sorted(run_store.failed_ids)
    assert set(page.locator("[data-testid=rollout-row] .badge").all_inner_texts()) == {"failed"}

    # asked once: a reload keeps the tab's token, and it never went into a URL
    page.reload()
    page.locator("[data-testid=rollout-row]").first.wait_for()
    assert not page.is_visible("#token-dialog")
    assert TOKEN not in page.url


def test_search_and_paging_are_done_by_the_store(run_store: RunStore, page: Any) -> None:
    wanted = run_store.rollout_ids[5]
    signed_in(page).goto(run_store.url + f"/#/?search={wanted[-6:]}")
    page.wait_for_function("document.querySelectorAll('[data-testid=rollout-row]').length === 1")
    assert page.inner_text("[data-testid=rollout-row] td:first-child") == wanted
    assert "1 rollouts" in page.inner_text("[data-testid=page-info]")


def test_a_rollout_shows_its_spans_messages_tokens_and_transitions(
    run_store: RunStore, page: Any
) -> None:
    # the task that calls the calculator (b == 4), from the second prompt's step
    rollouts = run_async(_all(run_store))
    tooled = [r for r in rollouts if r.input == {"a": 4, "b": 4}][-1]
    _rollout, spans = run_async(_calls(run_store, tooled.rollout_id))
    calls = extract_calls(spans).calls
    assert len(calls) == 2
    assert all(call.has_tokens for call in calls)

    signed_in(page).goto(run_store.url + f"/#/rollout/{tooled.rollout_id}")
    assert page.inner_text("[data-testid=rollout-id]") == tooled.rollout_id
    page.locator("[data-testid=attempt]").first.wait_for()
    assert page.locator("[data-testid=attempt]").count() == 1

    # expand the first LLM span of the tree and read an attribute the store holds
    llm = page.locator("[data-testid=span][data-span-type=gateway]").first
    llm.locator("summary").first.click()
    assert llm.get_attribute("open") is not None
    assert "agl.span.type" in llm.inner_text()

    # the first call's messages and token counts, and its ids on demand
    call = page.locator("[data-testid=call]").first
    texts = call.locator("[data-testid=message]").all_inner_texts()
    assert any(PROMPTS[1].splitlines()[-1] in text for text in texts)  # the v2 system prompt
    assert any("What is 4+4?" in text for text in texts)
    assert any("calculator" in text for text in texts)  # the reply: a tool call
    first = calls[0]
    assert first.prompt_ids is not None
    assert first.response_ids is not None
    assert call.locator("[data-testid=prompt-tokens]").inner_text() == str(len(first.prompt_ids))
    assert call.locator("[data-testid=response-tokens]").inner_text() == str(
        len(first.response_ids)
    )
    call.locator("[data-testid=show-ids]").click()
    assert call.locator("[data-testid=prompt-ids]").inner_text() == str(first.prompt_ids).replace(
        " ", ""
    )

    # what training sees: this rollout's transitions, with the advantages LightningRL gives
    table = page.locator("[data-testid=transitions]")
    table.wait_for()
    shown = [float(a) for a in table.locator("[data-testid=advantage]").all_inner_texts()]
    group = [
        r for r in rollouts if r.enqueue_time == tooled.enqueue_time and r.input == tooled.input
    ]
    expected = run_async(_transitions(run_store, group))
    mine = [t.advantage for t in expected if t.rollout_id == tooled.rollout_id]
    assert shown == pytest.approx(mine, abs=1e-4)
    assert len(shown) == 2  # both calls of the rollout


def test_a_failed_rollout_says_why(run_store: RunStore, page: Any) -> None:
    signed_in(page).goto(run_store.url + f"/#/rollout/{run_store.failed_ids[0]}")
    error = page.locator("[data-testid=rollout-error]")
    assert "the agent refuses to add zero" in error.inner_text()
    training = page.locator("[data-testid=training]")
    training.get_by_text("dropped: rollout_failed").first.wait_for()


def test_switching_prompt_versions_shows_each_text_and_the_diff(
    run_store: RunStore, page: Any
) -> None:
    first, second = run_store.resources_ids
    signed_in(page).goto(run_store.url + "/#/resources")
    page.locator("[data-testid=resources-row]").first.wait_for()
    assert page.locator("[data-testid=resources-row]").count() == 2
    page.click(f"text={second}")
    prompt = page.locator("[data-testid=prompt-prompt_template]")
    assert prompt.inner_text() == PROMPTS[1]
    diff = page.inner_text("[data-testid=diff-prompt_template]")
    assert "+Never guess." in diff
    assert "-Reply with digits only." in diff

    page.select_option("[data-testid=version]", first)
    page.wait_for_url(re.compile(first))
    shown = "document.querySelector('[data-testid=prompt-prompt_template]').innerText"
    page.wait_for_function(f"{shown} === {json.dumps(PROMPTS[0])}")


def test_workers_and_the_runs_curves(run_store: RunStore, page: Any) -> None:
    signed_in(page).goto(run_store.url + "/#/workers")
    page.locator("[data-testid=worker-row]").first.wait_for()
    page.goto(run_store.url + "/#/curves")
    chart = page.locator("[data-testid='chart-reward/mean']")
    chart.wait_for()
    points = chart.locator("polyline").get_attribute("points")
    assert points is not None
    assert len(points.split()) == 2


def test_a_re_rendered_history_is_flagged_in_the_training_view(page: Any) -> None:
    """LightningRL's ``prefix_mismatch``: a warning over the rollout's training view, naming
    the call, and a mark on the call's transition."""
    from agl.store import StoreServer

    async def fill(url: str) -> tuple[str, str]:
        async with agl.open_store(url) as store:
            return await add_rerendered_group(store)

    with StoreServer("memory://") as server:
        rerendered, _ = run_async(fill(server.url))
        page.goto(server.url + f"/#/rollout/{rerendered}")
        warning = page.locator("[data-testid=prefix-mismatch]")
        warning.wait_for()
        assert warning.locator(".badge").inner_text() == "prefix_mismatch 1"
        assert f"{rerendered} call 1 from token " in warning.inner_text()
        rows = page.locator("[data-testid=transition]")
        assert rows.count() == 2  # the re-rendered call trained on its own
        marked = page.locator("[data-testid=transition]:has([data-testid=rerendered])")
        assert marked.count() == 1
        assert marked.locator("td").first.inner_text().startswith("1")


async def _all(run: RunStore) -> list[agl.Rollout]:
    async with agl.open_store(run.url, token=TOKEN) as store:
        return (await store.query_rollouts(limit=1000)).rollouts


async def _transitions(run: RunStore, group: list[agl.Rollout]) -> agl.TransitionBatch:
    from agl._results import fetch_results

    async with agl.open_store(run.url, token=TOKEN) as store:
        results = await fetch_results(store, group)
    return TransitionBuilder().build(results)


def test_a_prompt_optimizers_candidates_and_scores(page: Any) -> None:
    """agl-apo keeps its search in the store as a resource (its state): the resource page
    lists its scored candidates, best first."""
    from agl.store import StoreServer
    from agl_apo.state import APOState, Candidate

    candidates = [
        Candidate(id="c0", round=0, origin="seed", templates={"p": "Add {x}."}, scores=[0.2, 0.4],
                  score=0.3),
        Candidate(id="c1", round=1, origin="rewrite", parents=["c0"],
                  templates={"p": "Add {x}. Digits only."}, scores=[0.8, 1.0], score=0.9),
        Candidate(id="c2", round=1, origin="rewrite", parents=["c0"],
                  templates={"p": "Sum {x}."}, scores=[0.4, 0.6], score=0.5),
    ]  # fmt: skip
    state = APOState(
        resources=["p"], engines={"p": "f-string"}, items=[0, 1], candidates=candidates
    )

    async def publish(url: str) -> str:
        async with agl.open_store(url) as store:
            update = await store.add_resources({"apo": state}, resources_id="apo-run-g1-s1")
        return update.resources_id

    with StoreServer("memory://") as server:
        resources_id = run_async(publish(server.url))
        page.goto(server.url + f"/#/resources/{resources_id}")
        rows = page.locator("section:has(h2:has-text('apo')) tbody tr")
        rows.first.wait_for()
        shown = [row.locator("td").nth(0).inner_text() for row in rows.all()]
        scores = [row.locator("td").nth(2).inner_text() for row in rows.all()]
        assert shown == ["c1", "c2", "c0"]
        assert scores == ["0.9", "0.5", "0.3"]
        assert "Digits only." in rows.first.inner_text()
