"""What the node tier of one ModelCacheHydration works from (node_tier/warmers.py, step 1):
the hydration itself and where its volume tier stands, the FleetCluster's spec.nodeCache (the
pool, the opt-in label, the path) and its status.nodeCache (the per-node capacity decision
compose-fleet-cluster publishes), and the commits the Node replicas of the cache read.

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
    labels: bool = True  # spec.nodeCache.labels NodeAgent: warm nodes are labelled
    problem: str = ""

    @classmethod
    def of(cls, spec: Any) -> NodeCache | None:
        """None when the cluster has no spec.nodeCache."""
        return None if spec is None else cls.of_set(spec)

    @classmethod
    def of_set(cls, spec: Any) -> NodeCache:
        """A spec.nodeCache that is set (anything but None)."""
        if not isinstance(spec, Mapping):
            return cls(problem="spec.nodeCache is not an object")
        storage_class = spec.get("storageClassName")
        if storage_class:
            return cls(storage_class=messages.clipped(storage_class, 253))
        path = spec.get("path")
        if not isinstance(path, str) or not path.startswith("/") or len(path) > 1024 \
                or any(c.isspace() for c in path) or ".." in path.split("/"):
            return cls(problem=f"spec.nodeCache.path {messages.shown(path)} is not an absolute "
                               "path (it needs one, e.g. /mnt/nvme0)")
        capacity = spec.get("capacityPerNode")
        try:
            quantities.quantity_bytes(capacity, "spec.nodeCache.capacityPerNode")
        except specs.InputError as err:
            return cls(problem=str(err))
        try:
            pool = pool_affinity(spec.get("nodeSelector"), spec.get("optInLabel"))
        except specs.InputError as err:
            return cls(problem=str(err))
        return cls(path=path.rstrip("/") or "/", capacity=str(capacity), pool=pool,
                   tolerations=tolerations_of(spec.get("tolerations")),
                   labels=spec.get("labels") != "None")


def pool_affinity(selector: Any, opt_in: Any) -> dict:
    """The pool as a NodeSelector: the selector (matchLabels as In) and the opt-in label,
    and never a control-plane node (the AIBrix exclusion list)."""
    selector = selector if selector is not None else {}
    if not isinstance(selector, Mapping):
        raise specs.InputError("spec.nodeCache.nodeSelector is not a label selector")
    labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(labels, Mapping) or not isinstance(expressions, list):
        raise specs.InputError("spec.nodeCache.nodeSelector is not a label selector")
    terms = []
    for key in sorted(labels):
        terms.append(requirement(key, "In", [labels[key]]))
    for index, expression in enumerate(expressions):
        if not isinstance(expression, Mapping):
            raise specs.InputError(f"spec.nodeCache.nodeSelector.matchExpressions[{index}] is "
                                 "not an expression")
        terms.append(requirement(expression.get("key"), expression.get("operator"),
                                 expression.get("values") or []))
    key, value = DEFAULT_OPT_IN
    if isinstance(opt_in, Mapping):
        key, value = opt_in.get("key", key), opt_in.get("value", value)
    terms.append(requirement(key, "In", [value]))
    terms += [requirement(role, "DoesNotExist", []) for role in CONTROL_PLANE_ROLES]
    return {"nodeSelectorTerms": [{"matchExpressions": terms}]}


def requirement(key: Any, operator: Any, values: Any) -> dict:
    """One NodeSelectorRequirement, or InputError naming what is wrong."""
    if not isinstance(key, str) or not key or len(key) > 317:
        raise specs.InputError(f"spec.nodeCache: {messages.shown(key)} is not a label key")
    if operator not in NODE_SELECTOR_OPERATORS:
        raise specs.InputError(f"spec.nodeCache: operator {messages.shown(operator)} is not one of "
                             f"{', '.join(NODE_SELECTOR_OPERATORS)}")
    if not isinstance(values, list) or not all(isinstance(v, str) and len(v) <= 63
                                               for v in values) \
            or (operator in ("In", "NotIn")) != bool(values):
        raise specs.InputError(f"spec.nodeCache: the values of {messages.clipped(key, 63)} "
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
