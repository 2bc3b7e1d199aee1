"""The learner on a real tiny model: logprobs, RL and SFT steps, gradient accumulation, KL,
LoRA, serving weights and exact checkpoint resume.

Transitions are built the way an engine would report them: prompt and response ids from the
tokenizer, behaviour logprobs from the model itself (so importance ratios start at 1).
"""

from __future__ import annotations

import copy
import functools
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch

from agl.lightning import Transition
from agl_torch.data import SFTExample, sft_examples_from_messages
from agl_torch.learner import Learner
from agl_torch.policy import load_policy, token_logprobs
from agl_torch.settings import LearnerSettings, LoraSettings
from agl_torch.tiny import END_OF_TURN

TIMING = ("time/update_s", "tokens/s")


@pytest.fixture(scope="module")
def policy(tiny_model_dir: Path) -> tuple[Any, Any]:
    return load_policy(tiny_model_dir, device="cpu")


@pytest.fixture
def model(policy: tuple[Any, Any]) -> Any:
    """A fresh copy of the tiny model's initial weights."""
    return copy.deepcopy(policy[0])


@pytest.fixture
def tokenizer(policy: tuple[Any, Any]) -> Any:
    return policy[1]


def prompt_ids(tokenizer: Any, question: str) -> list[int]:
    messages = [{"role": "user", "content": question}]
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True
    )
    return list(encoded["input_ids"])


def response_ids(tokenizer: Any, reply: str) -> list[int]:
    return list(tokenizer(reply + END_OF_TURN, add_special_tokens=False)["input_ids"])


@torch.no_grad()
def response_logprobs(model: Any, prompt: list[int], response: list[int]) -> list[float]:
    ids = torch.tensor([prompt + response])
    logprobs = token_logprobs(model, ids, torch.ones_like(ids))
    return [float(x) for x in logprobs[0, len(prompt) :]]


def transitions(
    model: Any,
    tokenizer: Any,
    specs: Sequence[tuple[str, str, float]],
    *,
    with_logprobs: bool = True,
) -> list[Transition]:
    """One transition per (question, reply, advantage); weights alternate 1 and 0.5."""
    out = []
    for index, (question, reply, advantage) in enumerate(specs):
        prompt, response = prompt_ids(tokenizer, question), response_ids(tokenizer, reply)
        logprobs = response_logprobs(model, prompt, response) if with_logprobs else None
        out.append(
            Transition(
                agent="solver",
                prompt_ids=prompt,
                response_ids=response,
                response_logprobs=logprobs,
                reward=advantage,
                advantage=advantage,
                rollout_id=f"r{index}",
                group_id="g",
                weight=1.0 if index % 2 == 0 else 0.5,
            )
        )
    return out


SPECS = [
    ("What is 12*7?", "The answer is 84.", 1.0),
    ("What is 12*7?", "Hello! How can I help you today?", -1.0),
    ("Tell me a story about a fox.", "The quick brown fox.", 0.5),
    ("Tell me a story about a fox.", "0 1 2 3", -0.5),
    ("Hello!", "Hello! How can I help you today?", 1.5),
    ("Hello!", "What is 12*7? Use the calculator.", -1.5),
]


def weights_of(learner: Learner) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in learner.model.state_dict().items()}


def capture_gradients(learner: Learner) -> list[torch.Tensor]:
    """The gradients the optimizer steps with, filled in at its next step."""
    gradients: list[torch.Tensor] = []

    def hook(optimizer: torch.optim.Optimizer, *_: Any) -> None:
        for group in optimizer.param_groups:
            gradients.extend(p.grad.clone() for p in group["params"])

    learner.optimizer.register_step_pre_hook(hook)
    return gradients


def without_timing(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if k not in TIMING}


# --- logprobs -------------------------------------------------------------------------------


def test_token_logprobs_match_log_softmax_with_padding_on_either_side(model: Any) -> None:
    long, short = [5, 17, 33, 2, 40, 41], [7, 8, 9]
    with torch.no_grad():
        expected = []
        for ids in (long, short):
            logits = model(torch.tensor([ids])).logits[0, :-1] / 2.0
            picked = logits.log_softmax(-1).gather(-1, torch.tensor(ids[1:])[:, None])
            expected.append(picked.squeeze(-1))
        right = torch.tensor([long, [*short, 0, 0, 0]])
        right_mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]])
        left = torch.tensor([long, [0, 0, 0, *short]])
        left_mask = torch.tensor([[1] * 6, [0, 0, 0, 1, 1, 1]])
        padded_right = token_logprobs(model, right, right_mask, temperature=2.0)
        padded_left = token_logprobs(model, left, left_mask, temperature=2.0)

    torch.testing.assert_close(padded_right[0, 1:], expected[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(padded_right[1, 1:3], expected[1], atol=1e-5, rtol=0)
    torch.testing.assert_close(padded_left[1, 4:], expected[1], atol=1e-5, rtol=0)
    assert padded_right[:, 0].tolist() == [0.0, 0.0]
    assert padded_right[1, 3:].tolist() == [0.0, 0.0, 0.0]
    assert padded_left[1, :4].tolist() == [0.0] * 4


def test_token_logprobs_of_the_needed_tokens_only_match_the_full_ones(model: Any) -> None:
    ids = torch.tensor([[5, 17, 33, 2, 40, 41], [0, 0, 7, 8, 9, 10]])
    mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])
    needed = torch.tensor([[0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 1]], dtype=torch.bool)
    seen: list[Any] = []
    forward = model.forward

    @functools.wraps(forward)
    def spying(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("logits_to_keep"))
        return forward(*args, **kwargs)

    with torch.no_grad():
        full = token_logprobs(model, ids, mask, temperature=2.0)
        with mock.patch.object(model, "forward", spying):
            part = token_logprobs(model, ids, mask, temperature=2.0, needed=needed)
            nothing = token_logprobs(model, ids, mask, needed=torch.zeros_like(needed))

    torch.testing.assert_close(part[needed], full[needed], atol=1e-5, rtol=0)
    assert part[~needed].tolist() == [0.0] * int((~needed).sum())
    assert seen[0].tolist() == [2, 3, 4]  # the logits predicting columns 3, 4 and 5 only
    assert len(seen) == 1  # nothing needed: no forward pass
    assert nothing.abs().sum() == 0


def test_token_logprobs_of_a_model_without_logits_to_keep_hold_the_needed_tokens_only(
    model: Any,
) -> None:
    ids = torch.tensor([[5, 17, 33, 2, 40, 41]])
    needed = torch.tensor([[0, 0, 1, 1, 0, 0]], dtype=torch.bool)
    forward = model.forward

    def plain(input_ids: Any, attention_mask: Any, position_ids: Any, use_cache: Any) -> Any:
        return forward(input_ids, attention_mask, position_ids=position_ids, use_cache=use_cache)

    with torch.no_grad():
        full = token_logprobs(model, ids, torch.ones_like(ids))
        with mock.patch.object(model, "forward", plain):
            part = token_logprobs(model, ids, torch.ones_like(ids), needed=needed)

    torch.testing.assert_close(part[needed], full[needed], atol=1e-5, rtol=0)
    assert part[~needed].tolist() == [0.0] * 4


def test_token_logprobs_in_chunks_match_in_one_piece_and_their_gradients_too(
    model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = torch.tensor([[5, 17, 33, 2, 40, 41], [0, 0, 7, 8, 9, 10]])
    mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])

    def logprobs_and_gradient() -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad()
        logprobs = token_logprobs(model, ids, mask, temperature=2.0)
        logprobs.sum().backward()
        weight = model.get_input_embeddings().weight
        return logprobs.detach(), weight.grad.detach().clone()

    whole = logprobs_and_gradient()
    vocabulary = model.get_input_embeddings().weight.shape[0]
    # three tokens a chunk: the ten logits rows come in four pieces
    monkeypatch.setattr("agl_torch.policy._LOGPROB_CHUNK_ELEMENTS", 3 * vocabulary)
    chunked = logprobs_and_gradient()
    model.zero_grad()

    torch.testing.assert_close(chunked[0], whole[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(chunked[1], whole[1], atol=1e-6, rtol=1e-5)
    assert whole[1].abs().sum() > 0


# --- RL -------------------------------------------------------------------------------------


def test_rl_step_follows_the_sign_of_the_advantage(model: Any, tokenizer: Any) -> None:
    batch = transitions(model, tokenizer, SPECS[:2])
    learner = Learner(model, tokenizer, LearnerSettings(lr=1e-3), device="cpu")
    before = [sum(t.response_logprobs or []) for t in batch]

    steps = [learner.rl_step(batch) for _ in range(3)]
    after = [sum(response_logprobs(learner.model, t.prompt_ids, t.response_ids)) for t in batch]

    assert after[0] > before[0]  # advantage +1: more likely
    assert after[1] < before[1]  # advantage -1: less likely
    first, last = steps[0], steps[-1]
    assert (first["ratio_mean"], first["clip_frac"]) == (1.0, 0.0)
    assert first["grad_norm"] > 0
    assert last["clip_frac"] > 0  # the stale batch left the trust region
    assert last["updates"] == 3
    assert last["samples"] == 2
    assert last["trained_tokens"] == sum(len(t.response_ids) for t in batch)
    assert last["tokens"] == last["trained_tokens"] + sum(len(t.prompt_ids) for t in batch)
    assert last["tokens/s"] > 0


@pytest.mark.parametrize("aggregation", ["token-mean", "sequence-mean"])
def test_micro_batches_accumulate_to_the_whole_batch_gradient(
    model: Any, tokenizer: Any, aggregation: Any
) -> None:
    batch = transitions(model, tokenizer, SPECS)
    results = []
    for budget in (100_000, 40):  # one micro-batch; one or two samples per micro-batch
        settings = LearnerSettings(
            lr=1e-5, max_grad_norm=None, micro_batch_tokens=budget, aggregation=aggregation
        )
        learner = Learner(copy.deepcopy(model), tokenizer, settings, device="cpu")
        gradients = capture_gradients(learner)
        metrics = learner.rl_step(batch)
        results.append((gradients, weights_of(learner), metrics))

    (one_grads, one_weights, one_metrics), (many_grads, many_weights, many_metrics) = results
    for one, many in zip(one_grads, many_grads, strict=True):
        torch.testing.assert_close(many, one, atol=1e-6, rtol=1e-4)
    for key, value in one_weights.items():
        torch.testing.assert_close(many_weights[key], value, atol=1e-6, rtol=0)
    assert many_metrics["loss"] == pytest.approx(one_metrics["loss"], abs=1e-6)
    assert many_metrics["grad_norm"] == pytest.approx(one_metrics["grad_norm"], rel=1e-5)


def test_kl_to_the_reference_starts_at_zero_and_grows(model: Any, tokenizer: Any) -> None:
    batch = transitions(model, tokenizer, SPECS[:4])
    learner = Learner(model, tokenizer, LearnerSettings(lr=1e-2, kl_coef=0.5), device="cpu")
    reference = {k: v.clone() for k, v in learner.reference.state_dict().items()}

    first = learner.rl_step(batch)
    later = [learner.rl_step(batch) for _ in range(2)]

    assert first["kl"] == 0.0
    assert later[-1]["kl"] > 0.0
    assert later[-1]["loss"] == pytest.approx(later[-1]["pg_loss"] + 0.5 * later[-1]["kl"])
    for key, value in learner.reference.state_dict().items():
        assert torch.equal(value, reference[key])


def test_missing_logprobs_and_several_epochs(model: Any, tokenizer: Any) -> None:
    batch = transitions(model, tokenizer, SPECS[:2], with_logprobs=False)
    learner = Learner(model, tokenizer, LearnerSettings(lr=1e-2, ppo_epochs=3), device="cpu")

    metrics = learner.rl_step(batch)

    assert metrics["updates"] == 3
    assert metrics["skipped"] == 0
    # Later epochs measure ratios against the policy before the first step.
    assert metrics["ratio_max"] > 1.0
    assert np.isfinite(metrics["loss"])


def test_decoupled_ppo_trusts_the_weights_before_the_update(model: Any, tokenizer: Any) -> None:
    # A stale batch (the weights moved on since it was sampled, as in asynchronous training):
    # plain PPO measures ratios against the stale behaviour policy and clips at once; decoupled
    # PPO measures them against the weights before this update (ratio 1 on the first epoch)
    # and weights each token by behaviour -> proximal importance.
    batch = transitions(model, tokenizer, SPECS[:2])
    moved = Learner(model, tokenizer, LearnerSettings(lr=1e-3), device="cpu")
    for _ in range(3):
        moved.rl_step(batch)
    settings = LearnerSettings(lr=1e-3, off_policy="decoupled", importance_cap=2.0)
    decoupled = Learner(moved.model, tokenizer, settings, device="cpu")
    metrics = decoupled.rl_step(batch)
    assert metrics["ratio_mean"] == pytest.approx(1.0)
    assert metrics["clip_frac"] == 0.0
    assert metrics["importance_max"] > 1.0  # the stale tokens the update made likelier
    assert 0.0 < metrics["importance_truncated"] < 1.0
    plain = Learner(moved.model, tokenizer, LearnerSettings(lr=1e-3), device="cpu")
    assert plain.rl_step(batch)["clip_frac"] > 0
    assert "importance_mean" not in plain.rl_step(batch)


def test_nothing_to_train_takes_no_step(model: Any, tokenizer: Any) -> None:
    learner = Learner(model, tokenizer, device="cpu")
    before = weights_of(learner)
    (masked,) = transitions(model, tokenizer, SPECS[:1])
    masked.response_mask = [0] * len(masked.response_ids)

    for metrics in (learner.rl_step([]), learner.rl_step([masked]), learner.sft_step([])):
        assert metrics["skipped"] == 1.0
        assert metrics["updates"] == 0.0
    assert all(torch.equal(v, before[k]) for k, v in weights_of(learner).items())


# --- LoRA -----------------------------------------------------------------------------------


def test_lora_trains_adapters_only_and_serves_merged_weights(
    model: Any, tokenizer: Any, tmp_path: Path
) -> None:
    base = {k: v.clone() for k, v in model.state_dict().items()}
    batch = transitions(model, tokenizer, SPECS)
    settings = LearnerSettings(lr=1e-2, kl_coef=0.1, lora=LoraSettings(r=4, alpha=8))
    learner = Learner(model, tokenizer, settings, device="cpu")
    trained = learner.model.get_base_model()
    adapters = {k: v.clone() for k, v in trained.state_dict().items() if "lora_" in k}

    first = learner.rl_step(batch)
    second = learner.rl_step(batch)

    # The reference is the model with its adapters off: KL 0, then positive.
    assert first["kl"] == 0.0
    assert second["kl"] > 0.0
    for key, value in trained.state_dict().items():
        if "lora_B" in key:
            assert not torch.equal(value, adapters[key]), key
        elif "lora_" not in key:
            assert torch.equal(value, base[key.replace(".base_layer.", ".")]), key
    serving = learner.serving_state_dict()
    assert serving.keys() == base.keys()
    key = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(serving[key], base[key])
    served, _ = load_policy(learner.save_pretrained(tmp_path / "served"), device="cpu")
    plain = type(served)(served.config).eval()
    plain.load_state_dict(serving)
    ids = torch.tensor([batch[0].prompt_ids + batch[0].response_ids])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        expected = token_logprobs(learner.model, ids, mask)
        for candidate in (plain, served):
            actual = token_logprobs(candidate, ids, mask)
            torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)


# --- checkpoints ----------------------------------------------------------------------------


@pytest.mark.parametrize("lora", [None, LoraSettings(r=4, alpha=8, dropout=0.1)])
def test_resume_from_a_checkpoint_is_exact(
    model: Any, tokenizer: Any, tmp_path: Path, lora: LoraSettings | None
) -> None:
    steps = [transitions(model, tokenizer, SPECS[i : i + 2]) for i in (0, 2, 4)]

    def learner() -> Learner:
        settings = LearnerSettings(lr=1e-3, lora=lora, seed=7)
        return Learner(copy.deepcopy(model), tokenizer, settings, device="cpu")

    straight = learner()
    expected = [without_timing(straight.rl_step(batch)) for batch in steps]

    first = learner()
    assert without_timing(first.rl_step(steps[0])) == expected[0]
    first.save_checkpoint(tmp_path / "ckpt", step=1, extra={"cursor": 2})
    generators = (torch.get_rng_state(), random.getstate(), np.random.get_state())

    resumed = learner()
    assert resumed.load_checkpoint(tmp_path / "ckpt") == (1, {"cursor": 2})
    assert torch.equal(torch.get_rng_state(), generators[0])
    assert random.getstate() == generators[1]
    assert np.array_equal(np.random.get_state()[1], generators[2][1])
    assert resumed.updates == 1
    assert [without_timing(resumed.rl_step(batch)) for batch in steps[1:]] == expected[1:]
    for key, value in weights_of(straight).items():
        assert torch.equal(weights_of(resumed)[key], value), key


# --- SFT ------------------------------------------------------------------------------------


def test_sft_lowers_the_loss_on_assistant_tokens_only(model: Any, tokenizer: Any) -> None:
    conversations = [
        [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]
        for question, reply, _ in SPECS[:3]
    ]
    examples = sft_examples_from_messages(tokenizer, conversations, max_length=256).examples
    ids = [torch.tensor([e.input_ids]) for e in examples]
    with torch.no_grad():
        nll = [
            -token_logprobs(model, x, torch.ones_like(x))[0][torch.tensor(e.labels_mask).bool()]
            for x, e in zip(ids, examples, strict=True)
        ]
    expected = float(torch.cat(nll).mean())
    learner = Learner(model, tokenizer, LearnerSettings(lr=1e-2), device="cpu")

    losses = [learner.sft_step(examples)["loss"] for _ in range(4)]

    assert losses[0] == pytest.approx(expected, rel=1e-5)
    assert losses[-1] < losses[0]


def test_sft_ignores_tokens_outside_the_mask(model: Any, tokenizer: Any) -> None:
    trained = [5, 17, 33, 2]
    losses = []
    for tail in ([40, 41, 42], [9, 9, 9]):
        learner = Learner(copy.deepcopy(model), tokenizer, device="cpu")
        example = SFTExample(trained + tail, [0, 1, 1, 1, 0, 0, 0])
        losses.append(learner.sft_step([example])["loss"])

    assert losses[0] == losses[1]
