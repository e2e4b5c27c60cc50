"""Writing and confining files on a volume: atomic replacement, fsync of a directory, and
whether a path, symlinks resolved, stays under a root.

Every record the agent writes (lease, progress, manifests, refs, markers, labels) becomes
visible only by a rename of a complete temp file next to it, and every path built from
input is checked to resolve where it was meant to before anything is written or read there.
"""

from __future__ import annotations

import os
from pathlib import Path

TMP_MARK = ".fleetcache-tmp-"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tmp_name(final: Path) -> Path:
    return final.with_name(f".{final.name}{TMP_MARK}{os.getpid()}")


def write_atomic(final: Path, data: bytes, durable: bool = True) -> None:
    """Temp name in the same directory, rename; with `durable`, fsync the file and the directory.

    Records rewritten every few seconds (lease, progress) skip the fsyncs: a reader must
    never see them torn, but losing the latest one to a power cut costs nothing.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(final)
    with open(tmp, "wb") as f:
        f.write(data)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, final)
    if durable:
        fsync_dir(final.parent)


def resolves_within(root: Path, path: Path, below: bool = False) -> bool:
    """True when `path`, every symlink resolved, is below `root`, or (unless `below`) `root` itself."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return (real == real_root and not below) or real.startswith(real_root + os.sep)


def is_inside(root: Path, path: Path) -> bool:
    """True when `path`'s directory, symlinks resolved, is `root` or below it (the name itself may be a link)."""
    return resolves_within(root, path.parent)
