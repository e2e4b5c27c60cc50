"""A commit's manifest: its files, each with the digest its bytes must hash to, and the
manifest digest that anchors every copy (DESIGN §7: integrity is anchored at resolve).
The agent computes it from a listing; the composers from an S3 or volume manifest."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

SHA256 = "sha256"
GIT_SHA1 = "git-sha1"


@dataclass(frozen=True)
class Entry:
    """One file of the snapshot and the digest its bytes must hash to."""

    path: str
    size: int
    digest: str
    algo: str  # SHA256 for LFS files, GIT_SHA1 for the rest


def manifest_digest(entries: tuple[Entry, ...]) -> str:
    """sha256 of the sorted `path size digest` lines: the same content gives the same digest everywhere."""
    lines = sorted(f"{e.path} {e.size} {e.digest}" for e in entries)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()
