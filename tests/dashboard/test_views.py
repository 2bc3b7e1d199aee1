"""The dashboard's server side: its views, the pages behind (or not behind) the token, the
standalone ``agl dashboard`` in front of a store server, and bad input."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import agl
from agl.dashboard._app import static_folder

from .conftest import TOKEN, RunStore, free_port, run_async

pytestmark = pytest.mark.slow

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_the_page_is_public_and_the_data_is_not(run_store: RunStore) -> None:
    with httpx.Client(base_url=run_store.url, timeout=30) as http:
        page = http.get("/")
        assert page.status_code == 200
        assert 'src="dashboard/app.js"' in page.text
        for asset in ("app.js", "app.css", "favicon.svg"):
            assert http.get(f"/dashboard/{asset}").status_code == 200
        assert http.get("/dashboard/../v1/statistics").status_code in (401, 404)
        assert http.get("/dashboard/secrets.txt").status_code in (401, 404)
        for path in (
            "/v1/rollouts",
            "/v1/statistics",
            f"/v1/views/rollouts/{run_store.rollout_ids[0]}",
        ):
            refused = http.get(path)
            assert refused.status_code == 401, path
            assert refused.headers["www-authenticate"].startswith("Bearer")
        assert http.post("/", json={}).status_code in (401, 405)


def test_the_pages_fetch_nothing_from_the_internet() -> None:
    for path in static_folder().iterdir():
        text = path.read_text()
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", ""), path.name
        assert "https://" not in text, path.name
        assert "//cdn" not in text, path.name


def test_the_training_view_is_lightningrls_for_the_rollouts_group(run_store: RunStore) -> None:
    from agl._results import fetch_results
    from agl.lightning import TransitionBuilder

    async def expected(rollout_id: str) -> tuple[list[str], agl.TransitionBatch]:
        async with agl.open_store(run_store.url, token=TOKEN) as store:
            rollout = await store.get_rollout(rollout_id)
            page = await store.query_rollouts(limit=1000)
            group = [
                r
                for r in page.rollouts
                if r.enqueue_time == rollout.enqueue_time
                and r.metadata["task_index"] == rollout.metadata["task_index"]
            ]
            results = await fetch_results(store, group)
        return [r.rollout_id for r in group], TransitionBuilder(credit="step").build(results)

    rollout_id = run_store.rollout_ids[2]
    members, batch = run_async(expected(rollout_id))
    with httpx.Client(base_url=run_store.url, headers=AUTH, timeout=30) as http:
        view = http.get(f"/v1/views/rollouts/{rollout_id}/training", params={"credit": "step"})
        assert view.status_code == 200, view.text
        body = view.json()
    assert sorted(r["rollout_id"] for r in body["rollouts"]) == sorted(members)
    assert len(members) == 2  # the task's two samples of that step
    got = [(t["rollout_id"], t["call_index"], t["advantage"]) for t in body["transitions"]]
    assert got == [(t.rollout_id, t.call_index, pytest.approx(t.advantage)) for t in batch]
    assert body["summary"] == batch.report.summary()
    for row in body["rollouts"]:
        assert row["dropped"] == batch.report.rollout_reasons.get(row["rollout_id"])


def test_bad_view_requests_name_what_was_wrong(run_store: RunStore) -> None:
    rollout_id = run_store.rollout_ids[0]
    with httpx.Client(base_url=run_store.url, headers=AUTH, timeout=30) as http:
        unknown = http.get("/v1/views/rollouts/ro-nope")
        assert unknown.status_code == 404
        assert "ro-nope" in unknown.json()["error"]["message"]
        credit = http.get(f"/v1/views/rollouts/{rollout_id}/training", params={"credit": "magic"})
        assert credit.status_code == 422
        assert credit.json()["error"]["field"] == "credit"
        call = http.get(f"/v1/views/rollouts/{rollout_id}/calls/99/tokens")
        assert call.status_code == 404
        assert call.json()["error"]["field"] == "index"
        attempt = http.get(f"/v1/views/rollouts/{rollout_id}", params={"attempt_id": "at-x"})
        assert attempt.status_code == 404
        assert attempt.json()["error"]["field"] == "attempt_id"
        against = http.get(
            f"/v1/views/resources/{run_store.resources_ids[1]}/diff", params={"against": "rs-x"}
        )
        assert against.status_code == 404
        assert against.json()["error"]["field"] == "against"
        # nothing stored was touched by the mistakes
        stats = http.get("/v1/statistics").json()
    assert stats["rollouts"] == 16


def test_the_standalone_dashboard_reads_a_store_server_and_writes_nothing(
    run_store: RunStore, tmp_path: Path
) -> None:
    from agl.testing.processes import Processes

    port = free_port()
    with Processes(tmp_path) as procs:
        child = procs.start("dashboard", "dashboard", "--store", run_store.url, "--port", str(port))
        run_async(procs.serving(child, f"http://127.0.0.1:{port}/"))
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            assert http.get("/").status_code == 200
            assert http.get("/v1/rollouts").status_code == 401  # the store's own refusal
            listed = http.get("/v1/rollouts", params={"order": "newest"}, headers=AUTH).json()
            assert listed["total"] == 16
            assert listed["rollouts"][0]["rollout_id"] == run_store.rollout_ids[-1]
            view = http.get(f"/v1/views/rollouts/{run_store.rollout_ids[0]}", headers=AUTH)
            assert view.status_code == 200
            assert view.json()["rollout"]["rollout_id"] == run_store.rollout_ids[0]
            refused = http.post(
                "/v1/rollouts/enqueue", json={"requests": [{"input": 1}]}, headers=AUTH
            )
            assert refused.status_code == 405
    with httpx.Client(base_url=run_store.url, headers=AUTH, timeout=30) as http:
        assert http.get("/v1/statistics").json()["rollouts"] == 16


def test_the_standalone_dashboard_refuses_a_non_http_store(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "agl", "dashboard", "--store", "sqlite:///x.db"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "--store must be a store server's http(s) URL" in done.stdout + done.stderr
