"""`select`: the engine pod's init step, pointing `cache` at the node copy if it is published, else at the volume.

Stat-only (no hashing: the node copy was verified byte by byte when it was warmed, and the
verification record guards it from then on): the node copy counts only when its
`node-ready.json` names the commit and digest, its manifest for that digest exists, and its
snapshot directory exists, all resolving inside --node. Anything else (no copy yet, an older
commit, a half-deleted copy, a symlink pointing out of the node root, a forged label that sent
the pod here) falls back to the cluster volume, which is always mounted: a stale label costs
speed, never correctness (design/node-tier.md §3.6). Order per replica: Node, then Volume.
"""

from __future__ import annotations

import os
from pathlib import Path

from fleetcache.agent.disk import resolves_within
from fleetcache.agent.layout import Layout
from fleetcache.agent.node_plan import marker_matches
from fleetcache.agent.node_warm import READY_FILE, read_json, state_file
from fleetcache.volume import HUB_DIR, repo_folder


def node_copy_problem(node: Path, repo: str, commit: str, digest: str) -> str | None:
    """None when the node copy of `commit` is published with `digest`; else the reason it is not used."""
    marker = state_file(node, READY_FILE)
    snapshot = node / HUB_DIR / repo_folder(repo) / "snapshots" / commit
    manifest = Layout(node, repo).manifest_path(commit, digest)
    if not all(resolves_within(node, p) for p in (marker, snapshot, manifest)):
        return "NodeCopyOutsideRoot"
    content = read_json(marker)
    if content is None:
        return "NodeCopyMissing"
    if not marker_matches(content, commit, digest):
        return "NodeCopyStale"
    if not (snapshot.is_dir() and manifest.is_file()):
        return "NodeCopyIncomplete"
    return None


def select(node: Path, volume: Path, repo: str, commit: str, digest: str, link: Path) -> dict:
    """Point `link` (atomically: a temp link renamed over it) at the chosen hub root; say which and why."""
    problem = node_copy_problem(node, repo, commit, digest)
    target = (node if problem is None else volume) / HUB_DIR
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{link.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    os.symlink(os.path.abspath(target), tmp)
    os.replace(tmp, link)
    if problem is None:
        return {"delivery": "node", "reason": "NodeCopyReady"}
    return {"delivery": "volume", "reason": problem}
