"""The batch sampler on fixed logits: the greedy fast path, raw logprobs, per-row generators.

The engine tests check the sampler end to end on a model; these pin what a batch's mix of
parameters must not change: a greedy row gives the same token and logprobs whether its batch
takes the greedy fast path or the general one, and a seeded row draws the same tokens whatever
else is (or stops being) in its batch.
"""

from __future__ import annotations

import torch

from agl_torch._sampling import Draw, Sampler, SamplingParams

CPU = torch.device("cpu")


def logits(rows: int, vocab: int = 50, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 3


def sample(params: list[SamplingParams], values: torch.Tensor) -> Draw:
    return Sampler(params, CPU, torch.Generator().manual_seed(0)).sample(values)


def test_sampling_greedy_fast_path_equals_the_general_path() -> None:
    values = logits(6)
    greedy = SamplingParams(temperature=0, top_logprobs=3)
    fast = sample([greedy] * 6, values)
    mixed = [greedy, SamplingParams(temperature=0.8, top_p=0.9, seed=1)] * 3
    general = sample(mixed, values)
    expected = torch.log_softmax(values, dim=-1)
    assert fast.ids == expected.argmax(dim=-1).tolist()
    assert fast.chosen.tolist() == fast.ids
    for row in range(0, 6, 2):
        assert general.ids[row] == fast.ids[row]
        assert general.logprobs[row] == fast.logprobs[row]
        assert general.top_logprobs[row] == fast.top_logprobs[row]
    torch.testing.assert_close(
        torch.tensor(fast.logprobs), expected.max(dim=-1).values, atol=1e-5, rtol=0
    )
    top_values, top_ids = expected.topk(3, dim=-1)
    for row, top in enumerate(fast.top_logprobs):
        assert [t for t, _ in top] == top_ids[row].tolist()
        torch.testing.assert_close(
            torch.tensor([v for _, v in top]), top_values[row], atol=1e-5, rtol=0
        )


def test_sampling_reports_the_raw_logprob_of_a_sampled_token() -> None:
    values = logits(4, seed=1)
    params = [
        SamplingParams(temperature=t, top_p=p, seed=i)
        for i, (t, p) in enumerate([(0.5, 1.0), (1.5, 0.7), (1.0, 0.3), (0, 1.0)])
    ]
    draw = sample(params, values)
    expected = torch.log_softmax(values, dim=-1).gather(-1, draw.chosen.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(torch.tensor(draw.logprobs), expected, atol=1e-5, rtol=0)
    assert draw.top_logprobs == [[]] * 4


def test_sampling_a_nucleus_of_one_token_is_the_most_likely_token() -> None:
    values = logits(8, seed=2)
    draw = sample([SamplingParams(temperature=1.0, top_p=1e-6)] * 8, values)
    assert draw.ids == values.argmax(dim=-1).tolist()


def test_sampling_a_seeded_row_draws_the_same_alone_or_after_its_batch_shrinks() -> None:
    values = logits(3, vocab=400, seed=3)
    seeded = SamplingParams(temperature=1.0, seed=7)
    alone = Sampler([seeded], CPU, torch.Generator().manual_seed(0))
    expected = [alone.sample(values[1:2]).ids[0] for _ in range(5)]
    batch = [SamplingParams(temperature=1.0), seeded, SamplingParams(temperature=0, seed=3)]
    sampler = Sampler(batch, CPU, torch.Generator().manual_seed(1))
    drawn = [sampler.sample(values).ids[1] for _ in range(2)]
    sampler.select([1])
    drawn += [sampler.sample(values[1:2]).ids[0] for _ in range(3)]
    assert drawn == expected
