"""The task: travellers' questions about tomorrow's weather in a small fictional set of towns.

:func:`forecast` is what the forecaster's tool reads, :func:`questions` the tasks (12 to train
on, 4 to validate with), and :func:`reward` whether an answer states the forecast's value.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["FIELDS", "forecast", "questions", "reward"]

_FORECASTS: dict[str, dict[str, Any]] = {
    "Amberley": {"high_c": 14, "rain_mm": 6, "wind_kmh": 31},
    "Brackenford": {"high_c": 22, "rain_mm": 0, "wind_kmh": 9},
    "Corriemoor": {"high_c": 9, "rain_mm": 12, "wind_kmh": 44},
    "Dunhollow": {"high_c": 17, "rain_mm": 2, "wind_kmh": 18},
    "Eastwick Cross": {"high_c": 26, "rain_mm": 0, "wind_kmh": 12},
    "Fernlea": {"high_c": 11, "rain_mm": 9, "wind_kmh": 27},
    "Glenmarrow": {"high_c": 6, "rain_mm": 15, "wind_kmh": 52},
    "Harrowgate Vale": {"high_c": 19, "rain_mm": 1, "wind_kmh": 15},
}
FIELDS = {"high_c": "high in degrees Celsius", "rain_mm": "rain in millimetres",
          "wind_kmh": "wind in km/h"}  # fmt: skip
_ASKED = {
    "high_c": "How warm will it get in {town} tomorrow?",
    "rain_mm": "How much rain is expected in {town} tomorrow?",
    "wind_kmh": "How strong will the wind be in {town} tomorrow?",
}


def forecast(town: str) -> dict[str, Any] | None:
    """Tomorrow's forecast for ``town`` (any case, extra words allowed), or None."""
    words = set(re.findall(r"[a-z]+", town.lower()))
    for name, facts in _FORECASTS.items():
        if set(name.lower().split()) <= words:
            return {"town": name, **{FIELDS[k]: v for k, v in facts.items()}}
    return None


def questions(split: str = "all") -> list[dict[str, Any]]:
    """The questions, each with its town, field and answer; ``split``: train, val or all."""
    out = []
    for i, (town, field) in enumerate(
        (town, field) for field in ("high_c", "rain_mm") for town in _FORECASTS
    ):
        out.append(
            {
                "id": f"w{i + 1}",
                "question": _ASKED[field].format(town=town),
                "town": town,
                "field": field,
                "answer": str(_FORECASTS[town][field]),
            }
        )
    if split == "train":
        return out[:12]
    if split == "val":
        return out[12:]
    return out


def reward(answer: str, gold: str) -> float:
    """1.0 if ``answer`` states the number ``gold`` (as a whole number), else 0.0."""
    return 1.0 if gold in re.findall(r"\d+", answer) else 0.0
