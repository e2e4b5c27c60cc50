"""Planning for the node tier, without disk or API: what to copy, what to create or delete, which labels.

Pure functions of what the callers read (the volume's manifests, the node disk's state, the
keep-list, the node's labels, the clock), so the refusal rules and the arithmetic are tested
without a volume, a node or an API server (design/node-tier.md §3.2, §3.5).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from fleetcache import reasons
from fleetcache.agent.errors import AgentError, ellipsized
from fleetcache.agent.plan import DiskState, FetchPlan, plan_fetch, written_entry
from fleetcache.manifest import Entry, manifest_digest
from fleetcache.shapes import is_dns_label

WHOLE_FILE = 1 << 62  # one part per blob: the node copy streams each file once, front to back
MAX_MESSAGE = 120  # a node record stays ~200 bytes: 2,000 nodes fit one ConfigMap
LABEL_PREFIX = "node-cache.fleetcache.dev/"
OWNER_UID = 65532  # the warmer's uid (restricted pods); the prepare container chowns to it
_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


class VolumeNotReady(Exception):
    """The cluster volume holds no completed fetch of the commit yet: wait, it is not a failure."""


def clip(message: str | None) -> str | None:
    return None if message is None else ellipsized(message, MAX_MESSAGE)


# -- node-warm ---------------------------------------------------------------------------------

def volume_entries(manifests: list[dict], repo: str, commit: str, digest: str) -> tuple[str, tuple[Entry, ...]]:
    """(layout, entries) of the volume's manifest for `commit` whose recomputed digest is `digest`.

    The digest is recomputed from the entries, never taken from the file's name or field: the
    integrity anchor is the digest resolve pinned, so a manifest edited on the volume is refused."""
    if not manifests:
        raise VolumeNotReady(f"the cluster volume holds no completed fetch of {repo}@{commit} yet")
    found = []
    for manifest in manifests:
        files = manifest.get("files") if isinstance(manifest, dict) else None
        if not isinstance(files, list) or manifest.get("commit") != commit:
            raise AgentError(reasons.InvalidSource, f"the volume's manifest of {repo}@{commit} is malformed")
        entries = tuple(sorted((written_entry(f) for f in files), key=lambda e: e.path))
        recomputed = manifest_digest(entries)
        if recomputed == digest:
            return manifest.get("layout", "hf-cache"), entries
        found.append(recomputed[:12])
    raise AgentError(reasons.DigestMismatch, f"the cluster volume's manifest of {commit[:12]} recomputes to "
                                       f"{', '.join(found)}…, not --manifest-digest {digest[:12]}…")


def plan_node_copy(entries: tuple[Entry, ...], disk: DiskState) -> FetchPlan:
    """What to copy: each blob not yet verified on the node, resuming the prefix a killed copy wrote."""
    return plan_fetch(entries, lambda e: e.digest, disk, WHOLE_FILE)


def capacity_problem(free: int, needed: int) -> str | None:
    if needed <= free:
        return None
    return f"{needed} bytes still to copy but {free} free on the node cache"


def ready_marker(repo: str, commit: str, digest: str) -> dict:
    return {"repo": repo, "commit": commit, "manifestDigest": digest}


def marker_matches(marker: object, commit: str, digest: str | None) -> bool:
    return (isinstance(marker, dict) and marker.get("commit") == commit
            and (digest is None or marker.get("manifestDigest") == digest))


def stale_records(keys, nodes_with_a_warmer: set[str]) -> list[str]:
    """Record keys of nodes that no longer run a warmer pod (deleted, or out of the pool)."""
    return sorted(key for key in keys if key not in nodes_with_a_warmer)


# -- node-prepare --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Kept:
    """One keep-list row: `since` None while the cache is placed, else when it was removed."""

    since: datetime | None
    after_removal: timedelta


def parse_duration(value: object) -> timedelta:
    """Go-style `1h`, `30m`, `90s`, `1h30m` (what spec.retention.afterRemoval holds)."""
    match = _DURATION.fullmatch(value) if isinstance(value, str) and value else None
    if not match:
        raise ValueError(f"afterRemoval {value!r} is not a duration like 1h or 30m")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


def parse_keep(data: object) -> dict[tuple[str, str], Kept]:
    """keep.json: {"<ns>/<cache>": {"since": null | RFC3339, "afterRemoval": "1h"}}; a row with a
    name that is not two DNS labels, or a bad time, is refused as a whole (ValueError): acting on
    half a keep-list could delete a kept cache."""
    if not isinstance(data, dict):
        raise ValueError("keep.json is not a JSON object")
    kept = {}
    for key, row in data.items():
        ns, _, cache = key.partition("/")
        if not (is_dns_label(ns) and is_dns_label(cache)) or not isinstance(row, dict):
            raise ValueError(f"keep.json row {key!r} is not <namespace>/<cache> with an object")
        since = row.get("since")
        try:
            when = None if since is None else datetime.fromisoformat(since.replace("Z", "+00:00"))
        except (AttributeError, ValueError):
            raise ValueError(f"keep.json row {key!r}: since {since!r} is not an RFC3339 time") from None
        if when is not None and when.tzinfo is None:
            raise ValueError(f"keep.json row {key!r}: since {since!r} has no time zone")
        kept[(ns, cache)] = Kept(when, parse_duration(row.get("afterRemoval", "1h")))
    return kept


@dataclass(frozen=True)
class PreparePlan:
    create: tuple[tuple[str, str], ...]  # placed caches whose directory is missing
    delete: tuple[tuple[str, str], ...]  # cache directories not kept, or removed past afterRemoval
    delete_namespaces: tuple[str, ...]  # namespace directories left with no kept cache


def plan_prepare(kept: dict[tuple[str, str], Kept], present: dict[str, set[str]], now: datetime) -> PreparePlan:
    """`present`: namespace dir -> cache dirs on the node (DNS-label names only: anything else under
    the root, such as an ext4 lost+found, is never the agent's to delete)."""
    placed = {key for key, row in kept.items() if row.since is None}
    expired = {key for key, row in kept.items() if row.since is not None and now - row.since >= row.after_removal}
    on_disk = {(ns, cache) for ns, caches in present.items() for cache in caches}
    delete = {key for key in on_disk if key not in kept or key in expired}
    remaining = {ns for ns, _ in on_disk - delete} | {ns for ns, _ in placed}
    return PreparePlan(
        create=tuple(sorted(placed - on_disk)),
        delete=tuple(sorted(delete)),
        delete_namespaces=tuple(sorted(ns for ns in present if ns not in remaining)),
    )


# -- node-label ----------------------------------------------------------------------------------

def label_key(namespace: str, cache: str) -> str:
    """node-cache.fleetcache.dev/<first 16 hex of sha256("<ns>/<cache>")> (contract §B)."""
    return LABEL_PREFIX + hashlib.sha256(f"{namespace}/{cache}".encode()).hexdigest()[:16]


def label_patch(current: dict[str, str], ready: dict[tuple[str, str], str]) -> dict[str, str | None]:
    """Labels to set (value) or remove (None): only keys under the prefix are ever touched."""
    want = {label_key(ns, cache): commit for (ns, cache), commit in ready.items()}
    patch: dict[str, str | None] = {k: v for k, v in want.items() if current.get(k) != v}
    patch.update({k: None for k in current if k.startswith(LABEL_PREFIX) and k not in want})
    return patch
