"""A runner's counters: one per outcome, and the first line of each failure's reason."""

from __future__ import annotations

from agl._rollouts import AttemptStatus
from agl._run._agent import AgentError
from agl._run._runner_stats import RunnerStats, failure_reason


def test_each_final_status_lands_in_one_counter_and_failures_keep_their_reasons() -> None:
    stats = RunnerStats(claimed=6, abandoned=1)
    stats.count(AttemptStatus.SUCCEEDED, None)
    stats.count(AttemptStatus.RELEASED, "the runner stopped")
    stats.count(AttemptStatus.FAILED, "ValueError: bad\ntraceback ...")
    stats.count(AttemptStatus.FAILED, "ValueError: bad")
    stats.count(AttemptStatus.TIMEOUT, None)
    assert (stats.succeeded, stats.released, stats.failed, stats.timed_out) == (1, 1, 2, 1)
    assert stats.finished == stats.claimed
    assert stats.reasons == {"ValueError: bad": 2, "timeout": 1}


def test_a_failure_reason_is_the_exception_type_and_its_first_line() -> None:
    assert failure_reason(ValueError("no answer\nmore")) == "ValueError: no answer"
    assert failure_reason(KeyError()) == "KeyError"
    assert failure_reason(AgentError("the agent asks for 'critic'")) == (
        "the agent asks for 'critic'"
    )
    assert len(failure_reason(RuntimeError("x" * 2000))) == 500
