"""The ``agl`` command line: one module per command group, the root app in :mod:`agl.cli._app`."""

from agl.cli._app import app, main

__all__ = ["app", "main"]
