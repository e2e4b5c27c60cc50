"""What other composers read of a ModelCache: its spec as compose-model-cache accepts it, and
status.resolved - the one commit, manifest and digest the fleet serves, which
compose-model-cache latches (`latched_result`, from the agent's resolve record) and the
hydrations, the deployments and the grant read (`read_resolved`)."""

from __future__ import annotations

import json
from typing import Any

from fleetcache import messages, shapes
from fleetcache.apis import specs
from fleetcache.apis.models.model_cache import ModelCache
from fleetcache.functions import quantities, read

COMPARED_MAX = 8  # commits a resolve compares with (the agent's --compare limit)
MANIFEST_LIMIT = 2000  # files latched in status.resolved.manifest (the ModelCache stays small)


def read_spec(spec: Any) -> dict:
    """The spec read through the ModelCache model (the XRD's defaults, types and CEL rules)
    and its storage size as a quantity: what compose-model-cache accepts. InputError names
    the field and the fix."""
    spec = specs.read_spec(ModelCache, spec)
    storage = spec.get("storage", {})
    if "size" in storage:
        quantities.quantity_bytes(storage["size"], "spec.storage.size")
    return spec


def read_resolved(value: Any) -> dict | None:
    """A latched status.resolved, normalized; None when absent or malformed (not an object,
    or no commit hash), so a broken status re-resolves instead of failing the call."""
    if not isinstance(value, dict) or not shapes.is_resolved_commit(value.get("commit")):
        return None
    return {
        "repo": str(value.get("repo") or ""),
        "revision": str(value.get("revision") or ""),
        "commit": value["commit"],
        "bytes": max(0, read.as_int(value.get("bytes"))),
        "files": max(0, read.as_int(value.get("files"))),
        "manifestDigest": messages.clipped(value.get("manifestDigest") or "", 128),
        "sourceDigest": messages.clipped(value.get("sourceDigest") or "", 64),
        "compared": read_compared(value.get("compared")),
        **({"manifest": manifest} if (manifest := read_manifest(value.get("manifest"))) else {}),
    }


def read_compared(value: Any) -> list[dict]:
    """What the resolved commit shares with commits the fleet serves, normalized: at most
    COMPARED_MAX rows by commit, each a 40-hex commit with non-negative counts (sharedBytes
    never above bytes); anything else is dropped, so a broken row only costs headroom."""
    rows = {}
    for row in value if isinstance(value, list) else []:
        if not isinstance(row, dict) or not shapes.is_resolved_commit(row.get("commit")):
            continue
        size = max(0, read.as_int(row.get("bytes")))
        rows[row["commit"]] = {
            "commit": row["commit"], "bytes": size,
            "files": max(0, read.as_int(row.get("files"))),
            "sharedBytes": min(size, max(0, read.as_int(row.get("sharedBytes")))),
            "missing": row.get("missing") is True,
        }
    return [rows[c] for c in sorted(rows)[:COMPARED_MAX]]


def read_manifest(value: Any) -> list[dict] | None:
    """A pinned manifest (a list sorted by path of {path, size, sha256, versionId?, etag?}),
    normalized; None when it is not one (too long, or any entry malformed), so a broken
    record or status is never fanned out."""
    if not isinstance(value, list) or not value or len(value) > MANIFEST_LIMIT:
        return None
    rows = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str) \
                or not item["path"] or not shapes.is_sha256(item.get("sha256")):
            return None
        size = item.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return None
        row = {"path": item["path"], "size": size, "sha256": item["sha256"]}
        for pin in ("versionId", "etag"):
            if isinstance(item.get(pin), str) and item[pin]:
                row[pin] = item[pin]
        rows.append(row)
    return sorted(rows, key=lambda r: r["path"])


def is_empty(resolved: dict) -> bool:
    """A resolve that selected nothing: fanning it out would make empty caches Ready."""
    return resolved["bytes"] <= 0 or resolved["files"] <= 0


def compared_of(record: dict) -> list[dict]:
    """The resolve record's `compared` (compact JSON, a string like every record value)."""
    text = record.get("compared")
    if not isinstance(text, str) or len(text) > 64 * 1024:
        return []
    try:
        return read_compared(json.loads(text))
    except ValueError:
        return []


def latched_result(record: dict, repo: str, revision: str, source_digest: str,
                   manifest: list[dict] | None = None) -> dict:
    """The agent's resolve record as status.resolved (read_resolved checks its fields); an
    S3 prefix or a volume's manifest file also latches the pinned manifest (contract §D),
    which the caller reads from the record (decisions/sources.manifest_of)."""
    result = {
        "repo": repo,
        "revision": revision,
        "commit": record.get("commit"),
        "bytes": record.get("bytes"),
        "files": record.get("files"),
        "manifestDigest": record.get("manifestDigest"),
        "sourceDigest": source_digest,
        "compared": compared_of(record),
    }
    if manifest is not None:
        result["manifest"] = manifest
    return result


def volume_bytes(resolved: dict, serving_commit: str) -> int:
    """Bytes the cluster's volume must hold: the resolved commit, plus what the commit it
    serves does not share with it (content-addressed blobs are stored once), as long as
    that commit stays on the volume for its replicas. A serving commit the resolve did
    not compare (or the hub no longer has) gives the resolved bytes alone, as before."""
    if not serving_commit or serving_commit == resolved["commit"]:
        return resolved["bytes"]
    for row in resolved.get("compared") or ():
        if row["commit"] == serving_commit and not row["missing"]:
            return resolved["bytes"] + row["bytes"] - row["sharedBytes"]
    return resolved["bytes"]
