"""A real disk that fills up, for tests of what a store does when it does.

    with small_disk(tmp_path / "disk") as disk:       # a 16 MiB tmpfs (root only)
        store = SQLiteStore(disk / "agl.db")
        filler = fill(disk)                            # not one byte left
        ...                                            # writes fail: the disk is full
        filler.unlink()                                # room again

Mounting needs root (or CAP_SYS_ADMIN); where it is not permitted the test is skipped, saying
why. For PostgreSQL, whose server runs as another user in a mount namespace of its own, see
:attr:`agl.testing.postgres.PostgresServer.small_disk_here`.
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["fill", "small_disk"]


@contextlib.contextmanager
def small_disk(folder: Path, size_mb: int = 16) -> Iterator[Path]:
    """Mount a ``size_mb`` MiB tmpfs on ``folder`` (created if missing); unmount it at the end.

    Skips the calling test where mounting is not permitted.
    """
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small disk here (needs root): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        # lazy: a store a failed test left open must not keep the mount (and the test) alive
        subprocess.run(["umount", "--lazy", str(folder)], capture_output=True, check=False)


def fill(folder: Path) -> Path:
    """Fill the disk holding ``folder`` with one file, to the last byte; return the file.

    Deleting the file gives the space back.
    """
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as out:
        chunk = b"\0" * (1 << 16)
        while True:
            try:
                out.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    return filler
