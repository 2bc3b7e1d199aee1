"""The JSON response every agl OpenAI-compatible server answers with."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse

__all__ = ["WireJSONResponse"]


class WireJSONResponse(JSONResponse):
    """JSON with non-ASCII characters escaped, as ``json.dumps`` writes it by default.

    A request's JSON may escape a lone UTF-16 surrogate (``"\\ud800"``), which Python keeps in
    the parsed string and no UTF-8 encoder accepts. Echoed back (a model name, a prompt), it
    goes out escaped the same way instead of failing the response with a 500.
    """

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")
