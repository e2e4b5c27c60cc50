"""What other composers read of a ModelCacheHydration: where the cache stands on its
cluster (phase, progress, reason, message), which content it is pinned to, the commit its
volume still serves, and whether its copy lapsed or was evicted. compose-model-cache and
compose-model-deployment read a cluster's standing the same way, through `report_of`.

Both sides of the contract live here: what compose-model-cache writes (`hydration_manifest`)
and what compose-model-cache-hydration writes into the status others read (`Phase`, `Use`,
`Serving`, `progress_of`, `usage_of`, `bytes_from`, and what goes with a replaced volume,
`without_the_volume`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fleetcache import messages, reasons, shapes
from fleetcache.functions import naming, quantities, read
from fleetcache.functions.views.model_cache import COMPARED_MAX, artifact_of_reference, read_artifact
from fleetcache.functions.views.placement import Target

PHASES = ("Failed", "Hydrating", "Pending", "Evicted", "Ready")  # also the order rows are listed in
BYTES_FROM = ("Origin", "Mirror", "Volume")
MOUNTING = ("Cache", "Node")  # ModelReplica deliveries that mount the volume (Node: the in-pod fallback)


@dataclass
class ClusterReport:
    """One target cluster's standing on the resolved content (a ModelCache's
    status.clusters row)."""

    name: str
    phase: str = "Pending"
    bytes_done: int = 0
    bytes_total: int = 0
    reason: str = ""
    message: str = ""
    serving_commit: str = ""  # the last commit Ready on the volume, while another is not
    lapsed: bool = False  # ttlAfterLastUse passed unmounted: unpinned until a replica returns
    bytes_from: str = ""  # Origin | Mirror | Volume, from the hydration's status

    @property
    def serving_previous(self) -> bool:
        """Not Ready on the resolved commit, but an earlier one can be mounted there."""
        return self.phase != "Ready" and bool(self.serving_commit)

    def as_status(self) -> dict:
        return {"name": self.name, "phase": self.phase, "bytesDone": self.bytes_done,
                "bytesTotal": self.bytes_total, "reason": self.reason, "message": self.message,
                "servingCommit": self.serving_commit, "lapsed": self.lapsed,
                **({"bytesFrom": self.bytes_from} if self.bytes_from else {})}


def hydration_manifest(namespace: str, cache: str, cluster: str, spec: dict) -> dict:
    """A ModelCacheHydration as compose-model-cache writes it: named for its cache and cluster
    and labelled with both (the FleetCluster and the grant require hydrations by these
    labels); `spec` is the rest of its spec after clusterName and modelCacheName."""
    return {
        "apiVersion": naming.API_VERSION,
        "kind": "ModelCacheHydration",
        "metadata": {
            "name": naming.child_name(cache, cluster),
            "namespace": namespace,
            "labels": {naming.LABEL_MODEL_CACHE: naming.label_value(cache),
                       naming.LABEL_CLUSTER: naming.label_value(cluster)},
        },
        "spec": {"clusterName": cluster, "modelCacheName": cache, **spec},
    }


def is_lapsed(hydration: dict | None) -> bool:
    return read.get_path(hydration, "status.lapsed") is True


def is_evicted(hydration: dict | None) -> bool:
    return read.get_path(hydration, "status.phase") == "Evicted"


def serving_commit_of(observed: dict | None, repo: str) -> str:
    """The hydration's latched servingCommit, if it is a snapshot of the repo served now
    (a changed repo leaves the old model's snapshot on the volume, but it is another model)."""
    status = read.get_path(observed, "status")
    if not isinstance(status, dict) or status.get("servingRepo") != repo:
        return ""
    commit = status.get("servingCommit")
    return commit if shapes.is_resolved_commit(commit) else ""


def served_commits(hydrations: Iterable[dict | None], repo: str) -> list[str]:
    """The commits of `repo` the clusters' volumes hold for serving (each hydration's
    servingCommit and its pinned spec.commit), the most clusters first, then by commit;
    at most COMPARED_MAX."""
    counts: Counter[str] = Counter()
    for observed in hydrations:
        held = {serving_commit_of(observed, repo)}
        pinned = read.get_path(observed, "spec.commit")
        if read.get_path(observed, "spec.source.huggingFace.repo") == repo \
                and shapes.is_resolved_commit(pinned):
            held.add(pinned)
        counts.update(c for c in held if c)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [commit for commit, _ in ranked[:COMPARED_MAX]]


def pinned_to(observed: dict | None, resolved: Mapping) -> bool:
    """The hydration fetches exactly the resolved content: the commit and the manifest
    (the same commit with other patterns is other content)."""
    return (read.get_path(observed, "spec.commit") == resolved.get("commit")
            and read.get_path(observed, "spec.manifestDigest") == resolved.get("manifestDigest"))


def report_of(target: Target, observed: dict | None, resolved_bytes: int,
              resolved: dict, repo: str) -> ClusterReport:
    """Where one cluster stands on the `resolved` content, from its hydration's own status.

    A hydration still pinned to other content (queued for a rollout slot, or re-pinned in
    this very call) is Pending: its Ready speaks of a snapshot the replicas of the
    resolved commit cannot use. So is one pinned to it whose status still speaks of other
    content (status.resolved.commit: re-pinned, its own composer has not run since). What it
    can still serve is in serving_commit.
    """
    report = ClusterReport(target.name, bytes_total=resolved_bytes)
    if target.cluster is None:
        report.reason = reasons.ClusterNotFound
        report.message = reasons.with_remedy(f"FleetCluster {target.name} does not exist",
                                             reasons.ClusterNotFound)
        return report
    if observed is not None:
        report.lapsed = is_lapsed(observed)
        # An evicted copy's volume is deleted: nothing is left there to serve.
        report.serving_commit = "" if is_evicted(observed) else serving_commit_of(observed, repo)
    if observed is None or (resolved.get("commit") and not pinned_to(observed, resolved)):
        if not target.ready:
            report.reason = reasons.ClusterNotReady
            report.message = reasons.with_remedy(f"FleetCluster {target.name} is not Ready",
                                                 reasons.ClusterNotReady)
        return report
    status = read.mapping_at(observed, "status")
    progress = read.mapping_at(status, "progress")
    phase = status.get("phase")
    shown = read.get_path(status, "resolved.commit")
    stale = shown is not None and shown != resolved.get("commit")
    report.phase = phase if phase in PHASES and not (stale and phase == "Ready") else "Pending"
    report.bytes_total = max(0, read.as_int(progress.get("bytesTotal"), resolved_bytes)) \
        or resolved_bytes
    report.bytes_done = (report.bytes_total if report.phase == "Ready"
                         else max(0, read.as_int(progress.get("bytesDone"))))
    report.reason = reasons.reason_or_empty(status.get("reason"))
    report.message = messages.clipped(status.get("message") or "")
    bytes_from = status.get("bytesFrom")
    report.bytes_from = bytes_from if bytes_from in BYTES_FROM else ""
    return report


# --- the status compose-model-cache-hydration writes ---------------------------------------


@dataclass(frozen=True)
class Phase:
    """Where the hydration stands: status.phase, reason and message (report_of reads them)."""

    phase: str  # Pending | Hydrating | Ready | Failed | Evicted
    reason: str
    message: str  # what happened, then the remedy

    @property
    def ready(self) -> bool:
        return self.phase == "Ready"


@dataclass(frozen=True)
class Use:
    """How the replicas on this cluster use this copy: what the FleetCluster weighs."""

    mounted_by: int | None  # Cache replicas of this cache here; None while not known
    placed: int | None  # replicas of this cache here, any delivery; None while not known
    last_used: str | None  # the hour a replica last mounted it
    lapsed: bool
    pinned: bool

    def as_status(self) -> dict:
        status: dict = {"pinned": self.pinned, "lapsed": self.lapsed}
        if self.mounted_by is not None:
            status["mountedBy"] = self.mounted_by
        if self.placed is not None:
            status["placedReplicas"] = self.placed
        if self.last_used:
            status["lastUsedTime"] = self.last_used
        return status


@dataclass(frozen=True)
class Serving:
    """The last snapshot that reached Ready on this volume: what engines can mount now."""

    repo: str = ""
    commit: str = ""
    manifest_digest: str = ""

    def as_status(self) -> dict:
        return {"servingRepo": self.repo, "servingCommit": self.commit,
                "servingManifestDigest": self.manifest_digest}


def serving_of(status: dict, phase: Phase, repo: str, commit: str, manifest_digest: str) -> Serving:
    """Latched: this commit once Ready; until then whatever the last Ready left behind.

    The agent never deletes an older snapshot (hf-cache layout: snapshots/<commit> and
    digest-named blobs), so a commit that was Ready stays mountable while a newer one
    hydrates, and after the newer one fails.
    """
    if phase.ready:
        return Serving(repo, commit, manifest_digest)
    latched = status.get("servingCommit")
    if not shapes.is_resolved_commit(latched):
        return Serving()
    return Serving(messages.clipped(status.get("servingRepo") or ""), latched,
                   messages.clipped(status.get("servingManifestDigest") or "", 128))


# What a status says of its volume and the volume's content: it goes with the volume (a PVC
# deleted and created again holds none of it); the phase, the use and the times are the copy's own.
OF_THE_VOLUME = ("volumeUID", "servingRepo", "servingCommit", "servingManifestDigest",
                 "storedCommits", "prunedCommits", "progress", "usedBytes", "capacityBytes",
                 "usedHuman", "bytesFrom", "originBytes", "mirrorBytes")


def without_the_volume(status: dict) -> dict:
    """The status as it reads once its volume is gone: nothing served, stored, fetched or
    measured there."""
    return {k: v for k, v in status.items() if k not in OF_THE_VOLUME}


def progress_of(record: dict, status: dict, commit: str, spec_bytes: int, phase: Phase) -> dict:
    """From the agent's record; the last reported progress when the record is gone."""
    source = record
    if not source.get("bytesTotal") and \
            read.get_path(status, "resolved.commit") == commit:
        source = read.mapping_at(status, "progress")
    count = {k: max(0, read.as_int(source.get(k))) for k in
             ("bytesDone", "bytesTotal", "filesDone", "filesTotal")}
    total = count["bytesTotal"] or spec_bytes
    done = total if phase.ready else min(count["bytesDone"], total)
    files_done = count["filesTotal"] if phase.ready else min(count["filesDone"],
                                                             count["filesTotal"])
    percent = done * 100 // total if total else (100 if phase.ready else 0)
    return {"bytesDone": done, "bytesTotal": total, "filesDone": files_done,
            "filesTotal": count["filesTotal"], "percent": percent}


def usage_of(measured: dict, status: dict) -> dict:
    """usedBytes and capacityBytes from the agent's last record (statvfs), else as latched:
    a finished Job's collected record does not erase a measurement. Absent until measured;
    0 is a measurement."""
    usage: dict[str, int] = {}
    for key in ("usedBytes", "capacityBytes"):
        for source in (measured, status):
            value = read.as_int(source.get(key), -1) if key in source else -1
            if value >= 0:
                usage[key] = value
                break
    if "usedBytes" in usage:
        return {**usage, "usedHuman": quantities.human_bytes(usage["usedBytes"])}
    return usage


def bytes_from(record: dict, status: dict, phase: Phase, existing_volume: bool, mirrored: bool) -> dict:
    """Where this copy's bytes came from: Volume for an existing volume; else the agent's
    record (bytesFrom, originBytes, mirrorBytes: a mirror fetch writes them), else as
    latched, else (without a mirror) Origin once bytes moved. Absent before that."""
    if existing_volume:
        return {"bytesFrom": "Volume", "originBytes": 0, "mirrorBytes": 0}
    found: dict = {}
    for source in (record, status):
        if source.get("bytesFrom") in ("Origin", "Mirror"):
            found = {"bytesFrom": source["bytesFrom"],
                     **{k: max(0, read.as_int(source.get(k))) for k in ("originBytes",
                                                                        "mirrorBytes")}}
            break
    if not found and not mirrored and phase.phase in ("Hydrating", "Ready"):
        found = {"bytesFrom": "Origin"}  # a mirror fetch says which in its last record
    return found


def artifact_of(record: dict, status: dict, commit: str) -> dict:
    """The OCI mirror's artifact this copy was published as or read from (the agent's record
    of this commit's fetch), else as latched for this commit; {} when there is none."""
    found = artifact_of_reference(record.get("artifact"))
    if found is None and read.get_path(status, "resolved.commit") == commit:
        found = read_artifact(status.get("artifact"))
    return {"artifact": found} if found else {}
