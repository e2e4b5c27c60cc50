"""compose-model-deployment: place replicas across the fleet, then decide per replica
whether it mounts the warm cache or loads from the source.

Lifecycle, top to bottom:
1. resolve inputs: read the spec; ask Crossplane for every FleetCluster and, with
   modelCacheRef, for the ModelCache by name in this namespace; read where each replica
   runs now from the observed ModelReplicas;
2. place: candidates are the Ready FleetClusters matching spec.placement; a replica keeps
   its cluster while that cluster is a candidate (and under maxReplicasPerCluster); new
   replicas go to the best-ranked candidate (cache Ready, then a cache serving the previous
   commit, then a cache target not yet Ready, then the rest; ties by fewest replicas of this
   deployment, then by name);
   scaling down removes the highest index first;
3. decide delivery per replica by the table of DESIGN.md §3 and spec.delivery, except that
   a cluster whose cache is not Ready on the resolved commit but still holds a verified
   earlier one (its servingCommit) keeps serving that one from the cache;
4. compose one ModelReplica per placed replica;
5. report replicas, placements and the ReplicasScheduled / ReplicasReady /
   ModelCacheResolved conditions; ready when every desired replica is ready.
"""

from __future__ import annotations

import copy
import heapq
from dataclasses import dataclass, field
from typing import Any, Mapping

from fleetcache.functions import kit
from fleetcache.functions.models import model_deployment as api
from fleetcache.functions.model_replica import Engine, hf_snapshot_path

FLEET_CLUSTERS_KEY = "fleet-clusters"
MODEL_CACHE_KEY = "model-cache"
REPLICA_PREFIX = "replica-"
MAX_REPLICAS = 1000

# --- 1. inputs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """spec.delivery: what a replica does while its cluster's cache is not Ready."""

    while_hydrating: str
    on_hydration_failure: str
    switch_to_cache: str


@dataclass(frozen=True)
class DeploymentSpec:
    cache_name: str | None
    repo: str | None          # model.huggingFace.repo, when no cache is used
    revision: str
    replicas: int
    cluster_names: tuple[str, ...] | None
    cluster_selector: dict | None
    policy: Policy
    engine: Engine
    max_per_cluster: int | None


def read_spec(spec: Any) -> DeploymentSpec:
    """The spec read through the ModelDeployment model; every error names the field and the
    fix."""
    spec = kit.read_spec(api.ModelDeployment, spec)
    cache_ref, model = spec.get("modelCacheRef"), spec.get("model")
    names, selector = spec["placement"].get("clusterNames"), \
        spec["placement"].get("clusterSelector")
    hf = model["huggingFace"] if model else {}
    delivery = spec["delivery"]
    return DeploymentSpec(
        cache_name=cache_ref["name"] if cache_ref else None,
        repo=hf.get("repo"),
        revision=hf.get("revision", ""),
        replicas=spec["replicas"],
        cluster_names=tuple(sorted(set(names))) if names is not None else None,
        cluster_selector=selector,
        policy=Policy(delivery["whileHydrating"], delivery["onHydrationFailure"],
                      delivery["switchToCache"]),
        engine=Engine.of(spec["engine"]),
        max_per_cluster=spec.get("maxReplicasPerCluster"),
    )


@dataclass(frozen=True)
class ClusterCache:
    """One cluster's row of the ModelCache's status.clusters."""

    phase: str
    bytes_done: int = 0
    bytes_total: int = 0
    reason: str = ""
    message: str = ""
    serving_commit: str = ""  # an earlier commit still verified on the volume, or ""

    def as_hydration(self) -> dict:
        return {"phase": self.phase, "bytesDone": self.bytes_done,
                "bytesTotal": self.bytes_total, "reason": self.reason, "message": self.message}


@dataclass(frozen=True)
class Model:
    """What the replicas load, and where the cache stands on each of its clusters."""

    repo: str
    revision: str
    commit: str
    cache_name: str | None = None
    cache_found: bool = False
    targets: Mapping[str, ClusterCache] = field(default_factory=dict)

    def cache_mount(self, commit: str) -> dict:
        """A Cache replica's spec.cache: the cache's PVC and one commit's snapshot inside it."""
        mount = kit.CACHE_MOUNT_PATH
        return {"modelCacheName": self.cache_name,
                "volumeName": kit.cache_volume_name(self.cache_name or ""), "mountPath": mount,
                "snapshotPath": hf_snapshot_path(mount, self.repo, commit), "commit": commit}

    def as_status(self) -> dict:
        out = {"repo": self.repo, "revision": self.revision, "commit": self.commit}
        if self.cache_name:
            out["modelCacheName"] = self.cache_name
        return out


def read_model(spec: DeploymentSpec, caches: list[dict], latched: Any) -> Model:
    """The model from model.huggingFace, or from the ModelCache's status; a missing cache
    falls back to the model this deployment last served (status.model), if any."""
    if spec.cache_name is None:
        return Model(spec.repo or "", spec.revision, "")
    if not caches:
        last = latched if isinstance(latched, Mapping) else {}
        same = last.get("modelCacheName") == spec.cache_name
        return Model(str(last.get("repo") or "") if same else "",
                     str(last.get("revision") or "") if same else "",
                     str(last.get("commit") or "") if same else "", spec.cache_name)
    cache = caches[0]
    resolved = kit.get_path(cache, "status.resolved")
    resolved = resolved if isinstance(resolved, Mapping) else {}
    hf = kit.get_path(cache, "spec.source.huggingFace")
    hf = hf if isinstance(hf, Mapping) else {}
    targets = {}
    rows = kit.get_path(cache, "status.clusters")
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, Mapping) and isinstance(row.get("name"), str):
            serving = row.get("servingCommit")
            targets[row["name"]] = ClusterCache(
                str(row.get("phase") or "Pending"), kit.as_int(row.get("bytesDone")),
                kit.as_int(row.get("bytesTotal")), str(row.get("reason") or ""),
                str(row.get("message") or ""),
                serving if isinstance(serving, str) and kit.COMMIT_SHAPE.match(serving) else "")
    return Model(str(resolved.get("repo") or hf.get("repo") or ""),
                 str(resolved.get("revision") or hf.get("revision") or "main"),
                 str(resolved.get("commit") or ""), spec.cache_name, True, targets)


@dataclass(frozen=True)
class Previous:
    """Where a replica ran at the last compose, from its observed ModelReplica."""

    cluster: str
    delivery: str
    ready: bool


def previous_replicas(request: kit.Request) -> dict[int, Previous]:
    found: dict[int, Previous] = {}
    for key, observed in request.observed.items():
        if not key.startswith(REPLICA_PREFIX) or not isinstance(observed, Mapping):
            continue
        index, cluster = kit.get_path(observed, "spec.replica"), kit.get_path(
            observed, "spec.clusterName")
        if isinstance(index, int) and not isinstance(index, bool) and isinstance(cluster, str):
            found[index] = Previous(cluster, str(kit.get_path(observed, "spec.delivery") or ""),
                                    kit.is_true(observed, "Ready"))
    return found


# --- 2. place -----------------------------------------------------------------------------


def candidate_clusters(spec: DeploymentSpec, fleet: list[dict]) -> tuple[list[str], list[str]]:
    """(Ready clusters matching the placement in name order, named clusters missing)."""
    views = {}
    for resource in fleet:
        if isinstance(resource, Mapping):
            view = kit.FleetClusterView.of(dict(resource))
            if view.name:
                views[view.name] = view
    if spec.cluster_names is not None:
        missing = [n for n in spec.cluster_names if n not in views]
        return [n for n in spec.cluster_names if n in views and views[n].ready], missing
    return [name for name, view in sorted(views.items()) if view.ready and kit.selector_matches(
        spec.cluster_selector, view.labels, "spec.placement.clusterSelector")], []


def cache_tier(model: Model, cluster: str) -> int:
    """0: the cache is Ready there; 1: it still serves a previous commit; 2: a cache target
    not yet Ready; 3: the rest, failed targets included."""
    row = model.targets.get(cluster)
    if row is None:
        return 3
    if row.phase == "Ready" and model.commit:
        return 0
    if row.serving_commit:
        return 1
    return 3 if row.phase == "Failed" else 2


def place(spec: DeploymentSpec, candidates: list[str], model: Model,
          previous: Mapping[int, Previous]) -> dict[int, str | None]:
    """Replica index -> cluster (None: nowhere to go). Replicas keep a cluster that is
    still a candidate, lowest index first; the others take the best-ranked candidate."""
    cap = spec.max_per_cluster or MAX_REPLICAS
    counts = {name: 0 for name in candidates}
    placed: dict[int, str | None] = {}
    for index in range(spec.replicas):
        before = previous.get(index)
        if before and before.cluster in counts and counts[before.cluster] < cap:
            placed[index] = before.cluster
            counts[before.cluster] += 1
    heap = [(cache_tier(model, name), count, name) for name, count in counts.items()
            if count < cap]
    heapq.heapify(heap)
    for index in range(spec.replicas):
        if index in placed:
            continue
        if not heap:
            placed[index] = None
            continue
        tier, count, name = heapq.heappop(heap)
        placed[index] = name
        if count + 1 < cap:
            heapq.heappush(heap, (tier, count + 1, name))
    return placed


# --- 3. decide delivery -------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    delivery: str  # Cache | Source | Wait | Fail
    reason: str
    commit: str  # the commit the replica loads ("" for Wait/Fail, or before a resolve)


def decide(model: Model, cluster: str, policy: Policy, before: Previous | None) -> Delivery:
    """One replica's delivery by DESIGN.md §3's table and spec.delivery, with one addition:
    a cluster not Ready on the resolved commit that still holds a verified earlier commit
    (servingCommit) keeps serving that one from the cache, hydrating or failed alike."""
    if model.cache_name is None:
        return Delivery("Source", "NoModelCache", model.commit)
    if not model.cache_found:
        return Delivery("Source", "ModelCacheNotFound", model.commit)
    row = model.targets.get(cluster)
    if row is None:
        return Delivery("Source", "NotACacheTarget", model.commit)
    # Already loading the resolved commit from the source on this cluster: never sent back
    # to an older snapshot (a downgrade and a second roll); it follows the table.
    running_source = before is not None and before.cluster == cluster \
        and before.delivery == "Source"
    if row.phase == "Ready" and model.commit:
        if policy.switch_to_cache == "Never" and running_source:
            return Delivery("Source", "SwitchToCacheNever", model.commit)
        return Delivery("Cache", "CacheReady", model.commit)
    if row.serving_commit and not running_source:
        reason = "PreviousCommitHydrationFailed" if row.phase == "Failed" \
            else "PreviousCommitWhileHydrating"
        return Delivery("Cache", reason, row.serving_commit)
    if row.phase == "Failed":
        if policy.on_hydration_failure == "Fail":
            return Delivery("Fail", "HydrationFailed", "")
        return Delivery("Source", "HydrationFailed", model.commit)
    if policy.while_hydrating == "Wait":
        return Delivery("Wait", "Hydrating", "")
    return Delivery("Source", "Hydrating", model.commit)


# --- 4. compose ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    index: int
    cluster: str | None
    delivery: str
    reason: str
    ready: bool
    commit: str = ""

    @property
    def previous_commit(self) -> bool:
        return self.reason.startswith("PreviousCommit")

    def as_status(self) -> dict:
        return {"replica": self.index, "cluster": self.cluster or "",
                "delivery": self.delivery, "reason": self.reason, "commit": self.commit}


def replica_key(index: int) -> str:
    return f"{REPLICA_PREFIX}{index:04d}"


def model_replica(request: kit.Request, engine: dict, model: Model,
                  placement: Placement) -> dict:
    cluster = placement.cluster or ""
    replica_spec: dict[str, Any] = {
        "deploymentName": request.name,
        "replica": placement.index,
        "clusterName": cluster,
        "delivery": placement.delivery,
        "model": {"repo": model.repo, "revision": model.revision,
                  "commit": placement.commit if placement.delivery == "Cache" else model.commit},
        "engine": copy.deepcopy(engine),
    }
    if placement.delivery == "Cache":
        replica_spec["cache"] = model.cache_mount(placement.commit)
    if placement.delivery in ("Wait", "Fail"):
        replica_spec["hydration"] = model.targets[cluster].as_hydration()
    return {
        "apiVersion": kit.API_VERSION,
        "kind": "ModelReplica",
        "metadata": {
            "name": kit.child_name(request.name, str(placement.index)),
            "namespace": request.namespace,
            "labels": {f"{kit.GROUP}/model-deployment": kit.label_value(request.name),
                       kit.LABEL_CLUSTER: kit.label_value(cluster)},
        },
        "spec": replica_spec,
    }


def compose_replicas(request: kit.Request, spec: DeploymentSpec, model: Model,
                     candidates: list[str], outcome: kit.Outcome) -> list[Placement]:
    previous = previous_replicas(request)
    engine = spec.engine.as_spec()
    placements = []
    for index, cluster in sorted(place(spec, candidates, model, previous).items()):
        before = previous.get(index)
        if cluster is None:
            reason = "MaxReplicasPerCluster" if candidates else "NoClusters"
            placements.append(Placement(index, None, "", reason, False))
            continue
        chosen = decide(model, cluster, spec.policy, before)
        ready = before is not None and before.cluster == cluster and before.ready
        placement = Placement(index, cluster, chosen.delivery, chosen.reason, ready,
                              chosen.commit)
        outcome.compose(replica_key(index), model_replica(request, engine, model, placement))
        placements.append(placement)
    return placements


# --- 5. report ----------------------------------------------------------------------------


def report(request: kit.Request, spec: DeploymentSpec, model: Model, candidates: list[str],
           missing: list[str], placements: list[Placement], outcome: kit.Outcome) -> None:
    placed = [p for p in placements if p.cluster]

    def count(delivery: str) -> int:
        return sum(1 for p in placed if p.delivery == delivery)

    ready = sum(1 for p in placed if p.ready)
    previous = sum(1 for p in placed if p.previous_commit)
    desired = spec.replicas
    outcome.status = {
        "replicas": {"desired": desired, "scheduled": len(placed), "ready": ready,
                     "cache": count("Cache"), "source": count("Source"),
                     "waiting": count("Wait"), "failed": count("Fail"),
                     "previousCommit": previous},
        "summary": f"{ready}/{desired}",
        "placements": [p.as_status() for p in placements],
    }
    if model.repo:
        outcome.status["model"] = model.as_status()

    gone = f"; clusterNames not found: {', '.join(missing)}" if missing else ""
    if len(placed) == desired:
        outcome.condition("ReplicasScheduled", True, "Scheduled",
                          f"{desired} replicas on {len({p.cluster for p in placed})} "
                          f"clusters{gone}")
    elif not candidates:
        outcome.condition("ReplicasScheduled", False, "NoClusters", kit.with_remedy(
            f"no Ready FleetCluster matches spec.placement{gone}", "NoClusters"))
    else:
        outcome.condition("ReplicasScheduled", False, "MaxReplicasPerCluster", kit.with_remedy(
            f"{len(placed)} of {desired} replicas scheduled: {len(candidates)} Ready clusters "
            f"x maxReplicasPerCluster {spec.max_per_cluster}{gone}", "MaxReplicasPerCluster"))

    if ready == desired:
        outcome.condition("ReplicasReady", True, "Available", f"{ready}/{desired} replicas ready")
    else:
        waiting, failed = count("Wait"), count("Fail")
        detail = "".join([f", {waiting} waiting for the cache" if waiting else "",
                          f", {failed} failed (hydration failed)" if failed else "",
                          f", {desired - len(placed)} unscheduled" if len(placed) < desired
                          else ""])
        outcome.condition("ReplicasReady", False, "ReplicasNotReady",
                          f"{ready}/{desired} replicas ready{detail}")

    if model.cache_name is None:
        outcome.condition("ModelCacheResolved", True, "NoModelCache",
                          f"spec.model.huggingFace: every replica loads {model.repo}@"
                          f"{model.revision} from the source")
    elif not model.cache_found:
        outcome.condition("ModelCacheResolved", False, "ModelCacheNotFound", kit.with_remedy(
            f"ModelCache {request.namespace}/{model.cache_name} does not exist; every replica "
            "loads from the source", "ModelCacheNotFound"))
    elif model.commit:
        stale = (f"; {previous} replicas serve a previous commit from their cluster's cache "
                 f"until this one is Ready there") if previous else ""
        outcome.condition("ModelCacheResolved", True, "Resolved",
                          f"ModelCache {model.cache_name}: {model.repo}@{model.revision} is "
                          f"commit {model.commit}{stale}")
    else:
        outcome.condition("ModelCacheResolved", False, "Resolving",
                          f"ModelCache {model.cache_name} has not resolved {model.repo}@"
                          f"{model.revision} to a commit yet")
    outcome.composite_ready = ready == desired


def compose(request: kit.Request) -> kit.Outcome:
    outcome = kit.Outcome()
    spec = read_spec(request.spec)
    outcome.require(FLEET_CLUSTERS_KEY, kit.FLEET_CLUSTERS)
    if spec.cache_name is not None:
        outcome.require(MODEL_CACHE_KEY, kit.Requirement(
            kit.API_VERSION, "ModelCache", match_name=spec.cache_name,
            namespace=request.namespace))
    if FLEET_CLUSTERS_KEY not in request.required or (
            spec.cache_name is not None and MODEL_CACHE_KEY not in request.required):
        kit.carry_over(request, outcome, request.observed)  # not fetched yet: keep all
        return outcome

    model = read_model(spec, request.required.get(MODEL_CACHE_KEY) or [],
                       request.status.get("model"))
    candidates, missing = candidate_clusters(spec, request.required[FLEET_CLUSTERS_KEY])
    placements = compose_replicas(request, spec, model, candidates, outcome)
    report(request, spec, model, candidates, missing, placements, outcome)
    return outcome
