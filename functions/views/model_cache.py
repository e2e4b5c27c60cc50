"""What other composers read of a ModelCache: its spec as compose-model-cache accepts it
(spec.rollout typed: `rollout_of`), status.resolved - the one commit, manifest and digest the
fleet serves, which compose-model-cache latches (`latched_result`, from the agent's resolve
record) and the hydrations, the deployments and the grant read (`read_resolved`) - and
status.rollout, the waves' progress (`RolloutStatus`, decided in decisions/waves.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fleetcache import messages, reasons, shapes
from fleetcache.apis import specs
from fleetcache.apis.models.model_cache import ModelCache
from fleetcache.functions import quantities, read, times

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
    rollout = spec["rollout"]
    if "restartedAt" in rollout:  # the model reads a date-time; the spec stays plain JSON
        rollout["restartedAt"] = times.format_time(rollout["restartedAt"])
    return spec


@dataclass(frozen=True)
class WaveSpec:
    """One spec.rollout.waves[] entry: its clusters by exactly one of names, a selector over
    the targets' labels, or a percentage of the targets no earlier wave took."""

    name: str
    cluster_names: frozenset[str] | None
    cluster_selector: dict | None
    percent: int | None
    pause: bool


@dataclass(frozen=True)
class RolloutSpec:
    """spec.rollout as read_spec accepted it, durations in seconds."""

    max_concurrent: int
    waves: tuple[WaveSpec, ...]  # none: every target at once, nothing gated
    bake_seconds: float
    deadline_seconds: float  # progressDeadline
    rollback: bool  # onFailure Rollback (else Halt)
    promote: str  # "" when unset
    restarted_at: str  # RFC 3339 as read_spec wrote it; "" when unset


def rollout_of(spec: dict) -> RolloutSpec:
    """The typed spec.rollout of a spec read_spec accepted (defaults filled in, checked)."""
    rollout = spec["rollout"]
    return RolloutSpec(
        max_concurrent=rollout["maxConcurrent"],
        waves=tuple(WaveSpec(name=wave["name"],
                             cluster_names=frozenset(wave["clusterNames"]) if "clusterNames" in wave else None,
                             cluster_selector=wave.get("clusterSelector"),
                             percent=wave.get("percent"), pause=wave["pause"])
                    for wave in rollout.get("waves", ())),
        bake_seconds=times.duration(rollout["bakeTime"]).total_seconds(),
        deadline_seconds=times.duration(rollout["progressDeadline"]).total_seconds(),
        rollback=rollout["onFailure"] == "Rollback",
        promote=rollout.get("promote", ""),
        restarted_at=rollout.get("restartedAt", ""),
    )


# status.rollout.phase. RolledBack and Complete are the registry's reasons of the same name.
PROGRESSING, PAUSED, HALTED = "Progressing", "Paused", "Halted"
ROLLED_BACK, COMPLETE = reasons.RolledBack, reasons.Complete
ROLLOUT_PHASES = (PROGRESSING, PAUSED, HALTED, ROLLED_BACK, COMPLETE)
STATUS_WAVES_MAX = 21  # spec.rollout.waves' 20 and the implicit last one


@dataclass(frozen=True)
class WaveCount:
    """One status.rollout.waves[] row: a wave's clusters, and how many are Ready or failed on
    the new commit."""

    name: str
    clusters: int
    ready: int
    failed: int

    @classmethod
    def of(cls, row: dict) -> WaveCount:
        return cls(name=messages.clipped(row.get("name") or "", shapes.DNS_LABEL_MAX),
                   clusters=max(0, read.as_int(row.get("clusters"))),
                   ready=max(0, read.as_int(row.get("ready"))),
                   failed=max(0, read.as_int(row.get("failed"))))

    def as_status(self) -> dict:
        return {"name": self.name, "clusters": self.clusters, "ready": self.ready, "failed": self.failed}


@dataclass(frozen=True)
class RolloutStatus:
    """status.rollout: written by compose-model-cache from decisions/waves.py and read back by
    it on the next call (what it latched: the rollout's content, its start, the wave reached,
    the restart and promote it has seen, and why it stopped)."""

    commit: str
    manifest_digest: str
    previous_commit: str
    previous_manifest_digest: str  # with previous_bytes, the content a Rollback composes; "" unknown
    previous_bytes: int
    phase: str
    wave: str
    waves: tuple[WaveCount, ...]
    started: float  # seconds since the epoch
    resumed: float | None  # when restartedAt last resumed it
    completed: float | None  # when the last wave was done
    restarted_at: str
    stale_promote: str
    summary: str
    message: str

    @classmethod
    def of(cls, value: Any) -> RolloutStatus | None:
        """A latched status.rollout, normalized; None when it is not one (no resolved commit,
        an unknown phase or no start), so a broken status starts the rollout afresh."""
        if not isinstance(value, dict) or not shapes.is_resolved_commit(value.get("commit")) \
                or value.get("phase") not in ROLLOUT_PHASES:
            return None
        started = times.seconds_of(value.get("startedTime"))
        if started is None:
            return None
        previous = value.get("previousCommit")
        rows = value.get("waves")
        return cls(
            commit=value["commit"],
            manifest_digest=messages.clipped(value.get("manifestDigest") or "", 128),
            previous_commit=previous if shapes.is_resolved_commit(previous) else "",
            previous_manifest_digest=messages.clipped(value.get("previousManifestDigest") or "", 128),
            previous_bytes=max(0, read.as_int(value.get("previousBytes"))),
            phase=value["phase"],
            wave=messages.clipped(value.get("wave") or "", shapes.DNS_LABEL_MAX),
            waves=tuple(WaveCount.of(row) for row in (rows if isinstance(rows, list) else [])[:STATUS_WAVES_MAX]
                        if isinstance(row, dict)),
            started=started,
            resumed=times.seconds_of(value.get("resumedTime")),
            completed=times.seconds_of(value.get("completedTime")),
            restarted_at=messages.clipped(value.get("restartedAt") or "", 64),
            stale_promote=messages.clipped(value.get("stalePromote") or "", shapes.DNS_LABEL_MAX),
            summary=messages.clipped(value.get("summary") or ""),
            message=messages.clipped(value.get("message") or "", messages.MESSAGE_LIMIT),
        )

    def as_status(self) -> dict:
        return {
            "commit": self.commit, "manifestDigest": self.manifest_digest,
            "previousCommit": self.previous_commit, "previousManifestDigest": self.previous_manifest_digest,
            "previousBytes": self.previous_bytes, "phase": self.phase, "wave": self.wave,
            "waves": [w.as_status() for w in self.waves], "startedTime": times.time_at(self.started),
            **({"resumedTime": times.time_at(self.resumed)} if self.resumed is not None else {}),
            **({"completedTime": times.time_at(self.completed)} if self.completed is not None else {}),
            "restartedAt": self.restarted_at, "stalePromote": self.stale_promote,
            "summary": self.summary, "message": self.message,
        }


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
        **({"reference": value["reference"]} if is_pinned_reference(value.get("reference")) else {}),
        **({"artifact": artifact} if (artifact := read_artifact(value.get("artifact"))) else {}),
        **({"manifest": manifest} if (manifest := read_manifest(value.get("manifest"))) else {}),
    }


def is_pinned_reference(value: Any) -> bool:
    """An OCI reference pinned by digest (host/repository@sha256:…), as resolve writes it."""
    parts = shapes.oci_reference_parts(value)
    return parts is not None and parts[3] is not None


def read_artifact(value: Any) -> dict | None:
    """status.resolved.artifact (or a hydration's status.artifact): {reference, digest}, the
    reference pinned by that digest; None when it is not one."""
    reference = value.get("reference") if isinstance(value, dict) else None
    if not is_pinned_reference(reference):
        return None
    return {"reference": str(reference), "digest": str(reference).rpartition("@")[2]}


def artifact_of_reference(reference: Any) -> dict | None:
    """An agent record's `artifact` (host/repository@sha256:…) as {reference, digest}."""
    return read_artifact({"reference": reference})


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
    """A pinned manifest (a list sorted by path of {path, size, sha256, versionId?, etag?}, or
    for an OCI source {path, size, sha256, blob, offset?, blobSize?}: where the agent reads
    each file, agent/oci_source.py), normalized; None when it is not one (too long, or any
    entry malformed), so a broken record or status is never fanned out."""
    if not isinstance(value, list) or not value or len(value) > MANIFEST_LIMIT:
        return None
    rows = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str) \
                or not item["path"] or not shapes.is_sha256(item.get("sha256")) \
                or not _is_count(item.get("size")):
            return None
        row = {"path": item["path"], "size": item["size"], "sha256": item["sha256"]}
        for pin in ("versionId", "etag"):
            if isinstance(item.get(pin), str) and item[pin]:
                row[pin] = item[pin]
        if "blob" in item:
            if not shapes.is_oci_digest(item["blob"]):
                return None
            row["blob"] = item["blob"]
        if "offset" in item or "blobSize" in item:  # a member of a tar layer: a range of its blob
            if "blob" not in item or not _is_count(item.get("offset")) or not _is_count(item.get("blobSize")):
                return None
            row |= {"offset": item["offset"], "blobSize": item["blobSize"]}
        rows.append(row)
    return sorted(rows, key=lambda r: r["path"])


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


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
    which the caller reads from the record (decisions/sources.manifest_of), and an OCI
    source the reference pinned by digest (what an image volume mounts)."""
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
    if record.get("reference"):
        result["reference"] = record["reference"]
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
