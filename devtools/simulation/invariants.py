"""What must hold of a simulated fleet after every round of a fault run (faults.py), and once
the faults stop: each check reads the fleet as it is (the control plane's objects, each
cluster's objects and volume directories, the test hub's published files) and returns the
violations it finds, one line each (design/simulation.md, "Faults at random").

The ground truth is never a composer's own account: a replica "mounts" what its engine
Deployment on the cluster mounts, and a commit is "verified" when every file the hub
published for it is in the snapshot directory the engine is pointed at, with the hub's
sha256, and nothing else is."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fleetcache import messages
from fleetcache.devtools.simulation.api import Key
from fleetcache.devtools.simulation.cluster import Cluster
from fleetcache.devtools.simulation.control_plane import ControlPlane
from fleetcache.devtools.simulation.deletion import DELETION_ATTEMPT, deleting, using_key
from fleetcache.devtools.simulation.storage import translate
from fleetcache.devtools.testhub.server import Repo
from fleetcache.functions import naming, read
from fleetcache.quantity import to_bytes

# The invariants, by the names a violation carries.
MOUNTS_VERIFIED = "mounts-verified"  # no replica mounts a commit not fully verified on its volume
IN_USE_KEPT = "in-use-kept"  # nothing mounted or pinned is evicted or pruned, no mounted cache deleted
WITHIN_GRANT = "within-grant"  # nothing fans out beyond what its grant admitted
ONE_COMMIT = "one-commit-per-cluster"  # two only while an update rolls
STATUS_BOUNDED = "status-bounded"  # no status over its size bound, no message over its limit
CALLS_CLEAN = "calls-clean"  # no fatal result, no message over its limit
DELETIONS_COMPLETE = "deletions-complete"  # no deadlock; nothing left behind once users are gone
CONVERGES = "converges"  # after the faults: settled, Ready or a documented failure, and stays

# A status of this fleet (three clusters, one cache) far over what any fleetcache status needs:
# a ModelCache's is ~15 kB at any fleet size (design/model-cache.md), a grant's rows ~700 bytes.
STATUS_BYTES = 32 * 1024


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


@dataclass(frozen=True)
class Mount:
    """An engine Deployment on a cluster that mounts a cache volume, as its pods would."""

    cluster: str
    deployment: str
    namespace: str
    claim: str
    commit: str
    model_dir: Path  # the host directory its FLEETCACHE_MODEL names


def mounts(clusters: Mapping[str, Cluster]) -> list[Mount]:
    """Every engine Deployment on Cache delivery, on every cluster, with what it mounts."""
    found = []
    for name in sorted(clusters):
        cluster = clusters[name]
        for key, obj in sorted(cluster.objects.items()):
            if key[0] != "Deployment":
                continue
            pod_spec = read.get_path(obj, "spec.template.spec", {}) or {}
            container = (pod_spec.get("containers") or [{}])[0]
            env = {e.get("name"): e.get("value", "") for e in container.get("env", [])}
            if env.get("FLEETCACHE_DELIVERY") != "cache":
                continue
            claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
                      for v in pod_spec.get("volumes", []) if "persistentVolumeClaim" in v}
            claim = next((claims[m["name"]] for m in container.get("volumeMounts", [])
                          if m.get("name") in claims), "")
            host = cluster.claim_mounts(key[1], pod_spec, container)
            found.append(Mount(name, key[2], key[1], claim, env.get("FLEETCACHE_MODEL_REVISION", ""),
                               Path(translate(env.get("FLEETCACHE_MODEL", ""), host))))
    return found


def snapshot_problem(directory: Path, published: Mapping[str, str]) -> str:
    """Why `directory` is not exactly the published files (path -> sha256), or ""."""
    if not directory.is_dir():
        return f"{directory.name} is not on the volume"
    present = set()
    for parent, _, names in os.walk(directory):
        for name in names:
            present.add(os.path.relpath(os.path.join(parent, name), directory))
    if present - set(published):
        return f"files the hub never published: {sorted(present - set(published))[:3]}"
    for path, digest in sorted(published.items()):
        try:
            actual = hashlib.sha256((directory / path).read_bytes()).hexdigest()
        except OSError as err:
            return f"{path}: {type(err).__name__}"
        if actual != digest:
            return f"{path} does not hash to the hub's sha256"
    return ""


def hydrations_by_volume(control: ControlPlane) -> dict[tuple[str, str, str], dict]:
    """(cluster, namespace, claim) -> the ModelCacheHydration whose volume that is."""
    out = {}
    for hydration in control.of_kind("ModelCacheHydration"):
        claim = read.get_path(hydration, "status.volumeName") or naming.cache_volume_name(
            read.get_path(hydration, "spec.modelCacheName", ""))
        out[(read.get_path(hydration, "spec.clusterName", ""),
             hydration["metadata"].get("namespace", ""), claim)] = hydration
    return out


def model_cache_of(control: ControlPlane, namespace: str, claim: str) -> Key | None:
    for key in control.xrs:
        if key[0] == "ModelCache" and key[1] == namespace and \
                naming.cache_volume_name(key[2]) == claim:
            return key
    return None


@dataclass
class Checker:
    """The checks after every round, and what they remember from round to round (the pins
    published, the contents a grant ever admitted)."""

    repo: Repo
    pinned: set[tuple[str, str]] = field(default_factory=set)  # hydrations published as pinned
    admitted: set[str] = field(default_factory=set)  # manifest digests a grant admitted

    def published(self, commit: str) -> dict[str, str] | None:
        files = self.repo.commits.get(commit)
        return None if files is None else {path: f.sha256 for path, f in files.items()}

    def after_round(self, control: ControlPlane, clusters: Mapping[str, Cluster],
                    call_problems: Iterable[str]) -> list[Violation]:
        found = [Violation(CALLS_CLEAN, problem) for problem in call_problems]
        now_mounted = mounts(clusters)
        found += self.mounts_verified(control, now_mounted)
        found += self.in_use_kept(control, now_mounted)
        found += self.within_grant(control)
        found += self.one_commit(control, now_mounted)
        found += self.statuses_bounded(control)
        return found

    def mounts_verified(self, control: ControlPlane, now_mounted: list[Mount]) -> list[Violation]:
        found = []
        for mount in now_mounted:
            published = self.published(mount.commit)
            problem = "the hub never published that commit" if published is None else \
                snapshot_problem(mount.model_dir, published)
            if problem:
                found.append(Violation(MOUNTS_VERIFIED, (
                    f"{mount.cluster}/{mount.deployment} mounts {mount.commit[:10]} on "
                    f"{mount.claim}: {problem}")))
        return found

    def in_use_kept(self, control: ControlPlane, now_mounted: list[Mount]) -> list[Violation]:
        """A copy goes Evicted, prunes a commit, or its ModelCache goes, while an engine mounts
        it; a copy published pinned goes Evicted. A FleetCluster listing a mounted copy in
        status.cache.evicted is no removal: it decides on the copy's last status, and the copy
        re-checks its use before it obeys (decisions/hydration_gate.py)."""
        found = []
        by_volume = hydrations_by_volume(control)
        for mount in now_mounted:
            where = f"{mount.cluster}/{mount.deployment} mounts {mount.claim}"
            hydration = by_volume.get((mount.cluster, mount.namespace, mount.claim))
            if hydration is not None:
                name = f"{mount.namespace}/{hydration['metadata']['name']}"
                if read.get_path(hydration, "status.phase") == "Evicted":
                    found.append(Violation(IN_USE_KEPT, f"{where}, yet {name} is evicted"))
                if mount.commit in (read.get_path(hydration, "status.prunedCommits", []) or []):
                    found.append(Violation(IN_USE_KEPT, f"{where}, yet {name} pruned "
                                                        f"{mount.commit[:10]}"))
            cache = model_cache_of(control, mount.namespace, mount.claim)
            if cache is None:
                found.append(Violation(IN_USE_KEPT, f"{where}, yet its ModelCache is gone"))
            elif deleting(control.xrs[cache]):
                found.append(Violation(IN_USE_KEPT, f"{where}, yet ModelCache {cache[2]} is "
                                                    "being deleted"))
        pinned_now = set()
        for hydration in control.of_kind("ModelCacheHydration"):
            ident = (hydration["metadata"].get("namespace", ""), hydration["metadata"]["name"])
            cluster = read.get_path(hydration, "spec.clusterName", "")
            evicted = read.get_path(hydration, "status.phase") == "Evicted"
            if evicted and ident in self.pinned:
                found.append(Violation(IN_USE_KEPT, f"{ident[0]}/{ident[1]} on {cluster} was "
                                                    "published pinned, and is evicted"))
            if read.get_path(hydration, "status.pinned") is True and not evicted:
                pinned_now.add(ident)
        self.pinned = pinned_now
        return found

    def within_grant(self, control: ControlPlane) -> list[Violation]:
        """A grant projecting past its quota; more copies of a content, not leaving, than its
        admitted footprint counts; a copy of content no grant ever admitted."""
        found = []
        hydrations = control.of_kind("ModelCacheHydration")
        for grant in control.of_kind("ModelCacheGrant"):
            status = grant.get("status", {})
            name = grant["metadata"]["name"]
            quota, projected = status.get("quotaBytes"), status.get("projectedBytes")
            if isinstance(quota, int) and isinstance(projected, int) and projected > quota:
                found.append(Violation(WITHIN_GRANT, f"grant {name} projects {projected} bytes "
                                                     f"over its quota of {quota}"))
            for row in status.get("caches", []) or []:
                footprint = row.get("admittedFootprint") or {}
                digest = footprint.get("manifestDigest")
                if not digest:
                    continue
                self.admitted.add(digest)
                fanned = [h for h in hydrations
                          if h["metadata"].get("namespace") == grant["metadata"].get("namespace")
                          and read.get_path(h, "spec.modelCacheName") == row.get("name")
                          and read.get_path(h, "spec.manifestDigest") == digest
                          and not read.get_path(h, "spec.removal") and not deleting(h)]
                if len(fanned) > int(footprint.get("clusters", 0)):
                    found.append(Violation(WITHIN_GRANT, (
                        f"ModelCache {row.get('name')} has {len(fanned)} copies of "
                        f"{digest[:10]}, its grant {name} admitted {footprint.get('clusters')}")))
        for hydration in hydrations:
            digest = read.get_path(hydration, "spec.manifestDigest")
            if digest and digest not in self.admitted:
                found.append(Violation(WITHIN_GRANT, (
                    f"{hydration['metadata']['name']} holds {digest[:10]}, which no grant "
                    "ever admitted")))
        return found

    def one_commit(self, control: ControlPlane, now_mounted: list[Mount]) -> list[Violation]:
        """More than two commits of one cache served on one cluster, or two of which neither is
        the one its ModelCache resolved (no update rolls between them)."""
        found = []
        commits: dict[tuple[str, str, str], set[str]] = {}
        for mount in now_mounted:
            commits.setdefault((mount.cluster, mount.namespace, mount.claim), set()).add(mount.commit)
        for (cluster, namespace, claim), served in sorted(commits.items()):
            cache = model_cache_of(control, namespace, claim)
            resolved = read.get_path(control.xrs.get(cache, {}) if cache else {},
                                     "status.resolved.commit", "")
            if len(served) > 2 or (len(served) == 2 and resolved not in served):
                found.append(Violation(ONE_COMMIT, (
                    f"{claim} on {cluster} serves {sorted(c[:10] for c in served)} while its "
                    f"ModelCache resolved {str(resolved)[:10] or 'nothing'}")))
        return found

    def statuses_bounded(self, control: ControlPlane) -> list[Violation]:
        found = []
        for key, xr in sorted(control.xrs.items()):
            status = xr.get("status", {})
            size = len(json.dumps(status, sort_keys=True, default=str))
            if size > STATUS_BYTES:
                found.append(Violation(STATUS_BOUNDED, f"{key[0]}/{key[2]}'s status is {size} "
                                                       f"bytes, over {STATUS_BYTES}"))
            said = [c.get("message", "") for c in status.get("conditions", []) or []]
            said.append(status.get("message", ""))
            for message in said:
                if isinstance(message, str) and len(message) > messages.MESSAGE_LIMIT:
                    found.append(Violation(STATUS_BOUNDED, (
                        f"{key[0]}/{key[2]} says {len(message)} characters, over "
                        f"{messages.MESSAGE_LIMIT}")))
        return found


def deletions_complete(control: ControlPlane, clusters: Mapping[str, Cluster]) -> list[Violation]:
    """Once the faults stopped and the fleet settled: nothing is still being deleted unless
    it waits for a user that is still there (`held`), a deletion the Usage webhook refused was
    replayed once no Usage holds the object, and no remote object outlives the Object that
    managed it."""
    found = []
    for key in control.api.keys():
        obj = control.api.get(key) or {}
        if deleting(obj) and not held(control, clusters, key):
            found.append(Violation(DELETIONS_COMPLETE, (
                f"{key[0]}/{key[2]} is still being deleted (finalizers "
                f"{obj['metadata'].get('finalizers', [])})")))
        elif DELETION_ATTEMPT in (obj.get("metadata", {}).get("annotations") or {}) and \
                not control.api.usages_of(key):
            found.append(Violation(DELETIONS_COMPLETE, (
                f"{key[0]}/{key[2]}'s refused deletion was never replayed, though no Usage "
                "holds it any more")))
    managed: dict[str, set[Key]] = {}
    for obj in control.others.values():
        if obj.get("kind") == "Object":
            manifest = read.get_path(obj, "spec.forProvider.manifest", {}) or {}
            meta = manifest.get("metadata", {})
            managed.setdefault(read.get_path(obj, "spec.providerConfigRef.name", ""), set()).add(
                (manifest.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")))
    for name, cluster in sorted(clusters.items()):
        for key in sorted(cluster.objects):
            if key[0] not in ("Namespace", "ResourceQuota") and key not in managed.get(name, set()):
                found.append(Violation(DELETIONS_COMPLETE, (
                    f"{key[0]} {key[1]}/{key[2]} is left on {name} with no Object managing it")))
    return found


def held(control: ControlPlane, clusters: Mapping[str, Cluster], key: Key) -> bool:
    """Whether a deletion waits, as designed, for a user still there: a Usage for its `by`
    (the Usage controller), an Object for its remote PVC a pod uses (pvc-protection), or a
    foreground deletion for dependents that are themselves held."""
    obj = control.api.get(key) or {}
    if key[0] == "Usage":
        return (using := using_key(obj)) is not None and control.api.get(using) is not None
    if key[0] == "Object":
        manifest = read.get_path(obj, "spec.forProvider.manifest", {}) or {}
        cluster = clusters.get(read.get_path(obj, "spec.providerConfigRef.name", ""))
        remote = (manifest.get("kind", ""), read.get_path(manifest, "metadata.namespace", ""),
                  read.get_path(manifest, "metadata.name", ""))
        return cluster is not None and remote[0] == "PersistentVolumeClaim" and \
            remote in cluster.objects and cluster.claim_used(remote)
    waiting = [dep for dep in control.api.dependents(obj) if dep != key]
    return bool(waiting) and all(held(control, clusters, dep) for dep in waiting)


def settled_as_documented(control: ControlPlane, commits: Mapping[str, str]) -> list[Violation]:
    """Once settled: every composite Ready, or not Ready for a reason the design documents as
    lasting, with its cause present (`lasting`); the ModelCache resolved its revision as the
    hub names it; every replica on Cache serves the commit the ModelCache resolved."""
    found = []
    for key, xr in sorted(control.xrs.items()):
        if not read.is_true(xr, "Ready") and not lasting(control, xr):
            found.append(Violation(CONVERGES, (
                f"{key[0]}/{key[2]} settled not Ready: {read.get_path(xr, 'status.reason', '')} "
                f"{messages.clipped(read.get_path(xr, 'status.message', ''))}")))
    for cache in control.of_kind("ModelCache"):
        revision = read.get_path(cache, "spec.source.huggingFace.revision", "")
        resolved = read.get_path(cache, "status.resolved.commit", "")
        if read.is_true(cache, "Resolved") and resolved != commits.get(revision):
            found.append(Violation(CONVERGES, f"ModelCache {cache['metadata']['name']} resolved "
                                              f"{resolved[:10]}, the hub's {revision} is "
                                              f"{commits.get(revision, '')[:10]}"))
        for replica in control.of_kind("ModelReplica"):
            served = read.get_path(replica, "spec.cache.commit", "")
            if read.get_path(replica, "spec.cache.modelCacheName") == cache["metadata"]["name"] \
                    and read.get_path(replica, "spec.delivery") == "Cache" and served != resolved:
                found.append(Violation(CONVERGES, (
                    f"{replica['metadata']['name']} settled on {served[:10]}, its ModelCache "
                    f"resolved {resolved[:10]}")))
    return found


def lasting(control: ControlPlane, xr: dict) -> bool:
    """Whether a composite that is not Ready is in a state the design documents as lasting,
    with its cause present: a copy its cluster has no room for (CapacityLow, or Evicted and
    not re-warmed while no replica is placed there, design/capacity.md), a copy kept after its
    cluster left the placement (LeftPlacement, design/model-cache.md "Retention"), a rollout
    slot held by such a copy (RolloutQueued), more replicas than the placement can hold
    (MaxReplicasPerCluster), a ModelCache that does not exist (ModelCacheNotFound), and the
    composites that only report those."""
    kind, reason = xr["kind"], read.get_path(xr, "status.reason", "")
    namespace = xr["metadata"].get("namespace", "")
    if kind == "ModelCacheHydration":
        cluster = read.get_path(xr, "spec.clusterName", "")
        if reason == "LeftPlacement":
            return bool(read.get_path(xr, "spec.removal"))
        if reason == "CapacityLow":
            return not has_room(control, cluster, xr)
        if read.get_path(xr, "status.phase") == "Evicted":
            return not has_room(control, cluster, xr) or not any(
                read.get_path(r, "spec.clusterName") == cluster
                and (read.get_path(r, "metadata.labels", {}) or {}).get(naming.LABEL_MODEL_CACHE)
                == read.get_path(xr, "spec.modelCacheName") for r in control.of_kind("ModelReplica"))
        if reason == "RolloutQueued":
            return any(lasting(control, other) for other in copies_of(control, namespace,
                       read.get_path(xr, "spec.modelCacheName", "")) if other is not xr
                       and not read.is_true(other, "Ready"))
        return False
    if kind == "ModelCache":
        return any(not read.is_true(h, "Ready") and lasting(control, h)
                   for h in copies_of(control, namespace, xr["metadata"]["name"]))
    cache_name = read.get_path(xr, "spec.modelCacheRef.name") or \
        (read.get_path(xr, "metadata.labels", {}) or {}).get(naming.LABEL_MODEL_CACHE, "")
    if reason == "ModelCacheNotFound":
        return ("ModelCache", namespace, cache_name) not in control.xrs
    if kind == "ModelDeployment":
        if reason == "MaxReplicasPerCluster":
            clusters = read.get_path(xr, "spec.placement.clusterNames", []) or []
            return read.get_path(xr, "spec.replicas", 0) > \
                read.get_path(xr, "spec.maxReplicasPerCluster", 1) * len(clusters)
        replicas = [r for r in control.of_kind("ModelReplica")
                    if read.get_path(r, "spec.deploymentName") == xr["metadata"]["name"]]
        return any(not read.is_true(r, "Ready") for r in replicas) and all(
            lasting(control, r) for r in replicas if not read.is_true(r, "Ready"))
    if kind == "ModelReplica":
        cluster = read.get_path(xr, "spec.clusterName", "")
        return any(read.get_path(h, "spec.clusterName") == cluster and not read.is_true(h, "Ready")
                   and lasting(control, h) for h in copies_of(control, namespace, cache_name))
    return False


def copies_of(control: ControlPlane, namespace: str, cache: str) -> list[dict]:
    return [h for h in control.of_kind("ModelCacheHydration")
            if h["metadata"].get("namespace") == namespace
            and read.get_path(h, "spec.modelCacheName") == cache]


def has_room(control: ControlPlane, cluster: str, hydration: dict) -> bool:
    """Whether the cluster's capacity budget below its high watermark fits the copy."""
    cache = read.get_path(control.xrs.get(("FleetCluster", "", cluster), {}), "status.cache", {}) or {}
    capacity = cache.get("capacityBytes")
    if not isinstance(capacity, int):
        return True
    high = read.get_path(control.xrs[("FleetCluster", "", cluster)], "spec.cache.highWatermark", 80)
    try:
        size = to_bytes(str(read.get_path(hydration, "spec.storage.size", "0")))
    except ValueError:
        return True
    return size <= capacity * high / 100
