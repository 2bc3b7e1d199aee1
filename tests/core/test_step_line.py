"""The console line of a step: the figures people read, whatever algorithm logged them."""

from __future__ import annotations

from typing import Any

import pytest

from agl._train._step_line import compact_line, format_number, full_line


def line(record: dict[str, Any]) -> str:
    return compact_line({"step": 7, "time": 1.0, **record}).plain


def test_a_torch_rl_step() -> None:
    record = {
        "reward/mean": 0.625,
        "reward/min": 0.0,
        "rollouts/success_rate": 1.0,
        "rollouts/failed": 0.0,
        "transitions/calls": 64.0,
        "transitions/kept": 48.0,
        "transitions/dropped/zero_variance_group": 16.0,
        "loss": 0.01234567,
        "pg_loss": 0.0123,
        "clip_frac": 0.0,
        "approx_kl": 2.057e-09,
        "time/rollout_s": 2.9,
        "time/step_s": 3.3241,
    }
    assert line(record) == "step 7  reward 0.625  kept 48/64  loss 0.01235  3.32 s"


def test_a_validation_record_and_failures() -> None:
    assert line({"val/reward/mean": 0.7, "val/rollouts/failed": 3.0}) == "step 7  val 0.7"
    assert line({"reward/mean": 0.5, "rollouts/failed": 2.0}) == "step 7  reward 0.5  failed 2"


def test_re_rendered_histories_show_when_there_are_some() -> None:
    counts = {"transitions/calls": 8.0, "transitions/kept": 8.0}
    assert line({**counts, "transitions/prefix_mismatch": 0.0}) == "step 7  kept 8/8"
    labelled = {
        **counts,
        "transitions/prefix_mismatch": 2.0,
        "lightningrl-torch-checker/transitions/prefix_mismatch": 1.0,
        "val/transitions/prefix_mismatch": 5.0,
    }
    assert line(labelled) == "step 7  kept 8/8  prefix_mismatch 3"


def test_two_labelled_algorithms_each_show_their_loss_and_share_the_counts() -> None:
    record = {
        "reward/mean": 1.0,
        "lightningrl-torch-writer/transitions/calls": 8.0,
        "lightningrl-torch-writer/transitions/kept": 8.0,
        "lightningrl-torch-checker/transitions/calls": 4.0,
        "lightningrl-torch-checker/transitions/kept": 2.0,
        "lightningrl-torch-writer/loss": 0.25,
        "lightningrl-torch-checker/loss": 0.5,
    }
    assert line(record) == (
        "step 7  reward 1  kept 10/12  lightningrl-torch-writer loss 0.25  "
        "lightningrl-torch-checker loss 0.5"
    )


def test_verls_loss_and_a_custom_algorithms_figures() -> None:
    assert line({"reward/mean": 0.5, "actor/pg_loss": -0.125}) == "step 7  reward 0.5  loss -0.125"
    custom = {f"mine/{index}": float(index) for index in range(10)}
    assert line(custom) == "step 7  mine/0=0  mine/1=1  mine/2=2  mine/3=3  mine/4=4  mine/5=5"


def test_full_line_has_every_figure() -> None:
    record = {"step": 1, "time": 2.0, "a": 0.5, "b": None, "c": 3}
    assert full_line(record).plain == "step 1  a=0.5  b=nan  c=3"


@pytest.mark.parametrize(
    ("value", "text"), [(None, "nan"), (3, "3"), (3.0, "3"), (0.123456, "0.1235"), (2e-9, "2e-09")]
)
def test_format_number(value: float | None, text: str) -> None:
    assert format_number(value) == text
