"""ADK's LiteLLM reads its model price list from this machine, never from the network."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
