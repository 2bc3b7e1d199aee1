"""What a runner did: one counter per outcome of the attempts it claimed, and why they failed."""

from __future__ import annotations

from dataclasses import dataclass, field

from agl._rollouts import AttemptStatus
from agl._run._agent import AgentError

__all__ = ["RunnerStats", "failure_reason"]


@dataclass
class RunnerStats:
    """What a runner did. Each claimed attempt ends in exactly one of the outcome counters."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    timed_out: int = 0
    released: int = 0
    abandoned: int = 0
    """Attempts the store ended first (timed out, unresponsive, cancelled): not reported."""
    store_errors: int = 0
    """Store calls that failed after the client's own retries (the runner kept going)."""
    gateway_flush_failures: int = 0
    """Gateway flushes that did not confirm before an attempt was reported (see
    :mod:`agl.gateway._flusher`)."""
    reasons: dict[str, int] = field(default_factory=dict)
    """Failure reasons, with how often each occurred (first line of the reason)."""

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.timed_out + self.released + self.abandoned

    def count(self, status: AttemptStatus, reason: str | None) -> None:
        """Count a reported final status; a failure's or timeout's reason too."""
        if status == AttemptStatus.SUCCEEDED:
            self.succeeded += 1
            return
        if status == AttemptStatus.RELEASED:
            self.released += 1
            return
        if status == AttemptStatus.TIMEOUT:
            self.timed_out += 1
        else:
            self.failed += 1
        key = (reason or status.value).splitlines()[0][:200]
        self.reasons[key] = self.reasons.get(key, 0) + 1


def failure_reason(exc: BaseException) -> str:
    """A one-line reason for a failed attempt: the exception's type and message."""
    if isinstance(exc, AgentError):
        return str(exc)
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__qualname__
    return f"{name}: {message}"[:500] if message else name
