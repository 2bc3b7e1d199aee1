"""A tiny model built in code and warmed up on demonstrations: where RL on a CPU starts.

A model with random weights never calls a tool or writes a query, so RL alone has nothing to
reinforce. :func:`warm_up_tiny_model` builds agl-torch's tiny model with a tokenizer trained on
the demonstrations themselves (the shortest token sequences for the task), then fine-tunes it
on them for a few epochs: afterwards it acts as the demonstrations do, mistakes included, and
RL improves on that. The quickstart and the task examples start this way; the demonstrations
come from a scripted teacher (:class:`agl.testing.demonstrations.Demonstrations` records one in
the agent's own wire format) or from any chat data. :func:`rl_after_warm_up` sets up the short
RL run that follows: GRPO, or fine-tuning on each step's successful rollouts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from agl_torch.data import TrainOn
    from agl_torch.sft import LRSchedule

__all__ = ["Method", "rl_after_warm_up", "warm_up_tiny_model"]


def warm_up_tiny_model(
    run_dir: Path,
    conversations: Sequence[Mapping[str, Any]] | Sequence[Sequence[Mapping[str, Any]]],
    *,
    epochs: int,
    tools: Sequence[Mapping[str, Any]] | None = None,
    lr: float = 3e-3,
    batch_size: int = 32,
    seed: int = 0,
    vocab_size: int = 400,
    whole_lines: bool = False,
    words: Sequence[str] = (),
    hidden_size: int = 64,
    num_layers: int = 2,
    max_length: int = 2048,
    max_position_embeddings: int = 2048,
    device: str | None = None,
    progress: bool = True,
    console: Any = None,
    train_on: TrainOn = "all",
    lr_schedule: LRSchedule = "constant",
) -> Path:
    """Build the tiny model for ``conversations``, fine-tune it on them, save it; return its
    folder (``run_dir/warm-model``; the untrained one is ``run_dir/base-model``).

    Args:
        conversations: Lists of chat messages, or dicts with ``messages`` (and ``tools``).
        epochs: Passes over the conversations.
        tools: Tools for the conversations that name none of their own.
        lr / batch_size / seed: The fine-tuning's (``seed`` also seeds the weights).
        vocab_size / whole_lines / words: The tokenizer's (see
            :func:`agl_torch.tiny.build_tokenizer`; it is trained on the conversations).
        hidden_size / num_layers: The model's shape.
        max_length: Longer conversations are dropped.
        max_position_embeddings: The longest sequence the model takes.
        device: Where the fine-tuning runs (default: CUDA when present).
        progress: Show a progress bar (on ``console``, a ``rich`` console; stderr by default).
        train_on: ``"all"`` assistant turns, the ``"last"`` one only (for conversations
            recorded per request, :func:`agl.testing.demonstrations.record_demonstrations`,
            whose earlier assistant turns are other agents' replies or already recorded), or
            the whole ``"text"``: the prompts too, which teaches the model built from scratch
            to read them (:data:`agl_torch.data.TrainOn`).
        lr_schedule: ``"constant"``, or ``"linear"`` decay to 0 over the fine-tuning, which
            settles the model saved (:data:`agl_torch.sft.LRSchedule`).
    """
    from rich.console import Console
    from rich.progress import Progress

    from agl_torch.learner import Learner
    from agl_torch.policy import load_policy
    from agl_torch.settings import LearnerSettings
    from agl_torch.sft import train_on_messages
    from agl_torch.tiny import build_tiny_model, build_tokenizer

    console = console or Console(stderr=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    rendering = build_tokenizer()
    corpus = []
    for conversation in conversations:
        messages, own_tools = _parts(conversation)
        corpus.append(
            rendering.apply_chat_template(messages, tools=own_tools or tools, tokenize=False)
        )
    base = build_tiny_model(
        run_dir / "base-model",
        corpus=corpus,
        vocab_size=vocab_size,
        whole_lines=whole_lines,
        words=words,
        hidden_size=hidden_size,
        num_layers=num_layers,
        max_position_embeddings=max_position_embeddings,
        seed=seed,
    )
    model, tokenizer = load_policy(base, device=device)
    learner = Learner(
        model, tokenizer, LearnerSettings(lr=lr, max_grad_norm=None, seed=seed), device=device
    )
    with Progress(console=console, disable=not progress, transient=False) as bar:
        task = bar.add_task("SFT warm-up", total=None)

        def on_step(step: int, total: int, metrics: dict[str, float]) -> None:
            bar.update(
                task, completed=step, total=total, description=f"SFT loss {metrics['loss']:.3f}"
            )

        history = train_on_messages(
            learner,
            conversations,
            epochs=epochs,
            batch_size=batch_size,
            tools=tools,
            max_length=max_length,
            seed=seed,
            on_step=on_step,
            train_on=train_on,
            lr_schedule=lr_schedule,
        )
    if history:
        dropped = {k: int(v) for k, v in history[-1].items() if k.startswith("dropped/") and v}
        console.print(
            f"SFT warm-up on {int(history[-1]['examples'])} conversations, {epochs} epochs: "
            f"loss {history[0]['loss']:.3f} -> {history[-1]['loss']:.3f}"
            + (f" (dropped {dropped})" if dropped else "")
        )
    warm = run_dir / "warm-model"
    learner.save_pretrained(warm)
    return warm


Method = Literal["grpo", "successes"]
"""How :func:`rl_after_warm_up` updates the model: LightningRL's policy gradient (GRPO by
default), or fine-tuning on each step's successful rollouts."""


def rl_after_warm_up(
    model: str | Path,
    *,
    steps: int,
    tasks_per_step: int,
    n_samples: int,
    lr: float,
    max_tokens: int,
    seed: int = 0,
    method: Method = "grpo",
    transitions: Any = None,
    algorithm: type[Any] | None = None,
    min_reward: float = 1.0,
) -> Any:
    """A short RL run from a warmed-up model: ``steps`` steps of ``tasks_per_step`` tasks x
    ``n_samples`` samples, one update per step at ``lr``, replies up to ``max_tokens``, no
    checkpoints (the run is minutes long). The trainer's concurrency should be
    ``tasks_per_step * n_samples``, every rollout of a step in flight at once.

    ``method="grpo"``: LightningRL on agl-torch (:class:`~agl_torch.rl.LightningRLTorch`);
    ``transitions`` replaces its default :class:`agl.TransitionBuilder` (GRPO, the final
    reward to every call), ``algorithm`` the class with a subclass of it (to look at each
    step's batch, say).

    ``method="successes"``: each step fine-tunes (:class:`~agl_torch.sft.SFTTorch`) on every
    rollout of the step rewarded ``min_reward`` or more, and on nothing else (rejection-
    sampling fine-tuning). Where the warm model succeeds on a few samples in ten, GRPO's
    advantages are mostly negative: they push probability off the failed answers and onto
    whatever else the model half-believes; this moves it only toward what worked.

    Raises:
        InvalidInputError: ``transitions`` or ``algorithm`` with ``method="successes"``, or an
            unknown ``method``.
    """
    import agl
    from agl import InvalidInputError

    run = _short_run(steps, tasks_per_step, n_samples, lr, max_tokens, seed)
    if method == "grpo":
        from agl_torch.rl import LightningRLTorch

        return (algorithm or LightningRLTorch)(
            model, transitions=transitions or agl.TransitionBuilder(), **run
        )
    if method != "successes":
        raise InvalidInputError(
            f"method must be 'grpo' or 'successes', got {method!r}", field="method", value=method
        )
    if transitions is not None or algorithm is not None:
        raise InvalidInputError(
            "transitions and algorithm apply to method='grpo' only", field="method", value=method
        )
    from agl_torch.sft import SFTTorch

    return SFTTorch(model, top_k=n_samples, min_reward=min_reward, **run)


def _short_run(
    steps: int, tasks_per_step: int, n_samples: int, lr: float, max_tokens: int, seed: int
) -> dict[str, Any]:
    import agl
    from agl_torch.settings import CheckpointSettings, LearnerSettings

    return {
        "loop": agl.LoopSettings(n_samples=n_samples, batch_size=tasks_per_step, max_steps=steps),
        "learner": LearnerSettings(lr=lr, seed=seed),
        "sampling": agl.SamplingSettings(max_tokens=max_tokens),
        "checkpoints": CheckpointSettings(every=0),
    }


def _parts(conversation: Any) -> tuple[list[Any], Any]:
    if isinstance(conversation, Mapping):
        return list(conversation["messages"]), conversation.get("tools")
    return list(conversation), None
