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

from fleetcache.functions import capacity, kit, node_capacity, node_system
from fleetcache.functions.models.fleet_cluster import FleetCluster
from fleetcache.functions.node_tier import NodeCache

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
    image: str = kit.DEFAULT_AGENT_IMAGE  # spec.agent.image
    node_cache: NodeCache | None = None  # spec.nodeCache; None: no node tier
    node_settings: node_capacity.Settings | None = None  # its capacity and watermarks
    node_slots: int = 0  # spec.nodeCache.maxConcurrentNodes

    @property
    def provider_config(self) -> str:
        return self.adopted or self.name


def read_spec(request: kit.Request) -> ClusterSpec:
    """The FleetCluster read through its model; every error names the field and the fix."""
    name = kit.object_name(request.name, "metadata.name")
    spec = kit.read_spec(FleetCluster, request.composite.get("spec"))
    cache = spec["cache"]
    budget = cache.get("capacity")
    budget = kit.quantity_bytes(budget, "spec.cache.capacity") if budget is not None else None
    node = node_spec(spec.get("nodeCache"))
    options = {"high": cache["highWatermark"], "low": cache["lowWatermark"],
               "image": kit.get_path(spec, "agent.image") or kit.DEFAULT_AGENT_IMAGE, **node}
    if "providerConfigRef" in spec:
        return ClusterSpec(name, None, spec["providerConfigRef"]["name"], budget, **options)
    return ClusterSpec(name, spec["kubeconfigSecretRef"], None, budget, **options)


def node_spec(node: dict | None) -> dict:
    """spec.nodeCache (validated and defaulted by the model) as ClusterSpec fields; the pool
    and path are read by node_tier.NodeCache, as the hydrations read them, so the node
    agent and the node PVs can never disagree on either."""
    if node is None:
        return {}
    node_cache = NodeCache.of(node)
    if node_cache.problem:
        raise kit.InputError(node_cache.problem)
    settings = node_capacity.Settings(
        kit.quantity_bytes(node["capacityPerNode"], "spec.nodeCache.capacityPerNode"),
        node["highWatermark"], node["lowWatermark"])
    return {"node_cache": node_cache, "node_settings": settings,
            "node_slots": node["maxConcurrentNodes"]}


def hydrations_requirement(spec: ClusterSpec) -> kit.Requirement:
    """Every ModelCacheHydration labelled with this cluster, in every namespace: a
    FleetCluster is cluster-scoped and a label selector without a namespace lists across
    all namespaces (Crossplane lists with client.InNamespace(""))."""
    return kit.Requirement(kit.API_VERSION, "ModelCacheHydration",
                           match_labels=((kit.LABEL_CLUSTER, kit.label_value(spec.name)),))


def copy_of(hydration: dict) -> capacity.Copy:
    """A hydration as the decision sees it. Tolerant: a field that is malformed reads as
    unknown, which keeps the copy (and a size that is not a quantity never admits it)."""
    status = kit.mapping_at(hydration, "status")
    meta = kit.mapping_at(hydration, "metadata")
    try:
        size: int | None = kit.quantity_bytes(kit.get_path(hydration, "spec.storage.size"),
                                              "spec.storage.size")
    except kit.InputError:
        size = None
    return capacity.Copy(
        key=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        size=size,
        used=capacity.count(status, "usedBytes"),
        phase=kit.reason_or_empty(status.get("phase")),
        serving=isinstance(status.get("servingCommit"), str)
        and bool(kit.COMMIT_SHAPE.match(status["servingCommit"])),
        **capacity.use_of(hydration),
    )


def copies_on(spec: ClusterSpec, hydrations: list[dict]) -> list[capacity.Copy]:
    """The hydrations the label selected that really target this cluster (a long name's
    label is a hashed form, so the name itself is checked too) and take room on it (an
    existing volume is the user's claim: `capacity.allocates`); one without a readable
    namespace and name cannot be listed, so it is left out."""
    return [copy_of(h) for h in hydrations
            if kit.get_path(h, "spec.clusterName") == spec.name
            and capacity.allocates(kit.get_path(h, "spec.source"))
            and kit.name_or_empty(kit.get_path(h, "metadata.name"))
            and kit.name_or_empty(kit.get_path(h, "metadata.namespace"))]


# --- 2. compose ---------------------------------------------------------------------------


def provider_config(spec: ClusterSpec) -> dict:
    return {
        "apiVersion": kit.OBJECT_API_VERSION,
        "kind": kit.PROVIDER_CONFIG_KIND,
        "metadata": {
            "name": spec.name,
            "labels": {kit.LABEL_MANAGED_BY: "fleetcache",
                       kit.LABEL_CLUSTER: kit.label_value(spec.name)},
        },
        "spec": {"credentials": {"source": "Secret", "secretRef": dict(spec.secret_ref or {})}},
    }


# --- 3. decide capacity -------------------------------------------------------------------


def latched(request: kit.Request, field: str) -> list[str]:
    values = kit.get_path(request.status, f"cache.{field}")
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


def decide(request: kit.Request, spec: ClusterSpec) -> capacity.Decision | None:
    """None while Crossplane has not fetched the hydrations yet: nothing is decided anew
    and the last published decision stands."""
    hydrations = request.required.get(HYDRATIONS_KEY)
    if hydrations is None:
        return None
    return capacity.decide(copies_on(spec, hydrations), spec.capacity, spec.high, spec.low,
                           latched(request, "admitted"), latched(request, "evicted"))


def cache_status(decision: capacity.Decision) -> dict:
    status: dict = {
        "capacityHuman": kit.human_bytes(decision.capacity) if decision.capacity
        else "unlimited",
        "usedBytes": decision.used,
        "usedHuman": kit.human_bytes(decision.used),
        "reservedBytes": decision.reserved,
        **decision.lists,
        "waitingCount": len(decision.waiting),
    }
    if decision.capacity:
        status.update(capacityBytes=decision.capacity, usedPercent=decision.used_percent,
                      usedHuman=f"{kit.human_bytes(decision.used)} ({decision.used_percent}%)")
    return status


def capacity_condition(spec: ClusterSpec, decision: capacity.Decision, outcome: kit.Outcome
                       ) -> None:
    if not decision.capacity_low:
        outcome.condition("CapacityLow", False, "CapacityAvailable",
                          f"{kit.human_bytes(decision.used)} used"
                          + (f" of {kit.human_bytes(decision.capacity)}" if decision.capacity
                             else ", no spec.cache.capacity set"))
        return
    where = f"cluster {spec.name} uses {kit.human_bytes(decision.used)} of " \
            f"{kit.human_bytes(decision.capacity or 0)} (high watermark {spec.high}%: " \
            f"{kit.human_bytes(decision.high)})"
    said = decision.shortfall(
        where, "no copy is removable: every remaining copy is pinned, mounted by a replica or "
        "not measured yet", "hydration(s)", f"{kit.human_bytes(decision.reserved)} is reserved "
        "by downloads admitted or running")
    outcome.condition("CapacityLow", True, "CapacityLow", kit.with_remedy(said, "CapacityLow"))


# --- 4. the node tier ----------------------------------------------------------------------


def compose_node_tier(request: kit.Request, spec: ClusterSpec, outcome: kit.Outcome) -> None:
    """The node agent, the keep-list and the slots on the cluster, and the per-node capacity
    decision. While the hydrations are not fetched nothing is decided anew: the last
    status.nodeCache stands and the keep-list is kept as observed (never an empty one that
    would have every node delete its caches)."""
    node_cache = spec.node_cache
    if node_cache is None:
        return
    if node_cache.storage_class:
        outcome.condition("NodeAgent", False, "NodeCacheModeUnsupported", kit.with_remedy(
            f"spec.nodeCache.storageClassName {node_cache.storage_class} is reserved: nothing "
            "is composed for the node tier on this cluster and its Node caches stay on the "
            "volume", "NodeCacheModeUnsupported"))
        return
    labels = {kit.LABEL_MANAGED_BY: "fleetcache", kit.LABEL_CLUSTER: kit.label_value(spec.name)}

    def remote(key: str, manifest: dict, policies: tuple[str, ...] | None = None) -> None:
        seen = bool(kit.remote_manifest(request.observed.get(key)))
        outcome.compose(key, kit.remote_object(
            kit.child_name(spec.name, key), OBJECT_NAMESPACE, manifest, spec.provider_config,
            management_policies=policies, labels=labels), seen)

    for key, (manifest, policies) in node_system.manifests(
            node_cache, spec.node_slots, spec.image, labels).items():
        remote(key, manifest, policies)
    hydrations = request.required.get(HYDRATIONS_KEY)
    if hydrations is None:
        kit.carry_over(request, outcome, [node_system.DIRS_KEY])
        latched = kit.mapping_at(request.status, "nodeCache")
        if latched:
            outcome.status["nodeCache"] = latched
    else:
        caches = node_capacity.node_hydrations(spec.name, hydrations)
        decision = node_capacity.decide(spec.node_settings, caches,
                                        kit.get_path(request.status, "nodeCache"))
        keep = node_capacity.keep_list(caches, decision, request.now)
        remote(node_system.DIRS_KEY, node_system.dirs_manifest(
            node_capacity.keep_json(keep), labels))
        outcome.status["nodeCache"] = node_capacity.status_of(decision)
        node_capacity.condition(spec.name, spec.node_settings, decision,
                                node_capacity.least_free(caches), outcome)
    agent_condition(request, outcome)


def agent_condition(request: kit.Request, outcome: kit.Outcome) -> None:
    """NodeAgent: whether every pool node runs the node agent (the DaemonSet's numbers)."""
    daemonset = kit.mapping_at(kit.remote_manifest(
        request.observed.get(node_system.AGENT_KEY)), "status")
    where = f"DaemonSet {node_system.SYSTEM_NAMESPACE}/{node_system.NAME}"
    if "desiredNumberScheduled" not in daemonset:
        outcome.condition("NodeAgent", False, "NodeAgentNotReady", kit.with_remedy(
            f"waiting for {where} to report its nodes", "NodeAgentNotReady"))
        return
    desired = max(0, kit.as_int(daemonset.get("desiredNumberScheduled")))
    ready = max(0, kit.as_int(daemonset.get("numberReady")))
    said = f"{min(ready, desired)}/{desired} pool nodes run the node agent ({where})"
    if ready >= desired:
        outcome.condition("NodeAgent", True, "NodeAgentReady", said)
    else:
        outcome.condition("NodeAgent", False, "NodeAgentNotReady",
                          kit.with_remedy(said, "NodeAgentNotReady"))


# --- 5. report ----------------------------------------------------------------------------


def compose(request: kit.Request) -> kit.Outcome:
    outcome = kit.Outcome()
    spec = read_spec(request)
    outcome.require(HYDRATIONS_KEY, hydrations_requirement(spec))
    decision = decide(request, spec)
    cache = cache_status(decision) if decision else kit.mapping_at(request.status, "cache")
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
