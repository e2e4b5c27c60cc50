"""compose-model-cache-hydration: one model cache on one cluster, through provider-kubernetes.

Lifecycle, top to bottom:
1. resolve the inputs: the spec (validated, every error naming the field and the fix) and
   the FleetCluster named by spec.clusterName, fetched through a requirement every call;
2. decide the phase from what is observed: the latched status, the agent Job, the PVC and
   the agent's progress record;
3. compose the Objects that phase needs on the cluster: namespace (create only), PVC,
   progress ConfigMap (Observe/Create/Delete), and until Ready the agent's
   ServiceAccount/Role/RoleBinding, the token Secret and the agent Job;
4. once Ready, prune: the commits the volume still holds that neither this hydration nor
   any ModelReplica of this cache on this cluster mounts (the replicas are required by
   label every call) go with one prune Job per set of kept commits;
5. report phase, progress, reason and remedy, the Hydrated condition and readiness, the
   serving commit (the last commit that reached Ready on the volume, kept while a newer one
   hydrates or fails, so replicas can keep mounting it), the commits on the volume, the
   volume's measured usage and its use (mountedBy, placedReplicas, lastUsedTime, readyTime,
   pinned, lapsed), which the FleetCluster weighs.

Capacity is the FleetCluster's decision (functions/capacity.py), obeyed here between 2 and 3:
a copy that has not started and is not admitted in the FleetCluster's status.cache waits
(Pending/CapacityLow) composing nothing new; a copy it lists as evicted composes nothing, so
Crossplane deletes its volume (phase Evicted), until a replica is placed on the cluster again.
A hydration whose cluster left the placement (spec.removal), or whose copy lapsed, never
starts a new fetch.

The token itself is never read here: provider-kubernetes patches it into the remote
Secret from the XR namespace's Secret (kit.token_secret_object).
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from typing import Any

from fleetcache.apis import specs
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.k8s import objects
from fleetcache.functions import naming
from fleetcache.functions import protocol
from fleetcache.functions import quantities
from fleetcache.functions import read
from fleetcache.functions import times
from fleetcache.functions.views.fleet_cluster import ACCESS_MODES, FleetClusterView, fleet_cluster_requirement
from fleetcache.functions.views.model_cache import read_manifest
from fleetcache import messages
from fleetcache import reasons
from fleetcache import shapes
from fleetcache.functions.decisions import capacity, mirror, sources
from fleetcache.functions.node_tier import warmers
from fleetcache.apis.models import model_cache_hydration as api

FLEET_CLUSTER_KEY = "fleet-cluster"
REPLICAS_KEY = "model-replicas"
NAMESPACE_KEY = "namespace"
VOLUME_KEY = "volume"
PROGRESS_KEY = "progress"
ACCESS_KEYS = ("service-account", "role", "role-binding")  # kit.progress_access_manifests order
TOKEN_KEY = "token-secret"
MIRROR_SECRET_KEY = "mirror-secret"
MANIFEST_KEY = "manifest"  # the pinned manifest of an S3 prefix or a volume's file
MODEL_CACHE_KEY = "model-cache"
JOB_PREFIX = "job-"
PRUNE_PREFIX = "prune-"
COMMITS_LISTED = 16  # status.storedCommits and status.prunedCommits
MOUNTING = ("Cache", "Node")  # deliveries that mount the volume (Node: the in-pod fallback)
# What the API server answers when a PVC's storage class cannot expand it; provider-kubernetes
# puts it on the volume Object's Synced=False condition.
RESIZE_REFUSED = ("only dynamically provisioned pvc can be resized",
                  "must support resize")
PVC_BOUND_QUERY = "has(object.status) && has(object.status.phase) && object.status.phase == 'Bound'"


# --- 1. inputs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class HydrationSpec:
    cluster: str
    cache: str
    source: dict
    commit: str
    manifest_digest: str
    bytes: int
    size: str
    storage_class: str | None  # None: the FleetCluster's default
    access_mode: str | None  # None: the FleetCluster's default
    policy: agent_job.JobPolicy
    concurrency: int
    bandwidth: str
    pinned: bool  # spec.retention.pinned: kept against eviction until it lapses
    ttl: datetime.timedelta | None  # spec.retention.ttlAfterLastUse; None: never lapses
    removal: dict | None  # spec.removal {since, until}: the cluster left the placement
    tier: str = "Volume"  # spec.tier: Node also warms the pool nodes (functions/node_tier.py)

    origin: sources.Source | None = None  # spec.source, by kind (functions/sources.py)
    mirror: dict | None = None  # spec.mirror {s3, onMissing, role}

    @property
    def secret(self) -> sources.SecretRef | None:
        """The origin's Secret the Job needs (Hub token, S3 keys)."""
        return self.origin.secret if self.origin else None

    @property
    def repo(self) -> str:
        return self.origin.repo if self.origin else ""

    @property
    def existing_volume(self) -> bool:
        """spec.source.volume: the user's claim is verified in place, never composed."""
        return self.origin is not None and self.origin.kind == sources.VOLUME


def read_spec(request: protocol.Request) -> HydrationSpec:
    """The spec read through the ModelCacheHydration model; ModelCache writes it, but a
    hand-made one must fail clearly."""
    naming.object_name(request.name, "metadata.name")
    namespace = request.namespace
    if not shapes.is_dns_label(namespace):
        raise specs.InputError(f"metadata.namespace: {messages.shown(namespace)} is not a namespace "
                             "name; a ModelCacheHydration is namespaced like its ModelCache")
    spec = specs.read_spec(api.ModelCacheHydration, request.composite.get("spec"))
    storage = spec["storage"]
    quantities.quantity_bytes(storage["size"], "spec.storage.size")
    agent = spec.get("agent", {})
    bandwidth = agent.get("bandwidth", "")
    if bandwidth:
        quantities.quantity_bytes(bandwidth, "spec.agent.bandwidth")
    retention = spec.get("retention", {})
    ttl = retention.get("ttlAfterLastUse")
    removal = spec.get("removal")
    return HydrationSpec(
        cluster=spec["clusterName"],
        cache=spec["modelCacheName"],
        source=sources.normalized(spec["source"]),
        origin=sources.Source.of(sources.normalized(spec["source"])),
        mirror=spec.get("mirror"),
        commit=spec["commit"],
        manifest_digest=spec.get("manifestDigest", ""),
        bytes=spec.get("bytes", 0),
        size=storage["size"],
        storage_class=storage.get("storageClassName"),
        access_mode=storage.get("accessMode"),
        policy=agent_job.JobPolicy.of(spec["job"]),
        concurrency=agent.get("concurrency", api.Agent().concurrency),
        bandwidth=bandwidth,
        pinned=retention.get("pinned", False),
        ttl=times.duration(ttl) if ttl else None,
        removal={k: v.isoformat() for k, v in removal.items()} if removal else None,
        tier=spec["tier"],
    )


@dataclass(frozen=True)
class ClusterLookup:
    """The FleetCluster, or why it cannot be used yet (reason is "" when it can)."""

    view: FleetClusterView | None
    reason: str = ""
    message: str = ""


def look_up_cluster(request: protocol.Request, name: str) -> ClusterLookup:
    fetched = request.required.get(FLEET_CLUSTER_KEY)
    if fetched is None:
        return ClusterLookup(None, reasons.ClusterNotReady,
                             f"waiting for Crossplane to fetch FleetCluster {name}")
    if not fetched:
        return ClusterLookup(None, reasons.ClusterNotFound, f"FleetCluster {name} does not exist")
    view = FleetClusterView.of(fetched[0])
    if not view.ready:
        return ClusterLookup(view, reasons.ClusterNotReady, f"FleetCluster {name} is not Ready")
    return ClusterLookup(view)


# --- 2. phase -----------------------------------------------------------------------------


def content_id(commit: str, manifest_digest: str) -> str:
    return f"{commit[:10]}-{manifest_digest[:6]}" if manifest_digest else commit[:10]


def job_key(commit: str, manifest_digest: str) -> str:
    return f"{JOB_PREFIX}{content_id(commit, manifest_digest)}"


@dataclass(frozen=True)
class Names:
    """Control-plane Object names and keys, and the remote names (design/api.md)."""

    hydration: str
    cache: str
    commit: str
    manifest_digest: str

    def object(self, what: str) -> str:
        return naming.child_name(self.hydration, what)

    @property
    def volume(self) -> str:
        return naming.cache_volume_name(self.cache)

    @property
    def progress(self) -> str:
        return naming.child_name(self.cache, "progress")

    @property
    def agent(self) -> str:
        return naming.child_name(self.cache, "agent")

    @property
    def token(self) -> str:
        return naming.child_name(self.cache, "token")

    @property
    def mirror_secret(self) -> str:
        return naming.child_name(self.cache, "mirror-credentials")

    @property
    def manifest(self) -> str:
        """The pinned manifest's ConfigMap (contract §D), named for the content it pins."""
        return naming.child_name(self.cache, "manifest", self.content)

    @property
    def content(self) -> str:
        """What this Job fetches: the commit and the filtered manifest. A Job's template is
        immutable, so new content (a new commit, or new patterns on the same commit) needs
        a new Job, named apart from the old."""
        return content_id(self.commit, self.manifest_digest)

    @property
    def job(self) -> str:
        return naming.child_name(self.cache, "hydrate", self.content)

    @property
    def job_key(self) -> str:
        return job_key(self.commit, self.manifest_digest)


@dataclass(frozen=True)
class Seen:
    """What provider-kubernetes last saw on the cluster."""

    latched: bool  # status.phase Ready already, for this commit
    volume_phase: str
    job_exists: bool
    job: agent_job.JobState
    record: dict  # the agent's fetch record for this commit ({} if none yet)
    missing: tuple[str, ...]  # prerequisites of the Job not on the cluster yet
    measured: dict  # the agent's last record of any kind: usedBytes, capacityBytes
    resize_refused: str  # the API server's refusal to grow the PVC ("" if none)

    @property
    def volume_bound(self) -> bool:
        return self.volume_phase == "Bound"


def exists(request: protocol.Request, key: str) -> bool:
    return bool(objects.remote_manifest(request.observed.get(key)))


def observe(request: protocol.Request, spec: HydrationSpec, names: Names) -> Seen:
    status = request.status
    latched = status.get("phase") == "Ready" and \
        read.get_path(status, "resolved.commit") == spec.commit and \
        read.get_path(status, "resolved.manifestDigest") in (None, spec.manifest_digest)
    job = objects.remote_manifest(request.observed.get(names.job_key))
    measured = objects.remote_manifest(request.observed.get(PROGRESS_KEY)).get("data")
    measured = measured if isinstance(measured, dict) else {}
    record = measured
    if record.get("commit") not in (None, "", spec.commit) or record.get("phase") == "Pruned":
        record = {}  # an earlier commit's or a prune's record: no fetch of this commit yet
    prerequisites = {"ServiceAccount": "service-account", "Role": "role",
                     "RoleBinding": "role-binding", "progress ConfigMap": PROGRESS_KEY}
    if spec.secret:
        prerequisites["token Secret"] = TOKEN_KEY
    if mirror.secret(spec.mirror):
        prerequisites["mirror Secret"] = MIRROR_SECRET_KEY
    if spec.origin.pinned_manifest:
        prerequisites["manifest ConfigMap"] = MANIFEST_KEY
    return Seen(
        latched=latched,
        volume_phase="Bound" if spec.existing_volume else reasons.reason_or_empty(read.get_path(
            objects.remote_manifest(request.observed.get(VOLUME_KEY)), "status.phase")),
        job_exists=bool(job),
        job=agent_job.JobState.of(job),
        record=record,
        missing=tuple(what for what, key in prerequisites.items() if not exists(request, key)),
        measured=measured,
        resize_refused=resize_refusal(request.observed.get(VOLUME_KEY), spec.size),
    )


def resize_refusal(volume: dict | None, size: str) -> str:
    """The API server's refusal to grow the PVC to `size`, from the volume Object's
    Synced=False condition: the one signal that says the class cannot expand. (A capacity
    below the request also shows a resize in progress, so it is not read as a refusal.)"""
    synced = read.condition_of(volume, "Synced")
    message = synced.get("message")
    if synced.get("status") != "False" or not isinstance(message, str) \
            or not any(words in message for words in RESIZE_REFUSED):
        return ""
    requested = existing_bytes(read.get_path(objects.remote_manifest(volume),
                                            "spec.resources.requests.storage"))
    return messages.clipped(message) if requested < quantities.quantity_bytes(size, "spec.storage.size") \
        else ""


@dataclass(frozen=True)
class Phase:
    phase: str  # Pending | Hydrating | Ready | Failed | Evicted
    reason: str
    message: str  # what happened, then the remedy

    @property
    def ready(self) -> bool:
        return self.phase == "Ready"


def decide(spec: HydrationSpec, names: Names, seen: Seen, cluster: ClusterLookup) -> Phase:
    where = f"on cluster {spec.cluster}"
    if seen.latched or seen.job.complete:
        if spec.existing_volume:
            message = f"{quantities.human_bytes(spec.bytes)} verified in {spec.origin.described} {where}"
        else:
            message = f"{quantities.human_bytes(spec.bytes)} of {spec.repo}@" \
                      f"{spec.commit[:10]} {where} in PVC {names.volume}"
        if cluster.reason:
            message += f" ({cluster.message})"
        return Phase("Ready", reasons.Hydrated, message)
    if cluster.reason:
        return Phase("Pending", cluster.reason, reasons.with_remedy(cluster.message, cluster.reason))
    if seen.resize_refused and (not seen.job_exists or seen.job.failed):
        return Phase("Pending", reasons.VolumeNotExpandable, reasons.with_remedy(
            f"PVC {names.volume} {where} cannot grow to {spec.size} to hold "
            f"{spec.commit[:10]} beside the commit it serves, so the agent Job is not "
            f"started; the API server says: {seen.resize_refused}", reasons.VolumeNotExpandable))
    if seen.job.failed:
        reason, message = agent_job.failure_reason(seen.job, seen.record)
        return Phase("Failed", reason, f"hydrating {where} failed: {message}")
    if not seen.job_exists:
        if seen.missing:
            return Phase("Pending", reasons.AwaitingPrerequisites, reasons.with_remedy(
                f"waiting for {', '.join(seen.missing)} {where} before starting the agent Job",
                reasons.AwaitingPrerequisites))
        return Phase("Pending", reasons.JobNotStarted, f"creating the agent Job {names.job} {where}")
    if not seen.job.started:
        return Phase("Pending", reasons.JobNotStarted, reasons.with_remedy(
            f"the agent Job {names.job} {where} has not started", reasons.JobNotStarted))
    if not seen.volume_bound:
        state = seen.volume_phase or "not created yet"
        return Phase("Pending", reasons.VolumeNotBound, reasons.with_remedy(
            f"PVC {names.volume} {where} is {state}", reasons.VolumeNotBound))
    message = f"agent Job {names.job} is fetching {spec.commit[:10]} {where}"
    retried = reasons.reason_or_empty(seen.record.get("reason"))
    note = messages.clipped(agent_job.agents_own_words(seen.record.get("message"), retried))
    if retried:
        message += f"; its last attempt ended with {retried}: {note}"
    elif note:
        message += f"; {note}"  # the agent is retrying a hung or failing endpoint
    return Phase("Hydrating", reasons.Hydrating, message)


# --- 2b. use and capacity -----------------------------------------------------------------


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


def use_of(request: protocol.Request, spec: HydrationSpec, ready_time: str | None) -> Use:
    """lastUsedTime is the current hour while a replica mounts the copy, else latched. The
    copy lapses once ttlAfterLastUse has passed since the later of its last use and its
    readyTime with no replica placed here; that is latched until one is placed again."""
    replicas = request.required.get(REPLICAS_KEY)
    placed = mounted = None
    if replicas is not None:  # required by the cache and cluster labels
        here = [read.mapping_at(r, "spec") for r in replicas]
        here = [r for r in here if r.get("clusterName") == spec.cluster]
        placed = len(here)
        mounted = sum(1 for r in here if r.get("delivery") in MOUNTING
                      and read.get_path(r, "cache.modelCacheName") == spec.cache)
    latched_use = times.parse_time(request.status.get("lastUsedTime"))
    last_used = times.hour_of(request.now) if mounted else \
        times.hour_of(latched_use) if latched_use else None
    if placed:
        lapsed = False
    elif request.status.get("lapsed") is True:
        lapsed = True
    else:
        since = max((t for t in (times.parse_time(last_used), times.parse_time(ready_time))
                     if t is not None), default=None)
        lapsed = placed == 0 and spec.ttl is not None and since is not None \
            and request.now >= since + spec.ttl
    return Use(mounted_by=mounted, placed=placed, last_used=last_used, lapsed=lapsed,
               pinned=spec.pinned and not lapsed)


def ready_time_of(request: protocol.Request, phase: Phase) -> str | None:
    """The hour this copy first became Ready, latched; an evicted copy starts afresh."""
    if phase.phase == "Evicted":
        return None
    latched = times.parse_time(request.status.get("readyTime"))
    if latched:
        return times.hour_of(latched)
    return times.hour_of(request.now) if phase.ready else None


@dataclass(frozen=True)
class Gate:
    """What the FleetCluster's decision, spec.removal or a lapse makes of the phase."""

    phase: Phase | None = None  # None: the phase stands
    hold: bool = False  # compose nothing new, keep what exists
    evicted: bool = False  # compose nothing: Crossplane deletes the volume


def gate_of(request: protocol.Request, spec: HydrationSpec, cluster: ClusterLookup, seen: Seen,
            phase: Phase, use: Use) -> Gate:
    evicted_message = (f"cluster {spec.cluster} evicted this copy to get under its low "
                       "watermark: it was not pinned and no replica mounted it; its volume is "
                       "deleted, and it is warmed again once a replica of "
                       f"{spec.cache} is placed on {spec.cluster}")
    if request.status.get("phase") == "Evicted" and not use.placed:  # whatever the cluster
        return Gate(Phase("Evicted", reasons.Evicted, reasons.with_remedy(evicted_message, reasons.Evicted)),
                    evicted=True)
    view = cluster.view
    if view is None or cluster.reason:
        return Gate()
    key = f"{request.namespace}/{request.name}"
    cache = view.cache
    where = f"on cluster {spec.cluster}"
    if cache is not None and key in cache.evicted and phase.ready and use.placed == 0 \
            and use.mounted_by == 0 and not use.pinned and capacity.allocates(spec.source):
        return Gate(Phase("Evicted", reasons.Evicted, reasons.with_remedy(evicted_message, reasons.Evicted)),
                    evicted=True)
    if phase.ready or seen.job_exists:
        return Gate()
    if spec.removal:
        return Gate(Phase("Pending", reasons.LeftPlacement, reasons.with_remedy(
            f"cluster {spec.cluster} left the placement of {spec.cache} (since "
            f"{spec.removal['since']}): no new fetch starts {where}; the copy keeps serving "
            f"what it holds until {spec.removal['until']}", reasons.LeftPlacement)), hold=True)
    if use.lapsed:
        return Gate(Phase("Pending", reasons.Lapsed, (
            f"no replica used this copy {where} for {spec.ttl // datetime.timedelta(hours=1)}h "
            "(spec.retention.ttlAfterLastUse), so it lapsed and fetches nothing new: place a "
            f"replica of {spec.cache} on {spec.cluster} to warm it again")), hold=True)
    started = capacity.started(reasons.reason_or_empty(request.status.get("phase")),
                               bool(serving_of(request, spec, phase).commit))
    if view.capacity is None or started or phase.phase == "Failed" \
            or not capacity.allocates(spec.source) \
            or (cache is not None and key in cache.admitted and key not in cache.evicted):
        return Gate()
    return Gate(Phase("Pending", reasons.CapacityLow, reasons.with_remedy(
        waiting_message(spec, view), reasons.CapacityLow)), hold=True)


def waiting_message(spec: HydrationSpec, view: FleetClusterView) -> str:
    needs = f"this copy needs {spec.size} (spec.storage.size) on cluster {spec.cluster}"
    cache = view.cache
    if cache is None or cache.capacity != view.capacity:
        return f"{needs}; waiting for FleetCluster {spec.cluster} to admit it (it has not " \
               "decided for its spec.cache.capacity yet)"
    high = (view.capacity or 0) * view.high_watermark // 100
    free = max(0, high - cache.used - cache.reserved)
    return (f"{needs} and would pass its high watermark: {quantities.human_bytes(free)} is free "
            f"under {view.high_watermark}% of {quantities.human_bytes(view.capacity or 0)} "
            f"({quantities.human_bytes(cache.used)} used, {quantities.human_bytes(cache.reserved)} reserved "
            "by downloads admitted or running); it starts once there is room, in creation "
            "order")


# --- 3. prune -----------------------------------------------------------------------------


def replicas_requirement(request: protocol.Request, spec: HydrationSpec) -> protocol.Requirement:
    """The ModelReplicas of this cache on this cluster (compose-model-deployment labels them)."""
    return protocol.Requirement(naming.API_VERSION, "ModelReplica", namespace=request.namespace,
                           match_labels=((naming.LABEL_MODEL_CACHE, naming.label_value(spec.cache)),
                                         (naming.LABEL_CLUSTER, naming.label_value(spec.cluster))))


def mounted_commits(request: protocol.Request, spec: HydrationSpec) -> frozenset[str] | None:
    """The commits replicas mount from this volume; None while that cannot be known (the
    replicas not fetched yet, or a Cache replica without a readable commit), which keeps
    every commit."""
    replicas = request.required.get(REPLICAS_KEY)
    if replicas is None:
        return None
    mounted = set()
    for replica in replicas:
        replica_spec = read.mapping_at(replica, "spec")
        if replica_spec.get("delivery") not in MOUNTING \
                or replica_spec.get("clusterName") != spec.cluster \
                or read.get_path(replica_spec, "cache.modelCacheName") != spec.cache:
            continue
        commit = read.get_path(replica_spec, "cache.commit")
        if not shapes.is_resolved_commit(commit):
            return None
        mounted.add(commit)
    return frozenset(mounted)


def commits_in(values: Any) -> set[str]:
    """The full commits in a list (a latched status list, or a record's split string)."""
    return {c for c in values if shapes.is_resolved_commit(c)} \
        if isinstance(values, list) else set()


@dataclass(frozen=True)
class Pruning:
    """What the volume holds of this repo, and the prune that removes the rest."""

    stored: frozenset[str]  # commits whose snapshots are on the volume, as far as known
    keep: frozenset[str]  # what the prune keeps: empty when nothing is to be pruned
    pruned: tuple[str, ...]  # the last prune's commits (latched)
    job: agent_job.JobState

    @property
    def needed(self) -> bool:
        return bool(self.keep)

    @property
    def key(self) -> str:
        return f"{PRUNE_PREFIX}{naming.short_digest(*sorted(self.keep))}"

    def job_name(self, cache: str) -> str:
        """One Job per kept set: a Job is immutable, and a changed set is another prune."""
        return naming.child_name(cache, "prune", naming.short_digest(*sorted(self.keep)))


def plan_pruning(request: protocol.Request, spec: HydrationSpec, phase: Phase) -> Pruning:
    """The volume's commits: those latched in status.storedCommits, the serving commit the
    status had, and this commit once Ready. A change of repo starts the list afresh (prune
    works on one repo). Once Ready, every stored commit no replica mounts is pruned; the
    prune Job's completion removes them from the list, so it runs once."""
    status = request.status
    repo = spec.repo
    stored = set()
    if status.get("servingRepo") in (None, "", repo):
        stored = commits_in(status.get("storedCommits")) | commits_in(
            [status.get("servingCommit")])
    if phase.ready:
        stored.add(spec.commit)
    pruned = tuple(sorted(commits_in(status.get("prunedCommits"))))
    mounted = mounted_commits(request, spec)
    if not phase.ready or mounted is None or spec.existing_volume:  # never prune the user's
        return Pruning(frozenset(stored), frozenset(), pruned, agent_job.JobState.of({}))
    keep = frozenset({spec.commit} | mounted)
    planned = Pruning(frozenset(stored), keep, pruned, agent_job.JobState.of({}))
    job = agent_job.JobState.of(objects.remote_manifest(request.observed.get(planned.key)))
    if job.complete:
        record = objects.remote_manifest(request.observed.get(PROGRESS_KEY)).get("data")
        reported = record.get("prunedCommits") if isinstance(record, dict) else None
        gone = (stored - keep) | (commits_in(json_list(reported)) - keep)
        return Pruning(frozenset(stored & keep), frozenset(), tuple(sorted(gone)), job)
    if not stored - keep:
        return Pruning(frozenset(stored), frozenset(), pruned, job)
    return Pruning(frozenset(stored), keep, pruned, job)


def json_list(text: Any) -> list:
    """A record value the agent wrote as a JSON list (ConfigMap values are strings, like
    `compared`); anything else reads as empty."""
    if not isinstance(text, str) or len(text) > 64 * 1024:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def prune_in_flight(request: protocol.Request) -> str | None:
    """A prune Job still running: it was planned for an older set of kept commits, so a
    fetch of a commit that set does not name waits until it ends (the volume lock only
    keeps the two from overlapping; a prune that ran after the fetch would delete it)."""
    for key in sorted(request.observed):
        job = agent_job.JobState.of(objects.remote_manifest(request.observed[key]))
        if key.startswith(PRUNE_PREFIX) and not (job.complete or job.failed):
            return key
    return None


def prune_args(spec: HydrationSpec, names: Names, namespace: str, keep: frozenset[str]
               ) -> list[str]:
    args = ["prune", "--dest", agent_job.CACHE_MOUNT_PATH,
            "--repo", spec.repo]
    for commit in sorted(keep):
        args += ["--keep", commit]
    return args + ["--progress-configmap", f"{namespace}/{names.progress}"]


# --- 4. compose ---------------------------------------------------------------------------


def labels_for(spec: HydrationSpec) -> dict[str, str]:
    return {naming.LABEL_MANAGED_BY: "fleetcache", naming.LABEL_COMPONENT: "hydration",
            naming.LABEL_MODEL_CACHE: naming.label_value(spec.cache),
            naming.LABEL_CLUSTER: naming.label_value(spec.cluster)}


def volume_manifest(spec: HydrationSpec, cluster: FleetClusterView, names: Names,
                    namespace: str, existing: dict) -> dict:
    """The cache PVC: class and access mode from the hydration, else the cluster defaults.

    Once the PVC exists its class and access modes are immutable and it can only grow, so
    those are kept as they are and a smaller size (a smaller new commit) never shrinks it.
    """
    size = spec.size
    existing_size = read.get_path(existing, "spec.resources.requests.storage")
    if existing_bytes(existing_size) > quantities.quantity_bytes(size, "spec.storage.size"):
        size = existing_size
    modes = read.get_path(existing, "spec.accessModes")
    existing_class = read.get_path(existing, "spec.storageClassName")
    pvc_spec: dict = {
        "accessModes": modes if isinstance(modes, list) and modes
        and all(m in ACCESS_MODES for m in modes)
        else [spec.access_mode or cluster.access_mode],
        "resources": {"requests": {"storage": size}},
        "volumeMode": "Filesystem",
    }
    storage_class = (existing_class if isinstance(existing_class, str) else None) \
        or spec.storage_class or cluster.storage_class
    if storage_class:
        pvc_spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": names.volume, "namespace": namespace,
                         "labels": labels_for(spec)},
            "spec": pvc_spec}


def existing_bytes(size: Any) -> int:
    """Bytes the observed PVC asks for; a size that is not a quantity reads as absent (0)."""
    try:
        return quantities.quantity_bytes(size, "the PVC's size") if size else 0
    except specs.InputError:
        return 0


def fetch_args(spec: HydrationSpec, names: Names, namespace: str) -> list[str]:
    """The pinned commit is fetched; `--ref` names it as the revision the ModelCache asked
    for, so engines given the repo id (and that revision) find it offline. An S3 prefix is
    fetched from its pinned manifest, an existing volume only verified (functions/sources.py);
    with a fleet mirror the fetch publishes to it or reads from it (functions/mirror.py)."""
    progress = f"{namespace}/{names.progress}"
    if spec.existing_volume:
        return spec.origin.hydrate_args(spec.commit, spec.manifest_digest, progress)
    if spec.origin.kind == sources.S3:
        args = spec.origin.hydrate_args(spec.commit, spec.manifest_digest, progress)
    else:
        revision = spec.origin.revision
        ref = ["--ref", str(revision)] if revision and revision != spec.commit else []
        # Through a mirror, the digest lets a reader plan from the publisher's manifest, without the Hub.
        pinned = ["--manifest-digest", spec.manifest_digest] if spec.mirror and spec.manifest_digest else []
        args = ["fetch", "--dest", agent_job.CACHE_MOUNT_PATH, "--revision", spec.commit,
                "--progress-configmap", progress, *ref, *pinned, *spec.origin.origin_args()]
    args += ["--concurrency", str(spec.concurrency)]
    if spec.bandwidth:
        args += ["--bandwidth", spec.bandwidth]
    if spec.mirror:
        args += mirror.args(spec.mirror)
    return args


def compose_remote(request: protocol.Request, spec: HydrationSpec, cluster: FleetClusterView,
                   names: Names, seen: Seen, phase: Phase, pruning: Pruning,
                   outcome: protocol.Outcome, pinned: list[dict] | None = None) -> None:
    namespace = request.namespace
    labels = labels_for(spec)

    def remote(key: str, what: str, manifest: dict, ready: bool, **kwargs: Any) -> None:
        outcome.compose(key, objects.remote_object(names.object(what), namespace, manifest,
                                               cluster.provider_config, labels=labels,
                                               **kwargs), ready)

    # Lives on: the namespace (never deleted), the volume and the progress record.
    remote(NAMESPACE_KEY, "namespace", objects.namespace_manifest(namespace),
           exists(request, NAMESPACE_KEY), management_policies=objects.CREATE_ONLY)
    if not spec.existing_volume:  # the user's claim is theirs: never composed or resized
        existing_volume = objects.remote_manifest(request.observed.get(VOLUME_KEY))
        remote(VOLUME_KEY, "volume", volume_manifest(spec, cluster, names, namespace,
                                                     existing_volume),
               seen.volume_bound, readiness_query=PVC_BOUND_QUERY)
    remote(PROGRESS_KEY, "progress",
           agent_job.progress_configmap_manifest(names.progress, namespace, labels),
           exists(request, PROGRESS_KEY), management_policies=objects.OBSERVE_CREATE_DELETE)
    if phase.ready and not pruning.needed:
        return  # the Jobs, the token and the access are done with
    for key, manifest in zip(ACCESS_KEYS, agent_job.progress_access_manifests(
            names.agent, names.progress, namespace, labels)):
        remote(key, key, manifest, exists(request, key))
    if phase.ready:
        access_missing = [k for k in (*ACCESS_KEYS, PROGRESS_KEY) if not exists(request, k)]
        if exists(request, pruning.key) or not access_missing:
            remote(pruning.key, pruning.key, agent_job.agent_job_manifest(
                name=pruning.job_name(spec.cache), namespace=namespace,
                image=cluster.agent_image,
                args=prune_args(spec, names, namespace, pruning.keep),
                service_account=names.agent, labels=labels, policy=spec.policy,
                cache_claim=names.volume), pruning.job.complete)
        return
    running_prune = prune_in_flight(request)
    if running_prune and not seen.job_exists:
        objects.carry_over(request, outcome, [running_prune])  # it ends before the fetch starts
        return
    mounts = []
    for key, what, remote_name, ref in (
            (TOKEN_KEY, "token", names.token, spec.secret),
            (MIRROR_SECRET_KEY, "mirror-secret", names.mirror_secret, mirror.secret(spec.mirror))):
        if ref is not None:
            outcome.compose(key, sources.secret_object(
                names.object(what), remote_name, namespace, cluster.provider_config, ref,
                labels), exists(request, key))
            mounts.append(sources.secret_mount(what, remote_name, ref))
    if spec.origin.pinned_manifest and pinned is not None:
        remote(MANIFEST_KEY, "manifest", sources.manifest_configmap(
            names.manifest, namespace, pinned, labels), exists(request, MANIFEST_KEY))
        mounts.append(sources.manifest_mount(names.manifest))
    if spec.existing_volume:
        mounts.append(sources.claim_mount(spec.origin.fields["claimName"]))
    if seen.job_exists or not (seen.missing or seen.resize_refused):  # gate creation only
        remote(names.job_key, names.job_key, sources.with_mounts(agent_job.agent_job_manifest(
            name=names.job, namespace=namespace, image=cluster.agent_image,
            args=fetch_args(spec, names, namespace), service_account=names.agent,
            labels=labels, policy=spec.policy,
            cache_claim=None if spec.existing_volume else names.volume), mounts),
            seen.job.complete)


# --- 5. report ----------------------------------------------------------------------------


def progress_of(request: protocol.Request, spec: HydrationSpec, seen: Seen, phase: Phase) -> dict:
    """From the agent's record; the last reported progress when the record is gone."""
    source = seen.record
    if not source.get("bytesTotal") and \
            read.get_path(request.status, "resolved.commit") == spec.commit:
        source = read.mapping_at(request.status, "progress")
    count = {k: max(0, read.as_int(source.get(k))) for k in
             ("bytesDone", "bytesTotal", "filesDone", "filesTotal")}
    total = count["bytesTotal"] or spec.bytes
    done = total if phase.ready else min(count["bytesDone"], total)
    files_done = count["filesTotal"] if phase.ready else min(count["filesDone"],
                                                             count["filesTotal"])
    percent = done * 100 // total if total else (100 if phase.ready else 0)
    return {"bytesDone": done, "bytesTotal": total, "filesDone": files_done,
            "filesTotal": count["filesTotal"], "percent": percent}


@dataclass(frozen=True)
class Serving:
    """The last snapshot that reached Ready on this volume: what engines can mount now."""

    repo: str = ""
    commit: str = ""
    manifest_digest: str = ""

    def as_status(self) -> dict:
        return {"servingRepo": self.repo, "servingCommit": self.commit,
                "servingManifestDigest": self.manifest_digest}


def serving_of(request: protocol.Request, spec: HydrationSpec, phase: Phase) -> Serving:
    """Latched: this commit once Ready; until then whatever the last Ready left behind.

    The agent never deletes an older snapshot (hf-cache layout: snapshots/<commit> and
    digest-named blobs), so a commit that was Ready stays mountable while a newer one
    hydrates, and after the newer one fails.
    """
    if phase.ready:
        return Serving(spec.repo, spec.commit, spec.manifest_digest)
    status = request.status
    commit = status.get("servingCommit")
    if not shapes.is_resolved_commit(commit):
        return Serving()
    return Serving(messages.clipped(status.get("servingRepo") or ""), commit,
                   messages.clipped(status.get("servingManifestDigest") or "", 128))


def usage_of(request: protocol.Request, seen: Seen) -> dict:
    """usedBytes and capacityBytes from the agent's last record (statvfs), else as latched:
    a finished Job's collected record does not erase a measurement. Absent until measured;
    0 is a measurement."""
    usage = {}
    for key in ("usedBytes", "capacityBytes"):
        for source in (seen.measured, request.status):
            value = read.as_int(source.get(key), -1) if key in source else -1
            if value >= 0:
                usage[key] = value
                break
    if "usedBytes" in usage:
        usage["usedHuman"] = quantities.human_bytes(usage["usedBytes"])
    return usage


def pruning_note(pruning: Pruning) -> str:
    """A failed prune leaves the cache Ready (the commit is on the volume); it is said."""
    if not pruning.job.failed:
        return ""
    return (f"; pruning {', '.join(c[:10] for c in sorted(pruning.stored - pruning.keep))} "
            f"failed ({pruning.job.failure_reason or 'Failed'}: "
            f"{messages.clipped(pruning.job.failure_message, 120)}); delete the prune Job to retry")


def bytes_from(request: protocol.Request, spec: HydrationSpec, seen: Seen, phase: Phase) -> dict:
    """Where this copy's bytes came from: Volume for an existing volume; else the agent's
    record (bytesFrom, originBytes, mirrorBytes: a mirror fetch writes them), else as
    latched, else (without a mirror) Origin once bytes moved. Absent before that."""
    if spec.existing_volume:
        return {"bytesFrom": "Volume", "originBytes": 0, "mirrorBytes": 0}
    found: dict = {}
    for source in (seen.record, request.status):
        if source.get("bytesFrom") in ("Origin", "Mirror"):
            found = {"bytesFrom": source["bytesFrom"],
                     **{k: max(0, read.as_int(source.get(k))) for k in ("originBytes",
                                                                        "mirrorBytes")}}
            break
    if not found and not spec.mirror and phase.phase in ("Hydrating", "Ready"):
        found = {"bytesFrom": "Origin"}  # a mirror fetch says which in its last record
    return found


def pinned_manifest(request: protocol.Request, spec: HydrationSpec) -> tuple[list[dict] | None, str]:
    """The manifest an S3 prefix or a volume's file resolved to, from the ModelCache's
    status.resolved (required by name), only if it hashes to spec.manifestDigest: a copy
    is fetched or verified against exactly the content the fleet resolved, never another."""
    caches = request.required.get(MODEL_CACHE_KEY)
    if caches is None:
        return None, f"waiting for Crossplane to fetch ModelCache {spec.cache}"
    cache = next((c for c in caches if isinstance(c, dict)), None)
    if cache is None:
        return None, f"ModelCache {spec.cache} does not exist"
    if read.get_path(cache, "status.resolved.commit") != spec.commit:
        return None, (f"ModelCache {spec.cache} has not latched commit {spec.commit[:14]} "
                      "(status.resolved)")
    manifest = read_manifest(read.get_path(cache, "status.resolved.manifest"))
    if manifest is None:
        return None, f"ModelCache {spec.cache} status.resolved.manifest is missing or malformed"
    if sources.digest_of_manifest(manifest) != spec.manifest_digest:
        return None, (f"ModelCache {spec.cache} status.resolved.manifest does not hash to "
                      f"spec.manifestDigest {spec.manifest_digest[:12]}; nothing is fetched "
                      "until they agree")
    return manifest, ""


def report(request: protocol.Request, spec: HydrationSpec, names: Names, seen: Seen, phase: Phase,
           pruning: Pruning, use: Use, ready_time: str | None, outcome: protocol.Outcome) -> None:
    progress = progress_of(request, spec, seen, phase)
    evicted = phase.phase == "Evicted"
    serving = Serving() if evicted else serving_of(request, spec, phase)
    message = phase.message
    if phase.phase == "Hydrating":
        message = f"{progress['percent']}% ({quantities.human_bytes(progress['bytesDone'])} of " \
                  f"{quantities.human_bytes(progress['bytesTotal'])}, {progress['filesDone']}/" \
                  f"{progress['filesTotal']} files): {message}"
    if serving.commit and serving.commit != spec.commit:
        message = f"{message.rstrip('.')}; the volume keeps serving {serving.commit[:10]} " \
                  f"until {spec.commit[:10]} is Ready"
    message += pruning_note(pruning)
    outcome.status = {
        "phase": phase.phase,
        "progress": progress,
        "reason": phase.reason,
        "message": message,
        "resolved": {"commit": spec.commit, "manifestDigest": spec.manifest_digest,
                     "bytes": spec.bytes},
        "volumeName": spec.origin.fields["claimName"] if spec.existing_volume
        else names.volume,
        **bytes_from(request, spec, seen, phase),
        **serving.as_status(),
        "storedCommits": [] if evicted else sorted(pruning.stored)[:COMMITS_LISTED],
        "prunedCommits": [] if evicted else list(pruning.pruned[:COMMITS_LISTED]),
        **({} if evicted else usage_of(request, seen)),
        **use.as_status(),
        **({"readyTime": ready_time} if ready_time else {}),
    }
    outcome.condition("Hydrated", phase.ready, phase.reason, message)
    outcome.composite_ready = phase.ready


def compose(request: protocol.Request) -> protocol.Outcome:
    outcome = protocol.Outcome()
    spec = read_spec(request)
    outcome.require(FLEET_CLUSTER_KEY, fleet_cluster_requirement(spec.cluster))
    outcome.require(REPLICAS_KEY, replicas_requirement(request, spec))
    manifest, manifest_wait = None, ""
    if spec.origin.pinned_manifest:
        outcome.require(MODEL_CACHE_KEY, protocol.Requirement(
            naming.API_VERSION, "ModelCache", match_name=spec.cache, namespace=request.namespace))
        manifest, manifest_wait = pinned_manifest(request, spec)
    cluster = look_up_cluster(request, spec.cluster)
    names = Names(request.name, spec.cache, spec.commit, spec.manifest_digest)
    seen = observe(request, spec, names)
    phase = decide(spec, names, seen, cluster)
    use = use_of(request, spec, ready_time_of(request, phase))
    gate = gate_of(request, spec, cluster, seen, phase, use)
    phase = gate.phase or phase
    if manifest_wait and not phase.ready and not gate.hold and not gate.evicted \
            and not cluster.reason:  # a running Job keeps its phase; nothing new is composed
        gate = Gate(None if seen.job_exists else Phase("Pending", reasons.AwaitingManifest,
                    reasons.with_remedy(manifest_wait, reasons.AwaitingManifest)), hold=True)
        phase = gate.phase or phase
    ready_time = ready_time_of(request, phase)
    pruning = plan_pruning(request, spec, phase)
    if cluster.view is None or cluster.reason or gate.hold:
        objects.carry_over(request, outcome, request.observed)  # compose nothing new
    elif not gate.evicted:
        compose_remote(request, spec, cluster.view, names, seen, phase, pruning, outcome,
                       manifest)
    report(request, spec, names, seen, phase, pruning, use, ready_time, outcome)
    if spec.tier == warmers.NODE_TIER:
        outcome.status["nodeTier"] = node_tier_status(request, spec, names, cluster, phase,
                                                      gate, outcome)
    return outcome


def node_tier_status(request: protocol.Request, spec: HydrationSpec, names: Names,
                     cluster: ClusterLookup, phase: Phase, gate: Gate,
                     outcome: protocol.Outcome) -> dict:
    """Tier Node: the pool nodes are warmed from this volume once it is Ready."""
    fetched = request.required.get(FLEET_CLUSTER_KEY) or [None]
    held = cluster.view is None or bool(cluster.reason) or gate.hold or gate.evicted
    modes = read.get_path(objects.remote_manifest(request.observed.get(VOLUME_KEY)),
                         "spec.accessModes")  # the PVC's modes once it exists, else as asked
    if not (isinstance(modes, list) and modes):
        modes = [spec.access_mode or (cluster.view.access_mode if cluster.view else "")]
    volume = warmers.VolumeTier(
        phase.phase, cluster.reason or phase.reason, composing=not held,
        problem=reasons.with_remedy(cluster.message, cluster.reason) if cluster.reason else "",
        shared="ReadWriteOnce" not in modes or "ReadWriteMany" in modes)
    hydration = warmers.Hydration(
        request.namespace, request.name, spec.cache, spec.cluster,
        "" if spec.existing_volume else spec.repo, spec.commit,
        spec.manifest_digest, labels_for(spec))
    return warmers.run(request, hydration, fetched[0], cluster.view, names.volume, volume,
                         request.required.get(REPLICAS_KEY), outcome)
