"""Where an ``"sft-verl"`` run stands, saved after every step so a stopped run can resume.

Two files in the algorithm's folder (``<run_dir>/sft-verl/``):

- ``pending.jsonl``: the transitions kept since the last round (one JSON object each), not yet
  trained on;
- ``state.json``: the last step done, whether the conversations were trained on, and the
  Hugging Face folder of the last round. Written last, so it never names a step whose pending
  transitions are not on disk.

Both are replaced whole (written to a temporary file, then renamed): a run stopped at any
moment leaves either the old state or the new one.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agl import InvalidInputError
from agl.lightning import Transition

__all__ = ["SFTState"]

STATE_FILE = "state.json"
PENDING_FILE = "pending.jsonl"


@dataclass
class SFTState:
    """What a resumed ``"sft-verl"`` run needs.

    Attributes:
        step: The last step completed (0: none; the conversations may still have trained).
        messages_trained: Whether the round on the conversations is done.
        trained_model: The Hugging Face folder of the last round (None before one).
        pending: Transitions kept since the last round.
    """

    step: int = 0
    messages_trained: bool = False
    trained_model: Path | None = None
    pending: list[Transition] = field(default_factory=list)

    def save(self, folder: Path) -> None:
        """Write the state into ``folder`` (pending transitions first, ``state.json`` last)."""
        folder.mkdir(parents=True, exist_ok=True)
        lines = "".join(json.dumps(asdict(t)) + "\n" for t in self.pending)
        _replace(folder / PENDING_FILE, lines)
        state = {
            "step": self.step,
            "messages_trained": self.messages_trained,
            "trained_model": None if self.trained_model is None else str(self.trained_model),
            "pending": len(self.pending),
        }
        _replace(folder / STATE_FILE, json.dumps(state, indent=1) + "\n")

    @classmethod
    def load(cls, folder: Path) -> SFTState | None:
        """Read the state saved in ``folder``; None when there is none.

        Raises:
            InvalidInputError: the files are unreadable, disagree, or name a model folder that
                no longer exists.
        """
        path = folder / STATE_FILE
        if not path.exists():
            return None
        try:
            state: dict[str, Any] = json.loads(path.read_text())
            lines = (folder / PENDING_FILE).read_text().splitlines()
            pending = [Transition(**json.loads(line)) for line in lines if line.strip()]
            step, messages_trained = int(state["step"]), bool(state["messages_trained"])
            model, count = state["trained_model"], int(state["pending"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidInputError(
                f"cannot resume from {str(folder)!r}: its state is unreadable ({exc})",
                field="resume",
            ) from None
        if len(pending) != count:
            raise InvalidInputError(
                f"cannot resume from {str(folder)!r}: {STATE_FILE} counts {count} pending "
                f"transitions, {PENDING_FILE} holds {len(pending)}",
                field="resume",
            )
        trained = None if model is None else Path(model)
        if trained is not None and not trained.is_dir():
            raise InvalidInputError(
                f"cannot resume from {str(folder)!r}: the last round's model {model!r} is gone",
                field="resume",
            )
        return cls(step, messages_trained, trained, pending)


def _replace(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)
