"""``python -m agl``: the same as the ``agl`` command."""

from agl.cli import main

main()
