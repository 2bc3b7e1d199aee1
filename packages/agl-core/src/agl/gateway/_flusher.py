"""The runner's side of the gateway's flush route: wait until an attempt's calls are stored.

A gateway records each call it answers and sends the record to the store on its own schedule
(within its sender's delay). When the gateway runs in another process or on another host, the
runner asks it, after the agent returned and before reporting the attempt finished, to flush
(``POST …/rollout/{rollout_id}/attempt/{attempt_id}/flush``, see :mod:`agl.gateway._paths`).
Whoever then sees the rollout finished finds every call's token ids in the store.

A flush that fails (the gateway is gone, or slower than ``timeout``) is logged and counted, and
the attempt is reported all the same: its calls may still arrive, and credit assignment counts
the calls it finds without token ids.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiohttp

__all__ = ["GatewayFlusher"]

logger = logging.getLogger(__name__)


class GatewayFlusher:
    """Calls gateways' flush routes from one event loop.

    Args:
        token: The gateways' bearer token (``AGL_GATEWAY_TOKEN``), if they need one.
        timeout: Longest wait for one flush, in seconds.
    """

    def __init__(self, token: str | None = None, timeout: float = 30.0) -> None:
        self.token = token or None
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    async def flush(self, urls: Sequence[str]) -> int:
        """Flush each URL (concurrently); return how many did not confirm (each is logged)."""
        if not urls:
            return 0
        results = await asyncio.gather(*(self._flush_one(url) for url in urls))
        return results.count(False)

    async def aclose(self) -> None:
        """Close the connections (the flusher opens new ones if used again)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _flush_one(self, url: str) -> bool:
        import aiohttp

        if self._session is None:
            headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
            self._session = aiohttp.ClientSession(
                headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout), trust_env=False
            )
        try:
            async with self._session.post(url) as response:
                if response.status == 200:
                    return True
                detail = (await response.read())[:300].decode(errors="replace")
                problem = f"answered {response.status}: {detail}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            problem = f"unreachable ({type(exc).__name__}: {exc})"
        logger.warning(
            "gateway flush %s %s; the attempt is reported, its calls may reach the store late",
            url,
            problem,
        )
        return False
