"""The ``agl`` command line: one module per command group, the root app in :mod:`agl.cli.app`."""

from agl.cli.app import app, main

__all__ = ["app", "main"]
