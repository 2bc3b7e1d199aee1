"""APO's settings objects: the optimizer model, the search, and the budgets.

Each is a frozen dataclass checked when built (a bad value names its field), and
:class:`~agl_apo.APO` takes them whole, or as mappings of their fields::

    APO(
        optimizer=OptimizerSettings(base_url="http://localhost:8000/v1", model="qwen3-8b"),
        search=SearchSettings(beam_width=2, val_size=32),
        budgets=Budgets(max_rounds=4, max_optimizer_tokens=200_000),
    )
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agl import InvalidInputError, check_at_least

__all__ = ["Budgets", "OptimizerSettings", "SearchSettings"]


@dataclass(frozen=True)
class OptimizerSettings:
    """The optimizer model APO asks for critiques, rewrites and merges.

    Attributes:
        base_url: Its OpenAI-compatible endpoint (``.../v1``). None: ``$AGL_APO_BASE_URL``,
            else ``$OPENAI_BASE_URL``, else OpenAI's API
            (:func:`~agl_apo.optimizer.resolve_endpoint`).
        api_key: Its key. None: ``$<api_key_env>``, else none (fine for local servers).
        api_key_env: The environment variable holding the key.
        model: The optimizer model. None: ``$AGL_APO_MODEL``, else ``gpt-4.1-mini``.
        critique_model / rewrite_model / merge_model: A different model for one kind of call.
        temperature: Sampling temperature of optimizer calls (None: the server's default).
        timeout: Seconds an optimizer request may take.
        max_retries: Retries on timeouts, rate limits and server errors (openai's backoff).
        max_completion_tokens: The longest optimizer reply.
        concurrency: Optimizer calls in flight at once.
    """

    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str = "OPENAI_API_KEY"
    model: str | None = None
    critique_model: str | None = None
    rewrite_model: str | None = None
    merge_model: str | None = None
    temperature: float | None = None
    timeout: float = 60.0
    max_retries: int = 2
    max_completion_tokens: int = 2048
    concurrency: int = 4

    def __post_init__(self) -> None:
        owner = "OptimizerSettings"
        check_at_least(owner, "temperature", self.temperature, 0, optional=True)
        check_at_least(owner, "timeout", self.timeout, 0, above=True)
        check_at_least(owner, "max_retries", self.max_retries, 0, integer=True)
        check_at_least(owner, "max_completion_tokens", self.max_completion_tokens, 1, integer=True)
        check_at_least(owner, "concurrency", self.concurrency, 1, integer=True)
        for name in ("base_url", "model", "critique_model", "rewrite_model", "merge_model"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidInputError(
                    f"{owner}.{name} must be a non-empty string or None, got {value!r}",
                    field=name,
                    value=value,
                )


@dataclass(frozen=True)
class SearchSettings:
    """How the beam search over prompts goes.

    Attributes:
        beam_width: Candidates kept (by mean score) and expanded each round.
        branch_factor: Rewrites asked for per critique.
        n_examples: Worst runs shown in a critique request.
        max_example_chars: Characters one shown run may take.
        val_size: Validation tasks every candidate is scored on (the first ones; the
            training tasks when there are no validation tasks).
        val_samples: Rollouts per validation task and candidate (scores are their mean).
        pareto: Keep Pareto-front candidates (best on some validation task) in the beam and
            merge complementary ones.
        front_size: Front members kept beside the beam (None: ``beam_width``).
        merges_per_round: Merges asked for per round (when two front members complement each
            other).
    """

    beam_width: int = 4
    branch_factor: int = 2
    n_examples: int = 4
    max_example_chars: int = 2000
    val_size: int = 16
    val_samples: int = 1
    pareto: bool = True
    front_size: int | None = None
    merges_per_round: int = 1

    def __post_init__(self) -> None:
        owner = "SearchSettings"
        for name, low in (
            ("beam_width", 1),
            ("branch_factor", 1),
            ("n_examples", 1),
            ("max_example_chars", 100),
            ("val_size", 1),
            ("val_samples", 1),
            ("merges_per_round", 0),
        ):
            check_at_least(owner, name, getattr(self, name), low, integer=True)
        check_at_least(owner, "front_size", self.front_size, 0, integer=True, optional=True)

    @property
    def front(self) -> int:
        """Front members kept beside the beam (``front_size``, else ``beam_width``)."""
        return self.beam_width if self.front_size is None else self.front_size


@dataclass(frozen=True)
class Budgets:
    """When the search stops: rounds, rollouts, optimizer tokens, no progress.

    Attributes:
        max_rounds: Optimization rounds at most (one per training step).
        max_rollouts: Rollouts the search may run to score candidates (None: no limit). The
            loop's own training and validation rollouts are not counted: they are set by the
            loop's ``batch_size``, ``n_samples`` and number of steps.
        max_optimizer_tokens: Tokens the optimizer calls may use in all (as the server reports
            them; a call is made only if its worst case fits). None: no limit.
        patience: Stop after this many rounds without the best score improving by more than
            ``min_improvement`` (None: never).
        min_improvement: The improvement that counts.
    """

    max_rounds: int = 5
    max_rollouts: int | None = None
    max_optimizer_tokens: int | None = None
    patience: int | None = 2
    min_improvement: float = 0.0

    def __post_init__(self) -> None:
        owner = "Budgets"
        check_at_least(owner, "max_rounds", self.max_rounds, 1, integer=True)
        check_at_least(owner, "max_rollouts", self.max_rollouts, 1, integer=True, optional=True)
        check_at_least(
            owner, "max_optimizer_tokens", self.max_optimizer_tokens, 1, integer=True, optional=True
        )
        check_at_least(owner, "patience", self.patience, 1, integer=True, optional=True)
        check_at_least(owner, "min_improvement", self.min_improvement, 0)
