"""APO passes agl's algorithm conformance suite, registered as ``"apo"``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import JsonValue

import agl
from agl.testing.algorithm import AlgorithmConformance


class TestAPOConformance(AlgorithmConformance):
    plugin_name = "apo"

    @pytest.fixture
    def algorithm_factory(self, rig: Any) -> Callable[[], agl.Algorithm]:
        return lambda: rig.apo(budgets={"max_rounds": 2}, search={"val_size": 2})

    @pytest.fixture
    def agent(self, rig: Any) -> Any:
        return rig.keyword_agent

    @pytest.fixture
    def resources(self, rig: Any) -> dict[str, agl.Resource]:
        return {"prompt": agl.PromptTemplate(template=rig.SEED)}

    @pytest.fixture
    def train_tasks(self, rig: Any) -> list[JsonValue]:
        return rig.tasks("alpha", "beta", "alpha", "gamma", "alpha", "beta", "delta", "alpha")

    @pytest.fixture
    def val_tasks(self, rig: Any) -> list[JsonValue]:
        return rig.tasks("alpha", "beta")
