"""The generation engine on the tiny model: exact logprobs, batching, seeds, stops, weight swaps.

Every logprob the engine reports is checked against an independent forward pass of a separately
loaded copy of the model over prompt + response.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from agl import AglError, InvalidInputError
from agl_torch.engine import Completion, GenerationEngine, SamplingParams, Token

pytestmark = pytest.mark.anyio
Forward = Callable[[Any, Sequence[int], Sequence[int]], torch.Tensor]
"""The ``forward_logprobs`` fixture: ``(model, prompt, tokens)`` -> tokens x vocabulary."""
TEXTS = [
    "Hello! How can I help",
    "What is 12*7? Use the calculator.",
    "fox",
    "The answer is 84. Tell me a story about a fox and",
    "0 1 2 3",
]


@pytest.fixture(scope="module")
def prompts(tokenizer: Any) -> list[list[int]]:
    return [tokenizer.encode(text) for text in TEXTS]


@pytest.fixture(scope="module")
def engine(reference: Any, tokenizer: Any) -> Iterator[GenerationEngine]:
    # A generous batch wait: requests submitted together in a test land in one batch.
    with GenerationEngine(copy.deepcopy(reference), tokenizer, batch_wait_s=0.05) as engine:
        yield engine


def assert_logprobs_match(done: Completion, expected: torch.Tensor) -> None:
    """``done``'s logprobs are those ``expected`` (tokens x vocabulary) gives its tokens."""
    assert len(done.logprobs) == len(done.token_ids) == len(expected)
    chosen = expected.gather(-1, torch.tensor(done.token_ids).unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(torch.tensor(done.logprobs), chosen, atol=1e-4, rtol=0)


async def test_logprobs_are_the_models_raw_distribution(
    engine: GenerationEngine, reference: Any, prompts: list[list[int]], forward_logprobs: Forward
) -> None:
    cases = [
        SamplingParams(max_tokens=10, temperature=0, top_logprobs=3),
        SamplingParams(max_tokens=10, temperature=0.7, top_p=0.9, seed=1, top_logprobs=2),
        SamplingParams(max_tokens=10, temperature=1.3, seed=2),
    ]
    for params, prompt in zip(cases, prompts, strict=False):
        done = await engine.generate(prompt, params)
        assert done.prompt_ids == prompt
        assert done.finish_reason == "length"
        expected = forward_logprobs(reference, prompt, done.token_ids)
        assert_logprobs_match(done, expected)
        for step, top in enumerate(done.top_logprobs):
            assert len(top) == params.top_logprobs
            if top:
                values, ids = expected[step].topk(len(top))
                assert [t for t, _ in top] == ids.tolist()
                torch.testing.assert_close(
                    torch.tensor([lp for _, lp in top]), values, atol=1e-4, rtol=0
                )
        if params.temperature == 0:
            assert done.token_ids == expected.argmax(dim=-1).tolist()


async def test_batched_greedy_outputs_equal_one_at_a_time(
    engine: GenerationEngine, prompts: list[list[int]]
) -> None:
    params = SamplingParams(max_tokens=12, temperature=0)
    alone = [engine.generate_sync(prompt, params) for prompt in prompts]
    before = engine.stats
    batched = await asyncio.gather(*(engine.generate(prompt, params) for prompt in prompts))
    after = engine.stats
    assert after.batches == before.batches + 1
    assert after.largest_batch >= len(prompts)
    assert after.requests == before.requests + len(prompts)
    assert after.tokens == before.tokens + 12 * len(prompts)
    for one, many in zip(alone, batched, strict=True):
        assert many.token_ids == one.token_ids
        torch.testing.assert_close(many.logprobs, one.logprobs, atol=1e-4, rtol=0)


async def test_a_seed_gives_the_same_output_alone_or_batched(
    engine: GenerationEngine, prompts: list[list[int]]
) -> None:
    seeded = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.95, seed=7)
    alone = await engine.generate(prompts[0], seeded)
    others = [
        engine.generate(prompt, SamplingParams(max_tokens=5 + i, temperature=0.5 * i))
        for i, prompt in enumerate(prompts)
    ]
    batched, *_ = await asyncio.gather(engine.generate(prompts[0], seeded), *others)
    assert batched.token_ids == alone.token_ids
    other_seed = await engine.generate(prompts[0], SamplingParams(max_tokens=16, seed=8))
    assert other_seed.token_ids != alone.token_ids


async def test_a_stream_yields_each_token_then_the_completion(
    engine: GenerationEngine, prompts: list[list[int]]
) -> None:
    events = [
        event
        async for event in engine.stream(prompts[1], SamplingParams(max_tokens=6, top_logprobs=1))
    ]
    *tokens, done = events
    assert isinstance(done, Completion)
    assert all(isinstance(t, Token) for t in tokens)
    assert [t.id for t in tokens if isinstance(t, Token)] == done.token_ids
    assert [t.logprob for t in tokens if isinstance(t, Token)] == done.logprobs
    assert {t.weight_version for t in tokens if isinstance(t, Token)} == {done.weight_version}


async def test_leaving_a_stream_drops_its_row(
    engine: GenerationEngine, prompts: list[list[int]]
) -> None:
    before = engine.stats.tokens
    stream = engine.stream(prompts[0], SamplingParams(max_tokens=500))
    async for _ in stream:
        break
    await stream.aclose()
    done = await engine.generate(prompts[0], SamplingParams(max_tokens=3))
    # the engine serves the next request (sampling may end it early with EOS)...
    expected = "length" if len(done.token_ids) == 3 else "stop"
    assert done.finish_reason == expected
    assert 1 <= len(done.token_ids) <= 3
    # ...and did not go on generating the abandoned stream's 500 tokens
    assert engine.stats.tokens - before < 100


async def test_stop_strings_eos_and_lengths(
    engine: GenerationEngine, reference: Any, tokenizer: Any, prompts: list[list[int]]
) -> None:
    greedy = SamplingParams(max_tokens=12, temperature=0)
    free = await engine.generate(prompts[3], greedy)
    text = tokenizer.decode(free.token_ids, skip_special_tokens=True)
    # A stop string the greedy reply reaches around its middle: the generation ends with the
    # token completing it, and the text (the decoding of the tokens) still holds it.
    stop = next(
        text[i : i + 2]
        for i in range(len(text) // 3, len(text) - 1)
        if text[i : i + 2].isascii() and text[i : i + 2].isprintable()
    )
    stopped = await engine.generate(prompts[3], replace(greedy, stop=[stop]))
    assert stopped.finish_reason == "stop"
    assert stopped.stop_reason == stop
    assert stopped.token_ids == free.token_ids[: len(stopped.token_ids)]
    assert stop in tokenizer.decode(stopped.token_ids)
    assert stop not in tokenizer.decode(stopped.token_ids[:-1])

    # An EOS id from the generation config ends a reply, and is part of it.
    eos = free.token_ids[5]
    model = copy.deepcopy(reference)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, eos]
    length = len(prompts[3]) + 8
    with GenerationEngine(model, tokenizer, max_model_len=length) as short:
        assert short.eos_token_ids == {tokenizer.eos_token_id, eos}
        done = short.generate_sync(prompts[3], SamplingParams(temperature=0))
        assert done.finish_reason == "stop"
        assert done.token_ids == free.token_ids[: free.token_ids.index(eos) + 1]
        long_prompt = prompts[3] * 3
        free_run = short.generate_sync(prompts[0], SamplingParams(temperature=2.0, seed=3))
        total = len(prompts[0]) + len(free_run.token_ids)
        assert (free_run.finish_reason, total) in {("stop", total), ("length", length)}
        assert total <= length
        with pytest.raises(InvalidInputError, match=f"maximum context length is {length}"):
            short.generate_sync(long_prompt)
        with pytest.raises(InvalidInputError, match=rf"is too large: 9\b.*{length}"):
            short.generate_sync(prompts[3], SamplingParams(max_tokens=9))
        with pytest.raises(InvalidInputError, match="token ids in"):
            short.generate_sync([10**6])


def test_sampling_params_are_checked() -> None:
    for bad in (
        {"max_tokens": 0},
        {"temperature": -1.0},
        {"top_p": 0.0},
        {"top_logprobs": -1},
        {"stop": "x"},
    ):
        with pytest.raises(InvalidInputError):
            SamplingParams(**bad)


async def test_weights_swap_between_batches_and_are_versioned(
    reference: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    tmp_path: Path,
    forward_logprobs: Forward,
) -> None:
    original = {name: tensor.clone() for name, tensor in reference.state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    perturbed = {
        name: tensor + 0.05 * torch.randn(tensor.shape, generator=generator)
        for name, tensor in original.items()
    }
    new_model = copy.deepcopy(reference)
    new_model.load_state_dict(perturbed)
    new_model.save_pretrained(tmp_path / "new")
    engine = GenerationEngine(copy.deepcopy(reference), tokenizer)
    with pytest.raises(AglError, match="not running"):
        engine.generate_sync(prompts[0])
    with engine:
        assert engine.version == 0
        long = SamplingParams(max_tokens=60, temperature=0)
        running = engine.stream(prompts[1], long)
        first = await anext(running)
        assert isinstance(first, Token)
        assert first.weight_version == 0
        # The update waits for the running batch: it returns after that request finished.
        update = asyncio.ensure_future(engine.update_weights_async(tmp_path / "new"))
        events = [event async for event in running]
        assert await update == 1
        assert engine.version == 1
        old = events[-1]
        assert isinstance(old, Completion)
        assert old.weight_version == 0
        assert_logprobs_match(old, forward_logprobs(reference, old.prompt_ids, old.token_ids))

        new = await engine.generate(prompts[1], SamplingParams(max_tokens=8, temperature=0))
        assert new.weight_version == 1
        assert_logprobs_match(new, forward_logprobs(new_model, new.prompt_ids, new.token_ids))

        assert engine.update_weights(original) == 2
        back = await engine.generate(prompts[1], SamplingParams(max_tokens=8, temperature=0))
        assert (back.weight_version, back.token_ids) == (2, old.token_ids[:8])

        with pytest.raises(InvalidInputError, match=r"missing model\.norm\.weight"):
            engine.update_weights({k: v for k, v in original.items() if k != "model.norm.weight"})
        with pytest.raises(InvalidInputError, match=r"wrong shape model\.norm\.weight"):
            engine.update_weights({**original, "model.norm.weight": torch.zeros(3)})
        with pytest.raises(InvalidInputError, match="safetensors"):
            engine.update_weights(tmp_path / "nowhere")
        assert engine.version == 2
    # A stopped engine applies updates at once.
    assert engine.update_weights(perturbed) == 3


def test_updates_from_many_threads_each_get_a_version(
    engine: GenerationEngine, reference: Any, prompts: list[list[int]]
) -> None:
    state = reference.state_dict()
    start = engine.version
    versions: list[int] = []
    lock = threading.Lock()

    def update() -> None:
        version = engine.update_weights(state)
        with lock:
            versions.append(version)

    threads = [threading.Thread(target=update) for _ in range(4)]
    for thread in threads:
        thread.start()
    done = engine.generate_sync(prompts[0], SamplingParams(max_tokens=4))
    for thread in threads:
        thread.join()
    assert sorted(versions) == [start + 1, start + 2, start + 3, start + 4]
    assert start <= done.weight_version <= start + 4
