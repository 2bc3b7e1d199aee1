"""verl's real actor update, driven by agl-verl's engine step on a converted batch, with the
policy served by agl-torch's server on the same device: on CPU, and on a GPU where one is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("actor_update.py")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_verls_ppo_update_trains_the_tiny_model_on_agls_batch(model_dir: Path, device: str) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(SCRIPT), str(model_dir), device],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines, done.stdout[-3000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    metrics = result["metrics"]

    print(f"verl actor update on {device}: {json.dumps(result)}")
    assert result["device"].startswith(device)
    assert result["served_device"].startswith(device)
    # the server was told of the update, then got the new weights after it: version 1
    assert result["replica_calls"] == ["sleep", "update_weights:1->v1"]
    assert result["served_version"] == "1"
    assert result["served_equal"] == result["served_parameters"] > 0
    # verl's PPO loss ran and every weight moved
    assert result["changed"] == result["parameters"] > 0
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/ppo_kl", "actor/lr"):
        assert key in metrics, key
    assert metrics["actor/grad_norm"] > 0
    assert metrics["verl/samples"] == 6
    assert metrics["verl/dropped_for_dp"] == 0
    # verl's metrics read agl's batch: rewards 1, 0 per group; advantages +-0.7071 (one call)
    # and +-0.3536 (two calls, weighted)
    assert metrics["critic/score/mean"] == pytest.approx(0.5)
    assert metrics["critic/advantages/max"] == pytest.approx(0.7071, abs=1e-3)
    assert sorted(round(a, 4) for a in result["advantages"]) == [
        -0.7071, -0.3536, -0.3536, 0.3536, 0.3536, 0.7071
    ]  # fmt: skip
    # the update raised the advantage-weighted log-likelihood of the responses
    gain = sum(a * d for a, d in zip(result["advantages"], result["logprob_delta"], strict=True))
    assert gain > 0
    # single-call samples moved the way their advantage says
    assert result["logprob_delta"][0] > 0 > result["logprob_delta"][1]
    # ... and so they did on the served model
    assert result["served_delta"][0] > 0 > result["served_delta"][1]
    assert "timing_s/update_actor" in metrics
