"""compose-model-deployment: place replicas across the fleet, then decide per replica
whether it mounts the warm cache or loads from the source.

Lifecycle, top to bottom:
1. resolve inputs: read the spec; ask Crossplane for every FleetCluster and, with
   modelCacheRef, for the ModelCache by name in this namespace (its resolved commit and
   its placement) and for its ModelCacheHydrations by label (where the cache stands on
   each cluster, from each hydration's own status; read as views/served_model.py says);
   read where each replica runs now from the observed ModelReplicas;
2. place: candidates are the Ready FleetClusters matching spec.placement; a replica keeps
   its cluster while that cluster is a candidate (and under maxReplicasPerCluster); new
   replicas go to the best-ranked candidate (cache Ready, then a cache serving the previous
   commit, then a cache target not yet Ready, then the rest; ties by fewest replicas of this
   deployment, then by name); scaling down removes the highest index first
   (decisions/replica_placement.py);
3. decide delivery per replica by the table of DESIGN.md §3 and spec.delivery, except that
   a cluster whose cache is not Ready on the resolved commit but still holds a verified
   earlier one (its servingCommit) keeps serving that one from the cache, and that on a
   cluster holding the cache on tier Node, Node delivery (the node's own copy) is tried
   before the volume, and that while the cache rolls out in waves (status.rollout, not
   Complete) a cluster it holds on earlier content serves that content's commit
   (decisions/delivery.py, decisions/node_delivery.py); on a cluster that mounts image
   volumes (spec.features.imageVolumes), a cache with an OCI artifact of the commit served is
   mounted as that artifact by digest (Image), unless the replica could not mount it there
   (decisions/image_delivery.py);
4. compose one ModelReplica per placed replica, carrying only what is its own (index,
   cluster, delivery, model, cache mount) and the digest of the engine: the replica reads
   the shared spec.engine from this ModelDeployment, so 1,000 replicas of a large engine
   spec stay far under Crossplane's message limits;
5. report replicas, placements and the ReplicasScheduled / ReplicasReady /
   ModelCacheResolved conditions, and the status.reason they add up to (the REASON
   column); ready when every desired replica is ready.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetcache import messages, reasons, shapes
from fleetcache.apis import specs
from fleetcache.apis.models import model_deployment as api
from fleetcache.functions import naming, protocol, read
from fleetcache.functions.decisions import engine_image
from fleetcache.functions.decisions.delivery import Policy, decide
from fleetcache.functions.decisions.node_delivery import NodePolicy
from fleetcache.functions.decisions.replica_placement import place
from fleetcache.functions.k8s import objects
from fleetcache.functions.node_tier.warmer_names import VOLUME_MOUNT
from fleetcache.functions.views import model_cache as model_cache_view
from fleetcache.functions.views import placement
from fleetcache.functions.views.fleet_cluster import FLEET_CLUSTERS, FleetClusterView
from fleetcache.functions.views.hydration import report_of
from fleetcache.functions.views.model_replica import Engine, Previous
from fleetcache.functions.views.node_tier import NodeTier
from fleetcache.functions.views.served_model import (
    Content,
    Files,
    Model,
    cache_targets,
    held_content,
    held_report,
    hydrations_by_cluster,
    mountable_artifact,
    rolling_out,
    text_at,
    volume_name,
)

FLEET_CLUSTERS_KEY = "fleet-clusters"
MODEL_CACHE_KEY = "model-cache"
HYDRATIONS_KEY = "model-cache-hydrations"
REPLICA_PREFIX = "replica-"
# status.placements rows: every ModelReplica requires this ModelDeployment (for its engine),
# so its status stays small; each replica's own placement is on the ModelReplica.
LISTED_PLACEMENTS = 100


# --- 1. inputs ----------------------------------------------------------------------------


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
    spec = specs.read_spec(api.ModelDeployment, spec)
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
                      delivery["switchToCache"], NodePolicy.of(delivery["node"])),
        engine=Engine.of(spec["engine"]),
        max_per_cluster=spec.get("maxReplicasPerCluster"),
    )


def read_model(spec: DeploymentSpec, request: protocol.Request, outcome: protocol.Outcome) -> Model:
    """The model from model.huggingFace, or from the ModelCache's status.resolved with each
    target cluster's standing read from its ModelCacheHydration (report_of, the
    reading the ModelCache itself does; while the cache rolls out in waves, a cluster held
    on earlier content is read against that content); a missing cache falls back to the
    model this deployment last served (status.model), if any."""
    if spec.cache_name is None:
        return Model(spec.repo or "", spec.revision, "")
    cache = next((c for c in request.required.get(MODEL_CACHE_KEY) or []
                  if isinstance(c, Mapping)), None)
    if cache is None:
        last = request.status.get("model")
        last = last if isinstance(last, Mapping) and last.get("modelCacheName") == \
            spec.cache_name else {}
        return Model(text_at(last, "repo"), text_at(last, "revision"), text_at(last, "commit"),
                     spec.cache_name)
    raw = read.get_path(cache, "status.resolved")
    resolved = model_cache_view.read_resolved(raw) or {}
    if raw is not None and not resolved:
        outcome.warnings.append(f"ModelCache {request.namespace}/{spec.cache_name} "
                                f"status.resolved {messages.shown(raw)} is not a resolve result; "
                                "read as not resolved yet")
    hf = read.mapping_at(cache, "spec.source.huggingFace")
    files = Files.of(cache, outcome)
    # The hydrations read the resolved repo ("" for a volume served in place); the
    # replicas need a name for it.
    seen_as = text_at(resolved, "repo") or text_at(hf, "repo")
    hydrated = hydrations_by_cluster(spec.cache_name, request.required.get(HYDRATIONS_KEY) or [],
                                     resolved)
    targets, node_tiers, volumes = {}, {}, {}
    held: dict[str, Content] = {}
    rolling = rolling_out(cache)
    for target in cache_targets(cache, request.required.get(FLEET_CLUSTERS_KEY) or [], hydrated):
        hydration = hydrated.get(target.name)
        content = held_content(hydration, resolved) if rolling else None
        if content is not None:
            held[target.name] = content
            targets[target.name] = held_report(target, hydration, content, seen_as)
        else:
            targets[target.name] = report_of(
                target, hydration, read.as_int(resolved.get("bytes")), resolved, seen_as)
        if claim := volume_name(hydration):
            volumes[target.name] = claim
        tier = NodeTier.of(hydration)
        if tier is not None and not files.flat:  # `select` links a Hugging Face cache
            node_tiers[target.name] = tier
    digest = text_at(resolved, "manifestDigest")
    repo = seen_as or (files.name if files.in_place else "")
    from_hub = bool(hf) or bool(read.mapping_at(cache, "spec.source.volume.manifest.huggingFace"))
    return Model(repo, text_at(resolved, "revision") or text_at(hf, "revision") or "main",
                 text_at(resolved, "commit"), spec.cache_name, True, targets,
                 digest if shapes.is_sha256(digest) else "", node_tiers,
                 files, volumes, from_hub, held, mountable_artifact(cache),
                 image_clusters(request.required.get(FLEET_CLUSTERS_KEY) or []),
                 engine_image.by_cluster(spec.engine.image, spec.cache_name, hydrated))


def image_clusters(fleet: list[Any]) -> frozenset[str]:
    """The FleetClusters that declare spec.features.imageVolumes."""
    views = (FleetClusterView.of(dict(c)) for c in fleet if isinstance(c, Mapping))
    return frozenset(view.name for view in views if view.name and view.image_volumes)


def previous_replicas(request: protocol.Request) -> dict[int, Previous]:
    found: dict[int, Previous] = {}
    for key, observed in request.observed.items():
        if not key.startswith(REPLICA_PREFIX) or not isinstance(observed, Mapping):
            continue
        index, cluster = read.get_path(observed, "spec.replica"), read.get_path(
            observed, "spec.clusterName")
        if isinstance(index, int) and not isinstance(index, bool) and isinstance(cluster, str):
            node = {**read.mapping_at(observed, "spec.nodeCache")}
            if not node.get("revertedAt"):
                node["revertedAt"] = read.get_path(observed, "status.nodeCache.revertedAt")
            said = read.get_path(observed, "spec.deliveryReason")
            image = read.get_path(observed, "spec.image.reference")
            found[index] = Previous(cluster, str(read.get_path(observed, "spec.delivery") or ""),
                                    read.is_true(observed, "Ready"), node,
                                    reasons.reason_or_empty(read.get_path(observed, "status.reason")),
                                    said if isinstance(said, str) else "",
                                    image if isinstance(image, str) else "")
    return found


# --- 2. place, 3. decide delivery -------------------------------------------------------
# The candidates here; decisions/replica_placement.py places the replicas on them and
# decisions/delivery.py decides each one's delivery, both applied in compose_replicas.


def candidate_clusters(spec: DeploymentSpec, fleet: list[dict]) -> tuple[list[str], list[str]]:
    """(Ready clusters matching the placement in name order, named clusters missing)."""
    selected = placement.targets(spec.cluster_names, spec.cluster_selector, fleet)
    return [t.name for t in selected if t.ready], [t.name for t in selected if t.cluster is None]


# --- 4. compose ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    index: int
    cluster: str | None
    delivery: str
    reason: str
    ready: bool
    commit: str = ""
    delivery_reason: str = ""  # the replica's spec.deliveryReason
    node: Mapping = field(default_factory=dict)  # the replica's spec.nodeCache on Node
    replica_reason: str = ""  # its ModelReplica's status.reason on this cluster, once reported
    image: Mapping = field(default_factory=dict)  # the replica's spec.image on Image

    @property
    def previous_commit(self) -> bool:
        return self.reason.startswith("PreviousCommit")

    def as_status(self) -> dict:
        return {"replica": self.index, "cluster": self.cluster or "",
                "delivery": self.delivery, "reason": self.reason, "commit": self.commit}


def replica_key(index: int) -> str:
    return f"{REPLICA_PREFIX}{index:04d}"


def model_replica(request: protocol.Request, engine_digest: str, model: Model,
                  placement: Placement) -> dict:
    """The replica's own facts only: the engine stays on this ModelDeployment, which the
    replica requires by name (spec.deploymentName); engineDigest says which engine."""
    cluster = placement.cluster or ""
    replica_spec: dict[str, Any] = {
        "deploymentName": request.name,
        "replica": placement.index,
        "clusterName": cluster,
        "delivery": placement.delivery,
    }
    if placement.delivery in ("Node", "Cache", "Image", "Source"):
        replica_spec["model"] = {
            "repo": model.repo, "revision": model.revision,
            "commit": placement.commit}
        replica_spec["engineDigest"] = engine_digest
    if placement.delivery == "Cache":
        replica_spec["cache"] = model.cache_mount(cluster, placement.commit)
    if placement.delivery == "Node":
        replica_spec["cache"] = model.cache_mount(cluster, placement.commit, VOLUME_MOUNT)
        replica_spec["nodeCache"] = dict(placement.node)
    if placement.delivery == "Image":
        replica_spec["image"] = dict(placement.image)
    if cluster in model.engine_images and placement.delivery not in ("Wait", "Fail"):
        replica_spec["engineImage"] = dict(model.engine_images[cluster])
    if placement.delivery_reason:
        replica_spec["deliveryReason"] = placement.delivery_reason
    if placement.delivery in ("Wait", "Fail"):
        replica_spec["hydration"] = model.waiting_on(request.namespace, cluster)
    return {
        "apiVersion": naming.API_VERSION,
        "kind": "ModelReplica",
        "metadata": {
            "name": naming.child_name(request.name, str(placement.index)),
            "namespace": request.namespace,
            "labels": {f"{naming.GROUP}/model-deployment": naming.label_value(request.name),
                       naming.LABEL_CLUSTER: naming.label_value(cluster),
                       # the hydration reads what its volume's replicas mount, to prune
                       **({naming.LABEL_MODEL_CACHE: naming.label_value(model.cache_name)}
                          if model.cache_name else {})},
        },
        "spec": replica_spec,
    }


def compose_replicas(request: protocol.Request, spec: DeploymentSpec, model: Model,
                     candidates: list[str], outcome: protocol.Outcome) -> list[Placement]:
    previous = previous_replicas(request)
    engine_digest = spec.engine.digest
    placements = []
    placed = place(spec.replicas, spec.max_per_cluster, candidates, model, previous)
    for index, cluster in sorted(placed.items()):
        before = previous.get(index)
        if cluster is None:
            reason = reasons.MaxReplicasPerCluster if candidates else reasons.NoClusters
            placements.append(Placement(index, None, "", reason, False))
            continue
        chosen = decide(model, cluster, spec.policy, before)
        here = before if before is not None and before.cluster == cluster else None
        placement = Placement(index, cluster, chosen.delivery, chosen.reason,
                              here is not None and here.ready, chosen.commit,
                              chosen.delivery_reason, chosen.node, here.reason if here else "",
                              chosen.image)
        outcome.compose(replica_key(index), model_replica(request, engine_digest, model,
                                                          placement))
        placements.append(placement)
    return placements


# --- 5. report ----------------------------------------------------------------------------

ATTENTION = {"": 0, "Fail": 1, "Wait": 2, "Source": 3, "Cache": 4, "Image": 5, "Node": 6}  # "": unscheduled


def listed(placements: list[Placement]) -> list[Placement]:
    """Every placement up to LISTED_PLACEMENTS; past that the ones that most need attention
    (not ready first, then unscheduled, Fail, Wait, Source, Cache, Image, Node), listed by index."""
    if len(placements) <= LISTED_PLACEMENTS:
        return placements
    chosen = sorted(placements, key=lambda p: (p.ready, ATTENTION[p.delivery], p.index))
    return sorted(chosen[:LISTED_PLACEMENTS], key=lambda p: p.index)


def report(request: protocol.Request, spec: DeploymentSpec, model: Model, candidates: list[str],
           missing: list[str], placements: list[Placement], outcome: protocol.Outcome) -> None:
    placed = [p for p in placements if p.cluster]

    def count(delivery: str) -> int:
        return sum(1 for p in placed if p.delivery == delivery)

    ready = sum(1 for p in placed if p.ready)
    previous = sum(1 for p in placed if p.previous_commit)
    held = sum(1 for p in placed if p.reason == reasons.PreviousCommitHeldByRollout)
    desired = spec.replicas
    outcome.status = {
        "replicas": {"desired": desired, "scheduled": len(placed), "ready": ready,
                     "cache": count("Cache"), "source": count("Source"),
                     "waiting": count("Wait"), "failed": count("Fail"),
                     "previousCommit": previous},
        "summary": f"{ready}/{desired}",
        "placements": [p.as_status() for p in listed(placements)],
    }
    if model.node_tiers:  # the cache is on tier Node on some cluster
        outcome.status["replicas"]["node"] = count("Node")
    if model.artifact is not None and model.image_clusters:  # some cluster may mount the artifact
        outcome.status["replicas"]["image"] = count("Image")
    if model.repo:
        outcome.status["model"] = model.as_status()

    gone = f"; clusterNames not found: {', '.join(missing)}" if missing else ""
    if len(placed) == desired:
        outcome.condition("ReplicasScheduled", True, reasons.Scheduled,
                          f"{messages.counted(desired, 'replica')} on "
                          f"{messages.counted(len({p.cluster for p in placed}), 'cluster')}{gone}")
    elif not candidates:
        outcome.condition("ReplicasScheduled", False, reasons.NoClusters, reasons.with_remedy(
            f"no Ready FleetCluster matches spec.placement{gone}", reasons.NoClusters))
    else:
        outcome.condition("ReplicasScheduled", False, reasons.MaxReplicasPerCluster, reasons.with_remedy(
            f"{len(placed)} of {messages.counted(desired, 'replica')} scheduled: "
            f"{messages.counted(len(candidates), 'Ready cluster')} "
            f"x maxReplicasPerCluster {spec.max_per_cluster}{gone}", reasons.MaxReplicasPerCluster))

    if ready == desired:
        outcome.condition("ReplicasReady", True, reasons.Available, f"{ready}/{desired} replicas ready")
    else:
        waiting, failed = count("Wait"), count("Fail")
        detail = "".join([f", {waiting} waiting for the cache" if waiting else "",
                          f", {failed} failed (hydration failed)" if failed else "",
                          f", {desired - len(placed)} unscheduled" if len(placed) < desired
                          else ""])
        outcome.condition("ReplicasReady", False, reasons.ReplicasNotReady,
                          f"{ready}/{desired} replicas ready{detail}")

    if model.cache_name is None:
        outcome.condition("ModelCacheResolved", True, reasons.NoModelCache,
                          f"spec.model.huggingFace: every replica loads {model.repo}@"
                          f"{model.revision} from the source")
    elif not model.cache_found:
        missing_cache = f"ModelCache {request.namespace}/{model.cache_name} does not exist"
        if model.repo:
            doing = (f"every replica loads {model.repo}@{model.commit or model.revision}, the "
                     "model this deployment served last, from the source")
        else:
            doing = (f"this deployment never served a model, so nothing runs: its "
                     f"{len(placed)} scheduled replicas wait for it")
        outcome.condition("ModelCacheResolved", False, reasons.ModelCacheNotFound, reasons.with_remedy(
            f"{missing_cache}; {doing}", reasons.ModelCacheNotFound))
    elif model.commit:
        hydrating = previous - held
        stale = "".join([
            f"; {messages.counted(hydrating, 'replica')} still on a previous commit from the "
            "cluster's cache until this one is Ready there" if hydrating else "",
            f"; {messages.counted(held, 'replica')} on a previous commit while the "
            "ModelCache's rollout in waves holds their cluster (status.rollout)" if held else ""])
        outcome.condition("ModelCacheResolved", True, reasons.Resolved,
                          f"ModelCache {model.cache_name}: {model.repo}@{model.revision} is "
                          f"commit {model.commit}{stale}")
    else:
        outcome.condition("ModelCacheResolved", False, reasons.Resolving,
                          f"ModelCache {model.cache_name} has not resolved {model.repo}@"
                          f"{model.revision} to a commit yet")
    outcome.status["reason"] = headline(placements, outcome)
    outcome.composite_ready = ready == desired


def headline(placements: list[Placement], outcome: protocol.Outcome) -> str:
    """status.reason, the REASON column, once every condition is set: one word for where
    the deployment stands, beside Crossplane's READY. What holds every replica back comes
    first (its ModelCache, then scheduling), then the first replica not ready as its own
    ModelReplica says (in the order status.placements puts those needing attention first)."""
    said = {c.type: c for c in outcome.conditions}
    for held_by in ("ModelCacheResolved", "ReplicasScheduled"):
        if said[held_by].status == "False":
            return said[held_by].reason
    not_ready = sorted((p for p in placements if p.cluster and not p.ready),
                       key=lambda p: (ATTENTION[p.delivery], p.index))
    if not_ready:
        return not_ready[0].replica_reason or reasons.ReplicasNotReady
    return said["ReplicasReady"].reason


def compose(request: protocol.Request) -> protocol.Outcome:
    outcome = protocol.Outcome()
    spec = read_spec(request.spec)
    outcome.require(FLEET_CLUSTERS_KEY, FLEET_CLUSTERS)
    wanted = [FLEET_CLUSTERS_KEY]
    if spec.cache_name is not None:
        outcome.require(MODEL_CACHE_KEY, protocol.Requirement(
            naming.API_VERSION, "ModelCache", match_name=spec.cache_name,
            namespace=request.namespace))
        outcome.require(HYDRATIONS_KEY, protocol.Requirement(
            naming.API_VERSION, "ModelCacheHydration", namespace=request.namespace,
            match_labels=((naming.LABEL_MODEL_CACHE, naming.label_value(spec.cache_name)),)))
        wanted += [MODEL_CACHE_KEY, HYDRATIONS_KEY]
    if any(key not in request.required for key in wanted):
        objects.carry_over(request, outcome, request.observed)  # not fetched yet: keep all
        return outcome

    model = read_model(spec, request, outcome)
    candidates, missing = candidate_clusters(spec, request.required[FLEET_CLUSTERS_KEY])
    placements = compose_replicas(request, spec, model, candidates, outcome)
    report(request, spec, model, candidates, missing, placements, outcome)
    return outcome
