"""compose-fleet-cluster: one provider-kubernetes ClusterProviderConfig per FleetCluster,
the cache capacity decisions for its cluster, and its node tier.

Lifecycle, top to bottom:
1. read and validate the spec: exactly one of kubeconfigSecretRef / providerConfigRef,
   the cache defaults other composers read (accessMode, capacity, watermarks,
   storageClassName) and spec.nodeCache; require the ModelCacheHydrations of this cluster
   by label (in every namespace: the selector names none);
2. compose a ClusterProviderConfig named after the FleetCluster from the kubeconfig
   Secret, or adopt the named one (compose nothing);
3. decide capacity (functions/capacity.py): which hydrations may start, which copies are
   evicted; the hydrations read the decision from status.cache and obey it;
4. with spec.nodeCache (a path): decide the per-node capacity of the tier-Node caches
   (functions/node_capacity.py, the same rules) and compose the node agent, its keep-list
   and the warm slots in fleetcache-system on the cluster (functions/node_system.py);
5. report status.providerConfigName, status.cache, status.nodeCache and the CapacityLow,
   NodeCapacityLow and NodeAgent conditions; the FleetCluster is Ready once its
   ProviderConfig exists (observed), or at once when adopted: the node tier never holds
   the volume tier back.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetcache import reasons, shapes
from fleetcache.apis import specs
from fleetcache.apis.models.fleet_cluster import FleetCluster
from fleetcache.functions import naming, protocol, quantities, read
from fleetcache.functions.decisions import capacity, image_delivery
from fleetcache.functions.k8s import agent_job, objects
from fleetcache.functions.node_tier import capacity as node_capacity
from fleetcache.functions.node_tier import node_agent
from fleetcache.functions.node_tier.warmer_inputs import NodeCache
from fleetcache.functions.views.fleet_cluster import ClusterCache

PROVIDER_CONFIG_KEY = "provider-config"
HYDRATIONS_KEY = "model-cache-hydrations"
OBJECT_NAMESPACE = "crossplane-system"  # where the Objects of a cluster-scoped FleetCluster live


# --- 1. inputs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    secret_ref: dict | None  # {namespace, name, key} when composing
    adopted: str | None  # providerConfigRef.name when adopting
    capacity: int | None  # spec.cache.capacity in bytes; None: no budget
    high: int  # spec.cache.highWatermark, percent
    low: int  # spec.cache.lowWatermark, percent
    image: str = agent_job.DEFAULT_AGENT_IMAGE  # spec.agent.image
    node_cache: NodeCache | None = None  # spec.nodeCache; None: no node tier
    node_settings: node_capacity.Settings | None = None  # its capacity and watermarks
    node_slots: int = 0  # spec.nodeCache.maxConcurrentNodes

    @property
    def provider_config(self) -> str:
        return self.adopted or self.name


def read_spec(request: protocol.Request) -> ClusterSpec:
    """The FleetCluster read through its model; every error names the field and the fix."""
    name = naming.object_name(request.name, "metadata.name")
    spec = specs.read_spec(FleetCluster, request.composite.get("spec"))
    cache = spec["cache"]
    budget = cache.get("capacity")
    budget = quantities.quantity_bytes(budget, "spec.cache.capacity") if budget is not None else None
    node = node_spec(spec.get("nodeCache"))
    options = {"high": cache["highWatermark"], "low": cache["lowWatermark"],
               "image": read.get_path(spec, "agent.image") or agent_job.DEFAULT_AGENT_IMAGE, **node}
    if "providerConfigRef" in spec:
        return ClusterSpec(name, None, spec["providerConfigRef"]["name"], budget, **options)
    return ClusterSpec(name, spec["kubeconfigSecretRef"], None, budget, **options)


def node_spec(node: dict | None) -> dict:
    """spec.nodeCache (validated and defaulted by the model) as ClusterSpec fields; the pool
    and path are read by node_tier.NodeCache, as the hydrations read them, so the node
    agent and the node PVs can never disagree on either."""
    if node is None:
        return {}
    node_cache = NodeCache.of_set(node)
    if node_cache.problem:
        raise specs.InputError(node_cache.problem)
    settings = node_capacity.Settings(
        quantities.quantity_bytes(node["capacityPerNode"], "spec.nodeCache.capacityPerNode"),
        node["highWatermark"], node["lowWatermark"])
    return {"node_cache": node_cache, "node_settings": settings,
            "node_slots": node["maxConcurrentNodes"]}


def hydrations_requirement(spec: ClusterSpec) -> protocol.Requirement:
    """Every ModelCacheHydration labelled with this cluster, in every namespace: a
    FleetCluster is cluster-scoped and a label selector without a namespace lists across
    all namespaces (Crossplane lists with client.InNamespace(""))."""
    return protocol.Requirement(naming.API_VERSION, "ModelCacheHydration",
                           match_labels=((naming.LABEL_CLUSTER, naming.label_value(spec.name)),))


def copy_of(hydration: dict) -> capacity.Copy:
    """A hydration as the decision sees it. Tolerant: a field that is malformed reads as
    unknown, which keeps the copy (and a size that is not a quantity never admits it)."""
    status = read.mapping_at(hydration, "status")
    meta = read.mapping_at(hydration, "metadata")
    try:
        size: int | None = quantities.quantity_bytes(read.get_path(hydration, "spec.storage.size"),
                                              "spec.storage.size")
    except specs.InputError:
        size = None
    return capacity.Copy(
        key=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        size=size,
        used=capacity.count(status, "usedBytes"),
        phase=reasons.reason_or_empty(status.get("phase")),
        serving=shapes.is_resolved_commit(status.get("servingCommit")),
        **capacity.use_of(hydration),
    )


def copies_on(spec: ClusterSpec, hydrations: list[dict]) -> list[capacity.Copy]:
    """The hydrations the label selected that really target this cluster (a long name's
    label is a hashed form, so the name itself is checked too) and take room on it (an
    existing volume is the user's claim: `capacity.allocates`; a hydration whose replicas
    mount the cache's OCI artifact warms nothing: `image_delivery.served_by_image`); one
    without a readable namespace and name cannot be listed, so it is left out."""
    return [copy_of(h) for h in hydrations
            if read.get_path(h, "spec.clusterName") == spec.name
            and capacity.allocates(read.get_path(h, "spec.source"))
            and not image_delivery.served_by_image(h)
            and read.name_or_empty(read.get_path(h, "metadata.name"))
            and read.name_or_empty(read.get_path(h, "metadata.namespace"))]


# --- 2. compose ---------------------------------------------------------------------------


def provider_config(spec: ClusterSpec) -> dict:
    return {
        "apiVersion": objects.OBJECT_API_VERSION,
        "kind": objects.PROVIDER_CONFIG_KIND,
        "metadata": {
            "name": spec.name,
            "labels": {naming.LABEL_MANAGED_BY: "fleetcache",
                       naming.LABEL_CLUSTER: naming.label_value(spec.name)},
        },
        "spec": {"credentials": {"source": "Secret", "secretRef": dict(spec.secret_ref or {})}},
    }


# --- 3. decide capacity -------------------------------------------------------------------


def latched(request: protocol.Request, field: str) -> list[str]:
    values = read.get_path(request.status, f"cache.{field}")
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


def decide(request: protocol.Request, spec: ClusterSpec) -> capacity.Decision | None:
    """None while Crossplane has not fetched the hydrations yet: nothing is decided anew
    and the last published decision stands."""
    hydrations = request.required.get(HYDRATIONS_KEY)
    if hydrations is None:
        return None
    return capacity.decide(copies_on(spec, hydrations), spec.capacity, spec.high, spec.low,
                           latched(request, "admitted"), latched(request, "evicted"))


def cache_status(decision: capacity.Decision) -> dict:
    lists = decision.lists
    return ClusterCache(decision.capacity, decision.used, decision.reserved, tuple(lists["admitted"]),
                        tuple(lists["evicted"]), tuple(lists["waiting"]), len(decision.waiting)).as_status()


def capacity_condition(spec: ClusterSpec, decision: capacity.Decision, outcome: protocol.Outcome
                       ) -> None:
    if not decision.capacity_low:
        outcome.condition("CapacityLow", False, reasons.CapacityAvailable,
                          f"{quantities.human_bytes(decision.used)} used"
                          + (f" of {quantities.human_bytes(decision.capacity)}" if decision.capacity
                             else ", no spec.cache.capacity set"))
        return
    where = f"cluster {spec.name} uses {quantities.human_bytes(decision.used)} of " \
            f"{quantities.human_bytes(decision.capacity or 0)} (high watermark {spec.high}%: " \
            f"{quantities.human_bytes(decision.high)})"
    said = decision.shortfall(
        where, "no copy is removable: every remaining copy is pinned, mounted by a replica or "
        "not measured yet", "hydration", f"{quantities.human_bytes(decision.reserved)} is reserved "
        "by downloads admitted or running")
    outcome.condition("CapacityLow", True, reasons.CapacityLow, reasons.with_remedy(said, reasons.CapacityLow))


# --- 4. the node tier ----------------------------------------------------------------------


def compose_node_tier(request: protocol.Request, spec: ClusterSpec, outcome: protocol.Outcome) -> None:
    """The node agent, the keep-list and the slots on the cluster, and the per-node capacity
    decision. While the hydrations are not fetched nothing is decided anew: the last
    status.nodeCache stands and the keep-list is kept as observed (never an empty one that
    would have every node delete its caches)."""
    node_cache, settings = spec.node_cache, spec.node_settings
    if node_cache is None or settings is None:  # node_spec sets both or neither
        return
    if node_cache.storage_class:
        outcome.condition("NodeAgent", False, reasons.NodeCacheModeUnsupported, reasons.with_remedy(
            f"spec.nodeCache.storageClassName {node_cache.storage_class} is reserved: nothing "
            "is composed for the node tier on this cluster and its Node caches stay on the "
            "volume", reasons.NodeCacheModeUnsupported))
        return
    labels = {naming.LABEL_MANAGED_BY: "fleetcache", naming.LABEL_CLUSTER: naming.label_value(spec.name)}

    def remote(key: str, manifest: dict, policies: tuple[str, ...] | None = None) -> None:
        seen = bool(objects.remote_manifest(request.observed.get(key)))
        awaited = key == node_agent.AGENT_KEY  # the NodeAgent condition reads its numbers
        outcome.compose(key, objects.remote_object(
            naming.child_name(spec.name, key), OBJECT_NAMESPACE, manifest, spec.provider_config,
            management_policies=policies, labels=labels, watch=awaited,
            readiness_query=objects.ROLLED_OUT_QUERY if awaited else None), seen)

    for key, (manifest, policies) in node_agent.manifests(
            node_cache, spec.node_slots, spec.image, labels).items():
        remote(key, manifest, policies)
    hydrations = request.required.get(HYDRATIONS_KEY)
    if hydrations is None:
        objects.carry_over(request, outcome, [node_agent.DIRS_KEY])
        latched = read.mapping_at(request.status, "nodeCache")
        if latched:
            outcome.status["nodeCache"] = latched
    else:
        caches = node_capacity.node_hydrations(spec.name, hydrations)
        decision = node_capacity.decide(settings, caches,
                                        read.get_path(request.status, "nodeCache"))
        keep = node_capacity.keep_list(caches, decision, request.now)
        remote(node_agent.DIRS_KEY, node_agent.dirs_manifest(
            node_capacity.keep_json(keep), labels))
        outcome.status["nodeCache"] = node_capacity.status_of(decision)
        node_capacity.condition(spec.name, settings, decision,
                                node_capacity.least_free(caches), outcome)
    agent_condition(request, outcome)


def agent_condition(request: protocol.Request, outcome: protocol.Outcome) -> None:
    """NodeAgent: whether every pool node runs the node agent (the DaemonSet's numbers)."""
    daemonset = read.mapping_at(objects.remote_manifest(
        request.observed.get(node_agent.AGENT_KEY)), "status")
    where = f"DaemonSet {node_agent.SYSTEM_NAMESPACE}/{node_agent.NAME}"
    if "desiredNumberScheduled" not in daemonset:
        outcome.condition("NodeAgent", False, reasons.NodeAgentNotReady, reasons.with_remedy(
            f"waiting for {where} to report its nodes", reasons.NodeAgentNotReady))
        return
    desired = max(0, read.as_int(daemonset.get("desiredNumberScheduled")))
    ready = max(0, read.as_int(daemonset.get("numberReady")))
    said = f"{min(ready, desired)}/{desired} pool nodes run the node agent ({where})"
    if ready >= desired:
        outcome.condition("NodeAgent", True, reasons.NodeAgentReady, said)
    else:
        outcome.condition("NodeAgent", False, reasons.NodeAgentNotReady,
                          reasons.with_remedy(said, reasons.NodeAgentNotReady))


# --- 5. report ----------------------------------------------------------------------------


def compose(request: protocol.Request) -> protocol.Outcome:
    outcome = protocol.Outcome()
    spec = read_spec(request)
    outcome.require(HYDRATIONS_KEY, hydrations_requirement(spec))
    decision = decide(request, spec)
    cache = cache_status(decision) if decision else read.mapping_at(request.status, "cache")
    if spec.adopted:
        outcome.status = {"providerConfigName": spec.adopted}
        outcome.composite_ready = True
    else:
        exists = PROVIDER_CONFIG_KEY in request.observed
        outcome.compose(PROVIDER_CONFIG_KEY, provider_config(spec), ready=exists)
        outcome.status = {"providerConfigName": spec.name}
        outcome.composite_ready = exists
    if cache:
        outcome.status["cache"] = cache
    if decision:
        capacity_condition(spec, decision, outcome)
    compose_node_tier(request, spec, outcome)
    return outcome
