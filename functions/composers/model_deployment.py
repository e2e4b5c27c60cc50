"""compose-model-deployment: place replicas across the fleet, then decide per replica
whether it mounts the warm cache or loads from the source.

Lifecycle, top to bottom:
1. resolve inputs: read the spec; ask Crossplane for every FleetCluster and, with
   modelCacheRef, for the ModelCache by name in this namespace (its resolved commit and
   its placement) and for its ModelCacheHydrations by label (where the cache stands on
   each cluster, from each hydration's own status); read where each replica runs now from
   the observed ModelReplicas;
2. place: candidates are the Ready FleetClusters matching spec.placement; a replica keeps
   its cluster while that cluster is a candidate (and under maxReplicasPerCluster); new
   replicas go to the best-ranked candidate (cache Ready, then a cache serving the previous
   commit, then a cache target not yet Ready, then the rest; ties by fewest replicas of this
   deployment, then by name);
   scaling down removes the highest index first;
3. decide delivery per replica by the table of DESIGN.md §3 and spec.delivery, except that
   a cluster whose cache is not Ready on the resolved commit but still holds a verified
   earlier one (its servingCommit) keeps serving that one from the cache, and that on a
   cluster holding the cache on tier Node, Node delivery (the node's own copy) is tried
   before the volume (functions/node_delivery.py);
4. compose one ModelReplica per placed replica, carrying only what is its own (index,
   cluster, delivery, model, cache mount) and the digest of the engine: the replica reads
   the shared spec.engine from this ModelDeployment, so 1,000 replicas of a large engine
   spec stay far under Crossplane's message limits;
5. report replicas, placements and the ReplicasScheduled / ReplicasReady /
   ModelCacheResolved conditions; ready when every desired replica is ready.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Mapping

from fleetcache.apis import specs
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.k8s import objects
from fleetcache.functions import naming
from fleetcache.functions import protocol
from fleetcache.functions import read
from fleetcache.functions import times
from fleetcache.functions.views.fleet_cluster import FLEET_CLUSTERS
from fleetcache import messages
from fleetcache import reasons
from fleetcache.volume import flat_commit_path, hf_snapshot_path
from fleetcache.functions.node_tier import delivery as node_delivery, warmers
from fleetcache.apis.models import model_deployment as api
from fleetcache.functions.views import model_cache as model_cache_view
from fleetcache.functions.views import placement
from fleetcache.functions.views.hydration import ClusterReport, pinned_to, report_of
from fleetcache.functions.views.model_replica import FLAT, Engine
from fleetcache.functions.views.placement import Target
from fleetcache.functions.node_tier.delivery import NodePolicy, NodeTier

FLEET_CLUSTERS_KEY = "fleet-clusters"
MODEL_CACHE_KEY = "model-cache"
HYDRATIONS_KEY = "model-cache-hydrations"
REPLICA_PREFIX = "replica-"
MAX_REPLICAS = 1000
# status.placements rows: every ModelReplica requires this ModelDeployment (for its engine),
# so its status stays small; each replica's own placement is on the ModelReplica.
LISTED_PLACEMENTS = 100


# --- 1. inputs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """spec.delivery: what a replica does while its cluster's cache is not Ready."""

    while_hydrating: str
    on_hydration_failure: str
    switch_to_cache: str
    node: NodePolicy


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


def hydration_status(row: ClusterReport) -> dict:
    """A Wait or Fail replica's spec.hydration: where the cache stands on its cluster (what
    the hydration says is input here: its phase, reason and message are cut to size)."""
    return {"phase": messages.clipped(row.phase, 32), "bytesDone": max(0, row.bytes_done),
            "bytesTotal": max(0, row.bytes_total), "reason": reasons.reason_or_empty(row.reason),
            "message": messages.clipped(row.message, messages.MESSAGE_LIMIT)}


@dataclass(frozen=True)
class Files:
    """How the cache's files sit on the claim a replica mounts (design/sources.md "Layout,
    and what engines get"): a Hugging Face cache (Hub, S3 layout HfCache), or flat, at their
    paths: an existing volume's subPath, served in place from the user's claim, or an S3
    prefix fetched with layout Flat to its commit's directory on the cache volume."""

    flat: bool = False
    in_place: bool = False  # an existing volume: replicas mount the user's claim
    claim: str = ""  # spec.source.volume.claimName
    sub_path: str = ""  # spec.source.volume.subPath, without slashes at its ends

    @classmethod
    def of(cls, cache: Mapping, outcome: protocol.Outcome) -> "Files":
        """From the ModelCache's spec.source (read, never trusted: a subPath that climbs out
        of the claim reads as its root, with a warning)."""
        volume = read.mapping_at(cache, "spec.source.volume")
        if not volume:
            return cls(flat=read.get_path(cache, "spec.source.s3.layout") == FLAT)
        claim, sub_path = _text(volume, "claimName"), _text(volume, "subPath").strip("/")
        if ".." in sub_path.split("/") or not sub_path.isprintable() \
                or any(c.isspace() for c in sub_path):
            outcome.warnings.append(f"ModelCache spec.source.volume.subPath {messages.shown(sub_path)} "
                                    "is not a path inside the claim; replicas read its root")
            sub_path = ""
        return cls(True, True, read.name_or_empty(claim), sub_path)

    @property
    def name(self) -> str:
        """What replicas call a model served in place (model.repo): it has no repository."""
        return messages.clipped("/".join(p for p in ("volume", self.claim, self.sub_path) if p), 200)

    def model_path(self, mount: str, repo: str, commit: str) -> str:
        """FLEETCACHE_MODEL: the commit's snapshot, the commit's flat directory (never
        changed once published, so the replica sees its own commit), or the volume's files."""
        if not self.flat:
            return hf_snapshot_path(mount, repo, commit)
        if not self.in_place:
            return flat_commit_path(mount, commit)
        return f"{mount.rstrip('/')}/{self.sub_path}" if self.sub_path else mount


def volume_name(hydration: Any) -> str:
    """The claim a cluster's hydration says it filled or verified (status.volumeName: the
    cache PVC, or the user's claim of an existing volume); "" unless it is a claim name."""
    return read.name_or_empty(read.get_path(hydration, "status.volumeName"))


@dataclass(frozen=True)
class Model:
    """What the replicas load, and where the cache stands on each of its clusters."""

    repo: str
    revision: str
    commit: str
    cache_name: str | None = None
    cache_found: bool = False
    targets: Mapping[str, ClusterReport] = field(default_factory=dict)
    manifest_digest: str = ""
    node_tiers: Mapping[str, NodeTier] = field(default_factory=dict)  # clusters on tier Node
    files: Files = Files()
    volumes: Mapping[str, str] = field(default_factory=dict)  # cluster -> status.volumeName
    # An engine can load the model from its source: a Hub repo. An S3 prefix or a volume's
    # own files are nothing an engine loads by name, so where the table says Source, Wait.
    from_source: bool = True

    def cache_mount(self, cluster: str, commit: str, mount: str = agent_job.CACHE_MOUNT_PATH) -> dict:
        """A Cache replica's spec.cache: the claim the cluster's hydration filled or verified
        and the model's directory of one commit inside it (a Node replica's fallback: the
        same claim at its own mount path). Without a hydration's word, the claim the source
        names: the user's own, else the cache PVC."""
        volume = self.volumes.get(cluster) or self.files.claim \
            or naming.cache_volume_name(self.cache_name or "")
        mounted = {"modelCacheName": self.cache_name, "volumeName": volume, "mountPath": mount,
                   "snapshotPath": self.files.model_path(mount, self.repo, commit),
                   "commit": commit}
        if self.files.flat:
            mounted["layout"] = FLAT
        return mounted

    def waiting_on(self, namespace: str, cluster: str) -> dict:
        """A Wait or Fail replica's spec.hydration; with no ModelCache, why nothing runs."""
        if self.cache_found and cluster not in self.targets:  # waits: nothing loads its source
            return {"phase": "Pending", "reason": reasons.NotACacheTarget, "message": (
                f"cluster {cluster} is not a target of ModelCache {namespace}/"
                f"{self.cache_name}, whose source no engine loads by name (an S3 prefix or "
                "an existing volume), so nothing runs there: add the cluster to the "
                "ModelCache's spec.placement")}
        if self.cache_found:
            return hydration_status(self.targets[cluster])
        return {"phase": "Pending", "reason": reasons.ModelCacheNotFound, "message": reasons.with_remedy(
            f"ModelCache {namespace}/{self.cache_name} does not exist and no model was served "
            "before, so there is nothing to load", reasons.ModelCacheNotFound)}

    def as_status(self) -> dict:
        out = {"repo": self.repo, "revision": self.revision, "commit": self.commit}
        if self.cache_name:
            out["modelCacheName"] = self.cache_name
        return out


def _text(mapping: Mapping, key: str) -> str:
    value = mapping.get(key)
    return value if isinstance(value, str) else ""


def hydrations_by_cluster(cache: str, hydrations: list[Any], resolved: Mapping
                          ) -> dict[str, dict]:
    """Each cluster's hydration of this cache: the one pinned to the resolved content if
    there are two (a rename in flight), else the first by name."""
    found: dict[str, dict] = {}
    for hydration in hydrations:
        cluster = read.get_path(hydration, "spec.clusterName")
        if not isinstance(cluster, str) or not cluster \
                or read.get_path(hydration, "spec.modelCacheName") != cache:
            continue
        held = found.get(cluster)
        rank = (not pinned_to(hydration, resolved),
                str(read.get_path(hydration, "metadata.name") or ""))
        if held is None or rank < (not pinned_to(held, resolved),
                                   str(read.get_path(held, "metadata.name") or "")):
            found[cluster] = hydration
    return found


def cache_targets(cache: Mapping, fleet: list[dict], hydrated: Mapping[str, dict]) -> list[Target]:
    """The ModelCache's target clusters, by its own placement (Pending ones included, which
    have no hydration yet while they wait for a rollout slot). A cache spec its composer
    refuses composes no new hydrations: then the clusters that have one are the targets."""
    try:
        spec = model_cache_view.read_spec(cache.get("spec") if isinstance(cache.get("spec"), dict) else {})
    except specs.InputError:
        views = placement.fleet_by_name(fleet)
        return [Target(name, views.get(name)) for name in sorted(hydrated)]
    return placement.targets(spec["placement"].get("clusterNames"), spec["placement"].get("clusterSelector"), fleet)


def read_model(spec: DeploymentSpec, request: protocol.Request, outcome: protocol.Outcome) -> Model:
    """The model from model.huggingFace, or from the ModelCache's status.resolved with each
    target cluster's standing read from its ModelCacheHydration (report_of, the
    reading the ModelCache itself does); a missing cache falls back to the model this
    deployment last served (status.model), if any."""
    if spec.cache_name is None:
        return Model(spec.repo or "", spec.revision, "")
    cache = next((c for c in request.required.get(MODEL_CACHE_KEY) or []
                  if isinstance(c, Mapping)), None)
    if cache is None:
        last = request.status.get("model")
        last = last if isinstance(last, Mapping) and last.get("modelCacheName") == \
            spec.cache_name else {}
        return Model(_text(last, "repo"), _text(last, "revision"), _text(last, "commit"),
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
    seen_as = _text(resolved, "repo") or _text(hf, "repo")
    hydrated = hydrations_by_cluster(spec.cache_name, request.required.get(HYDRATIONS_KEY) or [],
                                     resolved)
    targets, node_tiers, volumes = {}, {}, {}
    for target in cache_targets(cache, request.required.get(FLEET_CLUSTERS_KEY) or [], hydrated):
        hydration = hydrated.get(target.name)
        targets[target.name] = report_of(
            target, hydration, read.as_int(resolved.get("bytes")), resolved, seen_as)
        if claim := volume_name(hydration):
            volumes[target.name] = claim
        tier = NodeTier.of(hydration)
        if tier is not None and not files.flat:  # `select` links a Hugging Face cache
            node_tiers[target.name] = tier
    digest = _text(resolved, "manifestDigest")
    repo = seen_as or (files.name if files.in_place else "")
    from_hub = bool(hf) or bool(read.mapping_at(cache, "spec.source.volume.manifest.huggingFace"))
    return Model(repo, _text(resolved, "revision") or _text(hf, "revision") or "main",
                 _text(resolved, "commit"), spec.cache_name, True, targets,
                 digest if node_delivery.DIGEST_SHAPE.match(digest) else "", node_tiers,
                 files, volumes, from_hub)


@dataclass(frozen=True)
class Previous:
    """Where a replica ran at the last compose, from its observed ModelReplica."""

    cluster: str
    delivery: str
    ready: bool
    node: Mapping = field(default_factory=dict)  # spec.nodeCache of a Node replica

    @property
    def reverted_at(self) -> str:
        """When a Require placement reverted to Prefer: the replica latches it in its status,
        this deployment carries it in the replica's spec from then on."""
        moment = times.parse_time(self.node.get("revertedAt"))
        return times.format_time(moment) if moment else ""


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
            found[index] = Previous(cluster, str(read.get_path(observed, "spec.delivery") or ""),
                                    read.is_true(observed, "Ready"), node)
    return found


# --- 2. place -----------------------------------------------------------------------------


def candidate_clusters(spec: DeploymentSpec, fleet: list[dict]) -> tuple[list[str], list[str]]:
    """(Ready clusters matching the placement in name order, named clusters missing)."""
    selected = placement.targets(spec.cluster_names, spec.cluster_selector, fleet)
    return [t.name for t in selected if t.ready], [t.name for t in selected if t.cluster is None]


def cache_tier(model: Model, cluster: str) -> int:
    """0: a node there holds the commit; 1: the cache is Ready there; 2: it still serves a
    previous commit; 3: a cache target not yet Ready; 4: the rest, failed targets included."""
    row = model.targets.get(cluster)
    if row is None:
        return 4
    if row.phase == "Ready" and model.commit:
        tier = model.node_tiers.get(cluster)
        return 0 if tier is not None and tier.serves(model.commit) else 1
    if row.serving_commit:
        return 2
    return 4 if row.phase == "Failed" else 3


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
    delivery: str  # Node | Cache | Source | Wait | Fail
    reason: str
    commit: str  # the commit the replica loads ("" for Wait/Fail, or before a resolve)
    detail: str = ""  # what the reason means here (ModelReplica spec.deliveryReason)
    node: Mapping = field(default_factory=dict)  # a Node replica's spec.nodeCache

    @property
    def delivery_reason(self) -> str:
        """The replica's spec.deliveryReason: said where the node tier was weighed (the
        volume tier's replicas keep the spec they had; placements[].reason says why)."""
        return messages.clipped(f"{self.reason}: {self.detail}", messages.MESSAGE_LIMIT) \
            if self.detail else ""


def decide(model: Model, cluster: str, policy: Policy, before: Previous | None) -> Delivery:
    """One replica's delivery by the table; where it says Source for a model no engine
    loads from its source (an S3 prefix, a volume's own files), the replica waits instead,
    keeping the table's reason."""
    chosen = by_table(model, cluster, policy, before)
    if chosen.delivery == "Source" and not model.from_source:
        return Delivery("Wait", chosen.reason, "")
    return chosen


def by_table(model: Model, cluster: str, policy: Policy, before: Previous | None) -> Delivery:
    """One replica's delivery by DESIGN.md §3's table and spec.delivery, with one addition:
    a cluster not Ready on the resolved commit that still holds a verified earlier commit
    (servingCommit) keeps serving that one from the cache, hydrating or failed alike."""
    if model.cache_name is None:
        return Delivery("Source", reasons.NoModelCache, model.commit)
    if not model.cache_found:
        # The model served last, from the source; never served one: nothing to load.
        if model.repo:
            return Delivery("Source", reasons.ModelCacheNotFound, model.commit)
        return Delivery("Wait", reasons.ModelCacheNotFound, "")
    row = model.targets.get(cluster)
    if row is None:
        return Delivery("Source", reasons.NotACacheTarget, model.commit)
    # Already loading the resolved commit from the source on this cluster: never sent back
    # to an older snapshot (a downgrade and a second roll); it follows the table.
    running_source = before is not None and before.cluster == cluster \
        and before.delivery == "Source"
    tier = model.node_tiers.get(cluster)
    if row.phase == "Ready" and model.commit:
        if policy.switch_to_cache == "Never" and running_source:
            return Delivery("Source", reasons.SwitchToCacheNever, model.commit)
        if tier is not None and model.manifest_digest:
            return node_or_volume(model, tier, policy, cluster, before)
        return Delivery("Cache", reasons.CacheReady, model.commit)
    kept = kept_on_node(row, tier, policy, before, cluster)
    if kept is not None:
        return kept
    if row.serving_commit and not running_source:
        reason = reasons.PreviousCommitHydrationFailed if row.phase == "Failed" \
            else reasons.PreviousCommitWhileHydrating
        return Delivery("Cache", reason, row.serving_commit)
    if row.phase == "Failed":
        if policy.on_hydration_failure == "Fail":
            return Delivery("Fail", reasons.HydrationFailed, "")
        return Delivery("Source", reasons.HydrationFailed, model.commit)
    if policy.while_hydrating == "Wait":
        return Delivery("Wait", reasons.Hydrating, "")
    return Delivery("Source", reasons.Hydrating, model.commit)


def node_or_volume(model: Model, tier: NodeTier, policy: Policy, cluster: str,
                   before: Previous | None) -> Delivery:
    """On a cluster holding the cache on tier Node with its volume Ready: the node copy when
    a node holds the commit (spec.delivery.node), else the volume, saying why."""
    here = before.delivery if before is not None and before.cluster == cluster else ""
    choice = node_delivery.choose(tier, model.commit, policy.node, policy.switch_to_cache, here)
    if choice.delivery == "Cache":
        return Delivery("Cache", choice.reason, model.commit, choice.detail)
    reverted = before.reverted_at if here == "Node" else ""
    return Delivery("Node", choice.reason, model.commit, choice.detail,
                    node_delivery.node_cache_spec(tier, model.commit, model.manifest_digest,
                                                  policy.node, reverted))


def kept_on_node(row: ClusterReport, tier: NodeTier | None, policy: Policy,
                 before: Previous | None, cluster: str) -> Delivery | None:
    """A Node replica whose cluster hydrates a new commit on its volume (or failed to) keeps
    its node copy of the commit it serves, unchanged (no roll), while the node PVC is still
    there and Node delivery is not turned off; its pod falls back to the volume, which keeps
    that commit, on a node without it."""
    if tier is None or not tier.mountable or policy.node.policy == "Never" \
            or before is None or before.cluster != cluster \
            or before.delivery != "Node" or not row.serving_commit \
            or before.node.get("commit") != row.serving_commit \
            or before.node.get("claimName") != tier.claim_name:
        return None
    digest = before.node.get("manifestDigest")
    if not isinstance(digest, str) or not node_delivery.DIGEST_SHAPE.match(digest):
        return None
    kept = node_delivery.node_cache_spec(tier, row.serving_commit, digest, policy.node,
                                         before.reverted_at)
    reason = reasons.PreviousCommitHydrationFailed if row.phase == "Failed" \
        else reasons.PreviousCommitWhileHydrating
    return Delivery("Node", reason, row.serving_commit,
                    f"the node copy (else the cluster volume) serves {row.serving_commit[:12]} "
                    "until the new commit is Ready on the cluster", kept)


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
    if placement.delivery in ("Node", "Cache", "Source"):
        replica_spec["model"] = {
            "repo": model.repo, "revision": model.revision,
            "commit": model.commit if placement.delivery == "Source" else placement.commit}
        replica_spec["engineDigest"] = engine_digest
    if placement.delivery == "Cache":
        replica_spec["cache"] = model.cache_mount(cluster, placement.commit)
    if placement.delivery == "Node":
        replica_spec["cache"] = model.cache_mount(cluster, placement.commit,
                                                  warmers.VOLUME_MOUNT)
        replica_spec["nodeCache"] = dict(placement.node)
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
    for index, cluster in sorted(place(spec, candidates, model, previous).items()):
        before = previous.get(index)
        if cluster is None:
            reason = reasons.MaxReplicasPerCluster if candidates else reasons.NoClusters
            placements.append(Placement(index, None, "", reason, False))
            continue
        chosen = decide(model, cluster, spec.policy, before)
        ready = before is not None and before.cluster == cluster and before.ready
        placement = Placement(index, cluster, chosen.delivery, chosen.reason, ready,
                              chosen.commit, chosen.delivery_reason, chosen.node)
        outcome.compose(replica_key(index), model_replica(request, engine_digest, model,
                                                          placement))
        placements.append(placement)
    return placements


# --- 5. report ----------------------------------------------------------------------------

ATTENTION = {"": 0, "Fail": 1, "Wait": 2, "Source": 3, "Cache": 4, "Node": 5}  # "": unscheduled


def listed(placements: list[Placement]) -> list[Placement]:
    """Every placement up to LISTED_PLACEMENTS; past that the ones that most need attention
    (not ready first, then unscheduled, Fail, Wait, Source, Cache, Node), listed by index."""
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
    if model.repo:
        outcome.status["model"] = model.as_status()

    gone = f"; clusterNames not found: {', '.join(missing)}" if missing else ""
    if len(placed) == desired:
        outcome.condition("ReplicasScheduled", True, reasons.Scheduled,
                          f"{desired} replicas on {len({p.cluster for p in placed})} "
                          f"clusters{gone}")
    elif not candidates:
        outcome.condition("ReplicasScheduled", False, reasons.NoClusters, reasons.with_remedy(
            f"no Ready FleetCluster matches spec.placement{gone}", reasons.NoClusters))
    else:
        outcome.condition("ReplicasScheduled", False, reasons.MaxReplicasPerCluster, reasons.with_remedy(
            f"{len(placed)} of {desired} replicas scheduled: {len(candidates)} Ready clusters "
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
        stale = (f"; {previous} replicas serve a previous commit from their cluster's cache "
                 f"until this one is Ready there") if previous else ""
        outcome.condition("ModelCacheResolved", True, reasons.Resolved,
                          f"ModelCache {model.cache_name}: {model.repo}@{model.revision} is "
                          f"commit {model.commit}{stale}")
    else:
        outcome.condition("ModelCacheResolved", False, reasons.Resolving,
                          f"ModelCache {model.cache_name} has not resolved {model.repo}@"
                          f"{model.revision} to a commit yet")
    outcome.composite_ready = ready == desired


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
