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
4. for each node pool (spec.nodeCache is the pool default, spec.nodePools[] the named ones;
   design/node-pools.md) with a path: decide the per-node capacity of that pool's tier-Node
   caches (node_tier/capacity.py, the same rules) and compose its node agent and keep-list,
   and once the warm slots shared by the pools, in fleetcache-system on the cluster
   (node_tier/node_agent.py);
5. report status.providerConfigName, status.cache, status.nodeCache (the default pool),
   status.nodePools (with spec.nodePools, a row per pool) and the CapacityLow,
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
from fleetcache.functions.node_tier.warmer_inputs import DEFAULT_POOL, NodeCache
from fleetcache.functions.views.fleet_cluster import ClusterCache

PROVIDER_CONFIG_KEY = "provider-config"
HYDRATIONS_KEY = "model-cache-hydrations"
OBJECT_NAMESPACE = "crossplane-system"  # where the Objects of a cluster-scoped FleetCluster live


# --- 1. inputs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class NodePool:
    """One node pool of the cluster as the decision and the node agent need it."""

    node_cache: NodeCache  # the pool, its path, as the hydrations read it
    settings: node_capacity.Settings  # its capacity and watermarks
    slots: int  # its maxConcurrentNodes

    @property
    def name(self) -> str:
        return self.node_cache.name


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    secret_ref: dict | None  # {namespace, name, key} when composing
    adopted: str | None  # providerConfigRef.name when adopting
    capacity: int | None  # spec.cache.capacity in bytes; None: no budget
    high: int  # spec.cache.highWatermark, percent
    low: int  # spec.cache.lowWatermark, percent
    image: str = agent_job.DEFAULT_AGENT_IMAGE  # spec.agent.image
    pools: tuple[NodePool, ...] = ()  # spec.nodeCache (default) and spec.nodePools; none: no node tier
    named_pools: bool = False  # spec.nodePools is set: status.nodePools has a row per pool

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
    pools = node_pools(spec)
    options = {"high": cache["highWatermark"], "low": cache["lowWatermark"],
               "image": read.get_path(spec, "agent.image") or agent_job.DEFAULT_AGENT_IMAGE,
               "pools": pools, "named_pools": bool(spec.get("nodePools"))}
    if "providerConfigRef" in spec:
        return ClusterSpec(name, None, spec["providerConfigRef"]["name"], budget, **options)
    return ClusterSpec(name, spec["kubeconfigSecretRef"], None, budget, **options)


def node_pools(spec: dict) -> tuple[NodePool, ...]:
    """spec.nodeCache (the pool default) and spec.nodePools (validated and defaulted by the
    model), in that order; each pool and path is read by node_tier.NodeCache, as the
    hydrations read them, so the node agents and the node PVs can never disagree."""
    declared = [] if spec.get("nodeCache") is None else [(spec["nodeCache"], None)]
    declared += [(pool, pool["name"]) for pool in spec.get("nodePools") or []]
    names = [name or DEFAULT_POOL for _, name in declared]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise specs.InputError(f"spec.nodePools: pool {repeated[0]} is declared twice (spec.nodeCache "
                               "is the pool default); give each pool one entry")
    return tuple(node_pool(node, name) for node, name in declared)


def node_pool(node: dict, name: str | None) -> NodePool:
    """One declared pool; name None: spec.nodeCache, the pool default."""
    node_cache = NodeCache.of_set(node) if name is None else \
        NodeCache.of_set(node, name, f"spec.nodePools[{name}]")
    if node_cache.problem:
        raise specs.InputError(node_cache.problem)
    settings = node_capacity.Settings(
        quantities.quantity_bytes(node["capacityPerNode"], f"{node_cache.field}.capacityPerNode"),
        node["highWatermark"], node["lowWatermark"], node_cache.name)
    return NodePool(node_cache, settings, node["maxConcurrentNodes"])


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
    """The node agent of every pool, its keep-list, the shared slots on the cluster, and the
    per-node capacity decision of each pool. While the hydrations are not fetched nothing is
    decided anew: the last status.nodeCache (and status.nodePools) stands and each keep-list
    is kept as observed (never an empty one that would have every node delete its caches)."""
    if not spec.pools:
        return
    composed = [pool for pool in spec.pools if not pool.node_cache.storage_class]
    unsupported = [pool for pool in spec.pools if pool.node_cache.storage_class]
    if not composed:
        reserved = unsupported[0].node_cache
        outcome.condition("NodeAgent", False, reasons.NodeCacheModeUnsupported, reasons.with_remedy(
            f"{reserved.field}.storageClassName {reserved.storage_class} is reserved: nothing "
            "is composed for the node tier on this cluster and its Node caches stay on the "
            "volume", reasons.NodeCacheModeUnsupported))
        return
    labels = {naming.LABEL_MANAGED_BY: "fleetcache", naming.LABEL_CLUSTER: naming.label_value(spec.name)}
    agents = {node_agent.PoolNames(pool.name).agent_key for pool in composed}

    def remote(key: str, manifest: dict, policies: tuple[str, ...] | None = None) -> None:
        seen = bool(objects.remote_manifest(request.observed.get(key)))
        awaited = key in agents  # the NodeAgent condition reads their numbers
        outcome.compose(key, objects.remote_object(
            naming.child_name(spec.name, key), OBJECT_NAMESPACE, manifest, spec.provider_config,
            management_policies=policies, labels=labels, watch=awaited,
            readiness_query=objects.ROLLED_OUT_QUERY if awaited else None), seen)

    for key, (manifest, policies) in node_agent.manifests(
            [pool.node_cache for pool in composed], sum(pool.slots for pool in composed),
            spec.image, labels).items():
        remote(key, manifest, policies)
    hydrations = request.required.get(HYDRATIONS_KEY)
    if hydrations is None:
        objects.carry_over(request, outcome, [node_agent.PoolNames(pool.name).dirs_key
                                              for pool in composed])
        for field in ("nodeCache", "nodePools"):
            latched = request.status.get(field)
            if latched:
                outcome.status[field] = latched
    else:
        rows: list[dict] = []
        conditions: list[tuple[bool, str, str]] = []
        for pool in spec.pools:
            row, low = decide_pool(request, spec, pool, hydrations, labels, remote)
            rows.append({"name": pool.name, **row})
            conditions.append(low)
            if pool.name == DEFAULT_POOL:
                outcome.status["nodeCache"] = row
        if spec.named_pools:
            outcome.status["nodePools"] = rows
        capacity_low = [c for c in conditions if c[0]]
        said = capacity_low or conditions
        outcome.condition("NodeCapacityLow", said[0][0], said[0][1],
                          "; ".join(c[2].rstrip(".") for c in said) if len(said) > 1 else said[0][2])
    agent_condition(request, composed, outcome)


def decide_pool(request: protocol.Request, spec: ClusterSpec, pool: NodePool,
                hydrations: list[dict], labels: dict, remote) -> tuple[dict, tuple[bool, str, str]]:
    """One pool's capacity decision over its own Node caches, its keep-list composed (a
    reserved storage-class pool composes none); returns its status row and NodeCapacityLow."""
    names = node_agent.PoolNames(pool.name)
    caches = node_capacity.node_hydrations(spec.name, hydrations, pool.name)
    latched = read.get_path(request.status, "nodeCache") if pool.name == DEFAULT_POOL else next(
        (row for row in read.get_path(request.status, "nodePools") or []
         if isinstance(row, dict) and row.get("name") == pool.name), None)
    decision = node_capacity.decide(pool.settings, caches, latched)
    if not pool.node_cache.storage_class:
        keep = node_capacity.keep_list(caches, decision, request.now)
        remote(names.dirs_key, node_agent.dirs_manifest(node_capacity.keep_json(keep), labels,
                                                        names.dirs))
    return node_capacity.status_of(decision), node_capacity.pool_condition(
        spec.name, pool.settings, decision, node_capacity.least_free(caches))


def agent_condition(request: protocol.Request, pools: list[NodePool],
                    outcome: protocol.Outcome) -> None:
    """NodeAgent: whether every pool node runs its pool's node agent (the DaemonSets' numbers)."""
    said, ready_all = [], True
    for pool in pools:
        names = node_agent.PoolNames(pool.name)
        daemonset = read.mapping_at(objects.remote_manifest(
            request.observed.get(names.agent_key)), "status")
        where = f"DaemonSet {node_agent.SYSTEM_NAMESPACE}/{names.agent}"
        if "desiredNumberScheduled" not in daemonset:
            outcome.condition("NodeAgent", False, reasons.NodeAgentNotReady, reasons.with_remedy(
                f"waiting for {where} to report its nodes", reasons.NodeAgentNotReady))
            return
        desired = max(0, read.as_int(daemonset.get("desiredNumberScheduled")))
        ready = max(0, read.as_int(daemonset.get("numberReady")))
        said.append(f"{min(ready, desired)}/{desired} pool nodes run the node agent ({where})")
        ready_all = ready_all and ready >= desired
    if ready_all:
        outcome.condition("NodeAgent", True, reasons.NodeAgentReady, "; ".join(said))
    else:
        outcome.condition("NodeAgent", False, reasons.NodeAgentNotReady,
                          reasons.with_remedy("; ".join(said), reasons.NodeAgentNotReady))


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
