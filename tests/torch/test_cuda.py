"""agl-torch on a CUDA device: the learner, the engine and the whole loop (skipped without one).

The policy server's weight swap under load runs on CUDA too, as a parameter of
``test_server.py``'s test.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch

import agl
from agl import read_metrics
from agl.lightning import Transition
from agl_torch.engine import GenerationEngine, SamplingParams
from agl_torch.learner import Learner
from agl_torch.policy import load_policy, token_logprobs
from agl_torch.quickstart import calculator_agent, tasks
from agl_torch.rl import LightningRLTorch
from agl_torch.settings import LearnerSettings, ServingSettings

pytestmark = pytest.mark.gpu


def test_engine_generates_on_cuda_with_logprobs_the_model_agrees_with(
    tiny_model_dir: Path,
) -> None:
    model, tokenizer = load_policy(tiny_model_dir, device="cuda")
    assert next(model.parameters()).device.type == "cuda"
    prompt = tokenizer("What is 3+4?", add_special_tokens=False)["input_ids"]
    with GenerationEngine(model, tokenizer, device="cuda") as engine:
        completion = engine.generate_sync(prompt, SamplingParams(max_tokens=16, seed=0))
    ids = torch.tensor([prompt + completion.token_ids], device="cuda")
    expected = token_logprobs(model, ids, torch.ones_like(ids))[0, len(prompt) :]
    assert completion.token_ids
    assert torch.allclose(expected.cpu(), torch.tensor(completion.logprobs), atol=1e-3)


def test_learner_steps_on_cuda(tiny_model_dir: Path) -> None:
    model, tokenizer = load_policy(tiny_model_dir, device="cuda")
    learner = Learner(model, tokenizer, LearnerSettings(lr=1e-3), device="cuda")
    prompt = tokenizer("What is 3+4?", add_special_tokens=False)["input_ids"]
    response = tokenizer("7<|im_end|>", add_special_tokens=False)["input_ids"]
    transitions = [
        Transition(None, prompt, response, None, 1.0, sign, f"r{i}", "g")
        for i, sign in enumerate((1.0, -1.0))
    ]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    metrics = learner.rl_step(transitions)
    assert metrics["updates"] == 1
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(t.device.type == "cpu" for t in learner.serving_state_dict().values())


def test_a_short_rl_run_on_cuda(tiny_model_dir: Path, tmp_path: Path) -> None:
    algorithm = LightningRLTorch(
        tiny_model_dir,
        loop=agl.LoopSettings(n_samples=4, batch_size=4, max_steps=3),
        learner=LearnerSettings(lr=1e-4),
        sampling=agl.SamplingSettings(max_tokens=16),
        serving=ServingSettings(device="cuda"),
        transitions=agl.TransitionBuilder(drop_zero_variance=False),
    )
    agl.Trainer(algorithm=algorithm, run_dir=tmp_path, progress=False, console=False).fit(
        calculator_agent, tasks(12, seed=1)
    )
    rows = [row for row in read_metrics(tmp_path) if "actor/loss" in row]
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert all("reward/mean" in row for row in rows)


@pytest.mark.parametrize(("saved_on", "loaded_on"), [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_checkpoint_moves_between_cpu_and_cuda(
    tiny_model_dir: Path, tmp_path: Path, saved_on: str, loaded_on: str
) -> None:
    _, tokenizer = load_policy(tiny_model_dir, device="cpu")
    prompt = tokenizer("What is 3+4?", add_special_tokens=False)["input_ids"]
    response = tokenizer("7<|im_end|>", add_special_tokens=False)["input_ids"]
    batch = [
        Transition(None, prompt, response, None, 1.0, sign, f"r{i}", "g")
        for i, sign in enumerate((1.0, -1.0))
    ]

    def learner(device: str) -> Learner:
        model, _ = load_policy(tiny_model_dir, device=device)
        return Learner(model, tokenizer, LearnerSettings(lr=1e-3, seed=3), device=device)

    straight = learner(saved_on)
    straight.rl_step(batch)
    straight.save_checkpoint(tmp_path / "ckpt", step=1)
    saved = {k: v.detach().cpu().clone() for k, v in straight.model.state_dict().items()}
    moments = [
        {k: v.cpu().clone() for k, v in state.items()}
        for state in straight.optimizer.state.values()
    ]

    moved = learner(loaded_on)
    assert moved.load_checkpoint(tmp_path / "ckpt") == (1, {})
    assert moved.updates == 1
    for key, value in moved.model.state_dict().items():
        assert value.device.type == loaded_on, key
        assert torch.equal(value.cpu(), saved[key]), key
    # Adam's moments came along, each on its parameter's device; its step counters stay as the
    # optimizer keeps them. (A step on the other device is not compared number for number: for
    # near-zero gradients Adam's normalized update differs between CPU and GPU arithmetic.)
    loaded = list(moved.optimizer.state.values())
    assert len(loaded) == len(moments) > 0
    for state, expected in zip(loaded, moments, strict=True):
        for name in ("exp_avg", "exp_avg_sq"):
            assert state[name].device.type == loaded_on
            assert torch.equal(state[name].cpu(), expected[name])
        assert float(state["step"]) == 1.0
    assert moved.rl_step(batch)["updates"] == 2


@pytest.mark.timeout(600)
def test_the_quickstart_learns_on_cuda(tmp_path: Path) -> None:
    from agl_torch.quickstart import train, warm_up_model

    # The CPU learning test (test_rl.py) with everything on the GPU: warm-up, serving, updates.
    warm = warm_up_model(tmp_path / "warm", seed=0, device="cuda", progress=False)
    torch.cuda.reset_peak_memory_stats()
    summary = train(
        warm, tmp_path / "run", steps=20, seed=0, device="cuda", progress=False, console=False
    )
    assert torch.cuda.max_memory_allocated() > 0  # the policy lived on the GPU
    rows = [row for row in read_metrics(tmp_path / "run") if "actor/loss" in row]
    first = statistics.fmean(row["reward/mean"] for row in rows[:5])
    last = statistics.fmean(row["reward/mean"] for row in rows[-5:])
    print(f"quickstart on CUDA: {summary}")
    assert last > first + 0.15, (first, last)
    assert summary["val_after"] > summary["val_before"] + 0.2, summary
