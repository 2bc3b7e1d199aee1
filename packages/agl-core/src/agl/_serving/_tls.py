"""One TLS client context per process, verifying servers against certifi's roots.

Building a context parses the whole CA bundle: 25-60 ms of CPU on a small machine. httpx
builds one for every client it makes (https://github.com/encode/httpx/issues/3627), which an
agent that opens a client per rollout pays on every rollout, however local its model. A
client-side context holds no per-connection state and is safe to share between clients and
threads, so agl builds it once.
"""

from __future__ import annotations

import functools
import ssl

__all__ = ["tls_context"]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's shared client context (certifi's roots, Python's secure defaults)."""
    import certifi

    return ssl.create_default_context(cafile=certifi.where())
