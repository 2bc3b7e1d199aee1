"""sft-verl's saved state: a round trip, and clear errors for a state that cannot resume."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from agl import InvalidInputError
from agl.lightning import Transition
from agl_verl.sft_state import SFTState


def transition(index: int) -> Transition:
    return Transition(
        agent="writer",
        prompt_ids=[1, 2, index],
        response_ids=[3, 4],
        response_logprobs=[-0.5, -0.25],
        reward=1.0,
        advantage=0.5,
        rollout_id=f"ro-{index}",
        group_id="task",
        token_advantages=[0.5, 0.25],
    )


def test_a_saved_state_reads_back_the_same(tmp_path: Path) -> None:
    model = tmp_path / "round" / "hf_model"
    model.mkdir(parents=True)
    state = SFTState(3, True, model, [transition(0), transition(1)])
    state.save(tmp_path / "sft-verl")
    assert SFTState.load(tmp_path / "sft-verl") == state
    assert not list((tmp_path / "sft-verl").glob("*.partial"))


def test_no_saved_state_is_none(tmp_path: Path) -> None:
    assert SFTState.load(tmp_path) is None


def test_a_state_whose_model_is_gone_says_so(tmp_path: Path) -> None:
    SFTState(3, True, tmp_path / "deleted", []).save(tmp_path)
    with pytest.raises(InvalidInputError, match=r"the last round's model .*deleted.* is gone"):
        SFTState.load(tmp_path)


def test_an_unreadable_state_says_so(tmp_path: Path) -> None:
    SFTState(1, False, None, [transition(0)]).save(tmp_path)
    (tmp_path / "pending.jsonl").write_text('{"agent": null}\n')
    with pytest.raises(InvalidInputError, match="its state is unreadable"):
        SFTState.load(tmp_path)
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(InvalidInputError, match="its state is unreadable"):
        SFTState.load(tmp_path)


def test_files_that_disagree_say_so(tmp_path: Path) -> None:
    SFTState(1, False, None, [transition(0), transition(1)]).save(tmp_path)
    (tmp_path / "pending.jsonl").write_text(json.dumps(asdict(transition(0))) + "\n")
    with pytest.raises(InvalidInputError, match=r"counts 2 pending transitions, .* holds 1"):
        SFTState.load(tmp_path)
