"""What the node tier of one ModelCacheHydration works from (node_tier/warmers.py, step 1):
the hydration itself and where its volume tier stands, the FleetCluster's pool the hydration
names (spec.nodeCache for `default`, else its spec.nodePools[] entry: the selector, the opt-in
label, the path) and that pool's row of the per-node capacity decision compose-fleet-cluster
publishes (status.nodeCache, status.nodePools[]), and the commits the Node replicas of the
cache read.

Each is read as untrusted input: a spec.nodeCache that cannot be used says why (`problem`),
a replica without a readable commit means nothing is pruned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetcache import messages, shapes
from fleetcache.apis import specs
from fleetcache.functions import quantities, read

DEFAULT_POOL = "default"  # the pool FleetCluster spec.nodeCache declares
MAX_POOLS = 8  # spec.nodePools' maxItems
DEFAULT_OPT_IN = ("fleetcache.dev/node-cache", "enabled")
CONTROL_PLANE_ROLES = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
TOLERATION_FIELDS = {"key": str, "operator": str, "value": str, "effect": str,
                     "tolerationSeconds": int}


@dataclass(frozen=True)
class Hydration:
    """What the node tier needs of its ModelCacheHydration."""

    namespace: str
    name: str  # the hydration: its Objects' names derive from it
    cache: str  # spec.modelCacheName: remote names derive from it
    cluster: str
    repo: str  # the repository the volume's hub/ holds; "" for an existing volume
    commit: str
    manifest_digest: str
    labels: Mapping[str, str]
    pool: str = DEFAULT_POOL  # spec.nodePool: the FleetCluster's pool it warms

    @property
    def key(self) -> str:
        """How the FleetCluster's status.nodeCache names this cache (and the node agent its
        directory): one per namespace and cache on a cluster."""
        return f"{self.namespace}/{self.cache}"


@dataclass(frozen=True)
class VolumeTier:
    """Where the hydration's volume tier stands, as the node tier depends on it."""

    phase: str  # the hydration's phase after its gate
    reason: str
    composing: bool  # the hydration composes its objects (else it holds them or has none)
    problem: str = ""  # why its FleetCluster cannot be used ("" when it can)
    shared: bool = True  # the cache PVC may be mounted on many nodes (not ReadWriteOnce only)

    @property
    def ready(self) -> bool:
        return self.phase == "Ready"


@dataclass(frozen=True)
class NodeCache:
    """A FleetCluster's spec.nodeCache, read tolerantly (compose-fleet-cluster reports its own
    spec): `problem` says why it cannot be used ("" when it can)."""

    path: str = ""
    capacity: str = ""  # capacityPerNode, as written
    pool: dict | None = None  # the NodeSelector of the pool
    tolerations: tuple[dict, ...] = ()
    storage_class: str = ""
    labels: bool = True  # the pool's labels NodeAgent: warm nodes are labelled
    problem: str = ""
    name: str = DEFAULT_POOL  # the pool
    field: str = "spec.nodeCache"  # where the FleetCluster declares it, for messages

    @classmethod
    def of(cls, spec: Any) -> NodeCache | None:
        """None when the cluster has no spec.nodeCache."""
        return None if spec is None else cls.of_set(spec)

    @classmethod
    def of_pool(cls, fleet_cluster_spec: Any, name: str) -> NodeCache | None:
        """The FleetCluster's pool `name`: spec.nodeCache for default while it is set, else
        the spec.nodePools[] entry of that name; None when the cluster has no such pool."""
        spec = fleet_cluster_spec if isinstance(fleet_cluster_spec, Mapping) else {}
        if name == DEFAULT_POOL and spec.get("nodeCache") is not None:
            return cls.of_set(spec["nodeCache"])
        pools = spec.get("nodePools")
        for entry in pools[:MAX_POOLS] if isinstance(pools, list) else []:
            if isinstance(entry, Mapping) and entry.get("name") == name:
                return cls.of_set(entry, name, f"spec.nodePools[{name}]")
        return None

    @classmethod
    def of_set(cls, spec: Any, name: str = DEFAULT_POOL, field: str = "spec.nodeCache"
               ) -> NodeCache:
        """A pool that is declared (anything but None), at `field` of the FleetCluster."""
        def where(**values: Any) -> NodeCache:
            return cls(name=name, field=field, **values)

        if not isinstance(spec, Mapping):
            return where(problem=f"{field} is not an object")
        storage_class = spec.get("storageClassName")
        if storage_class:
            return where(storage_class=messages.clipped(storage_class, 253))
        path = spec.get("path")
        if not isinstance(path, str) or not path.startswith("/") or len(path) > 1024 \
                or any(c.isspace() for c in path) or ".." in path.split("/"):
            return where(problem=f"{field}.path {messages.shown(path)} is not an absolute "
                                 "path (it needs one, e.g. /mnt/nvme0)")
        capacity = spec.get("capacityPerNode")
        try:
            quantities.quantity_bytes(capacity, f"{field}.capacityPerNode")
        except specs.InputError as err:
            return where(problem=str(err))
        try:
            pool = pool_affinity(spec.get("nodeSelector"), spec.get("optInLabel"), field)
        except specs.InputError as err:
            return where(problem=str(err))
        return where(path=path.rstrip("/") or "/", capacity=str(capacity), pool=pool,
                     tolerations=tolerations_of(spec.get("tolerations")),
                     labels=spec.get("labels") != "None")


def pool_affinity(selector: Any, opt_in: Any, field: str = "spec.nodeCache") -> dict:
    """The pool as a NodeSelector: the selector (matchLabels as In) and the opt-in label,
    and never a control-plane node (the AIBrix exclusion list)."""
    selector = selector if selector is not None else {}
    if not isinstance(selector, Mapping):
        raise specs.InputError(f"{field}.nodeSelector is not a label selector")
    labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(labels, Mapping) or not isinstance(expressions, list):
        raise specs.InputError(f"{field}.nodeSelector is not a label selector")
    terms = []
    for key in sorted(labels):
        terms.append(requirement(key, "In", [labels[key]], field))
    for index, expression in enumerate(expressions):
        if not isinstance(expression, Mapping):
            raise specs.InputError(f"{field}.nodeSelector.matchExpressions[{index}] is "
                                 "not an expression")
        terms.append(requirement(expression.get("key"), expression.get("operator"),
                                 expression.get("values") or [], field))
    key, value = DEFAULT_OPT_IN
    if isinstance(opt_in, Mapping):
        key, value = opt_in.get("key", key), opt_in.get("value", value)
    terms.append(requirement(key, "In", [value], field))
    terms += [requirement(role, "DoesNotExist", [], field) for role in CONTROL_PLANE_ROLES]
    return {"nodeSelectorTerms": [{"matchExpressions": terms}]}


def requirement(key: Any, operator: Any, values: Any, field: str = "spec.nodeCache") -> dict:
    """One NodeSelectorRequirement, or InputError naming what is wrong."""
    if not isinstance(key, str) or not key or len(key) > 317:
        raise specs.InputError(f"{field}: {messages.shown(key)} is not a label key")
    if operator not in NODE_SELECTOR_OPERATORS:
        raise specs.InputError(f"{field}: operator {messages.shown(operator)} is not one of "
                             f"{', '.join(NODE_SELECTOR_OPERATORS)}")
    if not isinstance(values, list) or not all(isinstance(v, str) and len(v) <= 63
                                               for v in values) \
            or (operator in ("In", "NotIn")) != bool(values):
        raise specs.InputError(f"{field}: the values of {messages.clipped(key, 63)} "
                             f"{operator} are not label values")
    out: dict = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


def tolerations_of(value: Any) -> tuple[dict, ...]:
    """spec.nodeCache.tolerations: the well-formed ones (core/v1 Toleration fields only)."""
    kept = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, Mapping) and item and all(
                k in TOLERATION_FIELDS and isinstance(v, TOLERATION_FIELDS[k])
                and not isinstance(v, bool) for k, v in item.items()):
            kept.append(dict(item))
    return tuple(kept)


@dataclass(frozen=True)
class Decision:
    """The FleetCluster's status.nodeCache for this cache (compose-fleet-cluster decides)."""

    known: bool  # status.nodeCache is published
    admitted: bool
    evicted: bool

    @classmethod
    def of_pool(cls, fleet_cluster_status: Any, pool: str, key: str) -> Decision:
        """The decision of pool `pool`: status.nodeCache for default, else its row of
        status.nodePools (compose-fleet-cluster writes a row for every pool, default too)."""
        status = fleet_cluster_status if isinstance(fleet_cluster_status, Mapping) else {}
        if pool == DEFAULT_POOL:
            return cls.of(status.get("nodeCache"), key)
        rows = status.get("nodePools")
        row = next((r for r in rows if isinstance(r, Mapping) and r.get("name") == pool), None) \
            if isinstance(rows, list) else None
        return cls.of(row, key)

    @classmethod
    def of(cls, status: Any, key: str) -> Decision:
        if not isinstance(status, Mapping):
            return cls(False, False, False)

        def listed(name: str) -> bool:
            values = status.get(name)
            return isinstance(values, list) and key in values

        return cls(True, listed("admitted"), listed("evicted"))


def kept_on_nodes(replicas: Any, h: Hydration) -> frozenset[str] | None:
    """The commits the nodes keep: this one and those the Node replicas of this cache on this
    cluster read; the warmers prune the repository's others once this one is Ready. None
    while the replicas are not known (or one names no readable commit): nothing is pruned."""
    if not isinstance(replicas, list):
        return None
    kept = {h.commit}
    for replica in replicas:
        spec = read.mapping_at(replica, "spec")
        if spec.get("delivery") != "Node" or spec.get("clusterName") != h.cluster \
                or read.get_path(spec, "cache.modelCacheName") != h.cache:
            continue
        commit = read.get_path(spec, "nodeCache.commit")
        if not shapes.is_resolved_commit(commit):
            return None
        kept.add(commit)
    return frozenset(kept)
