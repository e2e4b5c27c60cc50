"""The node tier of one ModelCacheHydration (spec.tier Node): the cluster's verified volume
copied onto the local disk of every opted-in pool node, by a restricted DaemonSet on the
cluster (design/node-tier.md §3).

compose-model-cache-hydration calls `run` once per call, after it composed the volume tier.
Lifecycle, top to bottom:
1. read the FleetCluster's spec.nodeCache (the pool, the opt-in label, the path) and its
   status.nodeCache (the per-node capacity decision compose-fleet-cluster publishes);
2. observe the warmer DaemonSet's numbers and the per-node records its pods write;
3. decide: a reason the tier cannot run here (not configured, a mode it does not support,
   evicted, waiting for room, the volume not Ready on this commit), else the phase the
   counts give;
4. compose on the cluster: the pool's hostPath PV pre-bound to the node PVC, the status
   ConfigMap the warmers write (Observe/Create/Delete), the warmers' RBAC, their RoleBinding
   to the slot Role in fleetcache-system, and the warmer DaemonSet;
5. report status.nodeTier (`run` does 3 to 5).

A function cannot list a remote cluster's nodes: the DaemonSet controller does the fan-out
(a node that joins the pool gets a warmer, one that leaves or disappears loses it), and the
counts come back through two fixed-name objects. Nothing here trusts a record: a garbage
record is skipped, every count is clamped to the DaemonSet's own numbers.
"""

from __future__ import annotations
from fleetcache.apis import specs
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.k8s import objects
from fleetcache.functions import naming
from fleetcache.functions import protocol
from fleetcache.functions import quantities
from fleetcache.functions import read
from fleetcache.functions.views.fleet_cluster import FleetClusterView
from fleetcache import messages
from fleetcache import reasons
from fleetcache import shapes

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping



NODE_TIER = "Node"
SYSTEM_NAMESPACE = "fleetcache-system"
SLOTS_ROLE = "fleetcache-node-warm-slots"
STORAGE_CLASS = "fleetcache-node"
CLAIM_LABEL = f"{naming.GROUP}/node-cache-claim"
NODE_LABEL_PREFIX = "node-cache.fleetcache.dev/"
DEFAULT_OPT_IN = ("fleetcache.dev/node-cache", "enabled")
# The agent's roots, as fetch writes one (agent/layout.py): the HF cache in hub/, the
# manifests it verifies against in .fleetcache/ beside it; node-warm writes the node copy in
# the same layout, node-ready.json last.
VOLUME_MOUNT = "/var/cache/fleetcache-volume"  # the cluster PVC, read-only
NODE_MOUNT = "/var/cache/fleetcache-node"  # the node PVC: this node's copy
CONTROL_PLANE_ROLES = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
TOLERATION_FIELDS = {"key": str, "operator": str, "value": str, "effect": str,
                     "tolerationSeconds": int}
RECORD_PHASES = ("Waiting", "Copying", "Ready", "Failed")
RECORD_LIMIT = 4096  # characters of one node's record (~200 written): longer is garbage
FAILURE_MESSAGE_LIMIT = 120
STARTED = ("Warming", "Ready", "Degraded", "Failed")  # a latched nodeTier.phase

# Control-plane keys of the node tier's Objects; every one starts with "node-".
PV_KEY = "node-pv"
CLAIM_KEY = "node-claim"
STATUS_KEY = "node-status"
WARMER_KEY = "node-warmer"
ACCESS_KEYS = ("node-service-account", "node-role", "node-role-binding", "node-slots-binding")
KEYS = (PV_KEY, CLAIM_KEY, STATUS_KEY, *ACCESS_KEYS, WARMER_KEY)
CLAIM_BOUND_QUERY = "has(object.status) && has(object.status.phase) && " \
                    "object.status.phase == 'Bound'"


# --- 1. inputs ----------------------------------------------------------------------------


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
    def of(cls, spec: Any) -> "NodeCache | None":
        """None when the cluster has no spec.nodeCache."""
        if spec is None:
            return None
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
    def of(cls, status: Any, key: str) -> "Decision":
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


# --- names --------------------------------------------------------------------------------


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def pool_hash(pool: Mapping) -> str:
    """First 8 hex of sha256 of the pool's canonical JSON: PV nodeAffinity is immutable, so a
    new pool is a new PV and PVC."""
    return sha(json.dumps(naming.canonical(pool), sort_keys=True, separators=(",", ":")))[:8]


def label_key(namespace: str, cache: str) -> str:
    """The node label a warm node carries for this cache; its value is the commit."""
    return NODE_LABEL_PREFIX + sha(f"{namespace}/{cache}")[:16]


@dataclass(frozen=True)
class Names:
    hydration: Hydration
    pool_hash: str

    @property
    def volume(self) -> str:
        return f"fleetcache-node-{sha(f'{self.hydration.key}/{self.pool_hash}')[:16]}"

    @property
    def claim(self) -> str:
        return f"{self.hydration.cache}-node-{self.pool_hash}"

    @property
    def warmer(self) -> str:
        """DaemonSet, ServiceAccount, Role and RoleBinding."""
        return f"{self.hydration.cache}-node-warmer"

    @property
    def status(self) -> str:
        return f"{self.hydration.cache}-node-status"

    @property
    def pruner(self) -> str:
        return f"{self.hydration.cache}-node-pruner"

    @property
    def slots_binding(self) -> str:
        return f"{self.hydration.namespace}-{self.hydration.cache}-node-warm-slots"

    def object(self, key: str) -> str:
        return naming.child_name(self.hydration.name, key)


# --- 2. observe: the DaemonSet's numbers and the per-node records ----------------------------


@dataclass(frozen=True)
class Counts:
    observed: bool  # the DaemonSet reported its status
    desired: int = 0
    ready: int = 0
    downloading: int = 0
    failed: int = 0
    min_free: int | None = None
    first_failure: dict | None = None

    @property
    def pending(self) -> int:
        return self.desired - self.ready - self.downloading - self.failed

    def as_status(self) -> dict:
        status = {"desiredNodes": self.desired, "readyNodes": self.ready,
                  "downloadingNodes": self.downloading, "failedNodes": self.failed,
                  "pendingNodes": self.pending, "summary": f"{self.ready}/{self.desired}"}
        if self.min_free is not None:
            status["minFreeBytes"] = self.min_free
        if self.first_failure:
            status["firstFailure"] = self.first_failure
        return status


def records_of(configmap: Mapping, commit: str) -> dict[str, dict]:
    """The per-node records of `commit`, by node; whatever is not a record is skipped."""
    data = configmap.get("data")
    records = {}
    for node, text in (data.items() if isinstance(data, Mapping) else ()):
        if not isinstance(text, str) or len(text) > RECORD_LIMIT or not read.name_or_empty(node):
            continue
        try:
            record = json.loads(text)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("phase") in RECORD_PHASES \
                and record.get("commit") == commit:
            records[node] = record
    return records


def count(request: protocol.Request, commit: str) -> Counts:
    """design/node-tier.md §3.4: desired is the DaemonSet's (a node that leaves the pool or
    disappears loses its pod at once); ready is at most the DaemonSet's numberReady (a
    NotReady node's stale record does not count); each count is clamped to what is left
    of desired, so records that outlive their node never count."""
    daemonset = read.mapping_at(objects.remote_manifest(request.observed.get(WARMER_KEY)), "status")
    if "desiredNumberScheduled" not in daemonset:
        return Counts(observed=False)
    desired = max(0, read.as_int(daemonset.get("desiredNumberScheduled")))
    records = records_of(objects.remote_manifest(request.observed.get(STATUS_KEY)), commit)
    phases = [r["phase"] for r in records.values()]
    ready = min(phases.count("Ready"), max(0, read.as_int(daemonset.get("numberReady"))),
                desired)
    downloading = min(phases.count("Waiting") + phases.count("Copying"), desired - ready)
    failed = min(phases.count("Failed"), desired - ready - downloading)
    free = [read.as_int(r.get("freeBytes"), -1) for r in records.values()]
    first = next((node for node in sorted(records) if records[node]["phase"] == "Failed"), None)
    failure = None
    if failed and first is not None:
        record = records[first]
        reason = reasons.reason_or_empty(record.get("reason")) or "Failed"
        failure = {"node": first, "reason": reason, "message": messages.clipped(
            agent_job.agents_own_words(record.get("message"), reason), FAILURE_MESSAGE_LIMIT)}
    return Counts(True, desired, ready, downloading, failed,
                  min((f for f in free if f >= 0), default=None), failure)


# --- 3. decide ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    phase: str  # nodeTier.phase
    reason: str
    message: str


def from_counts(h: Hydration, names: Names, counts: Counts) -> Verdict:
    where = f"on cluster {h.cluster}"
    if not counts.observed:
        return Verdict("Pending", reasons.AwaitingPrerequisites, reasons.with_remedy(
            f"waiting for the warmer DaemonSet {names.warmer} {where} to report its nodes",
            reasons.AwaitingPrerequisites))
    if counts.desired == 0:
        return Verdict("Pending", reasons.NoEligibleNodes, reasons.with_remedy(
            f"no node {where} is in the pool: none matches spec.nodeCache.nodeSelector with "
            "the opt-in label (control-plane nodes never are)", reasons.NoEligibleNodes))
    tally = (f"{counts.ready}/{counts.desired} nodes {where} hold {h.commit[:10]}, "
             f"{counts.downloading} copying or waiting for a slot, {counts.failed} failed, "
             f"{counts.pending} not started")
    failure = counts.first_failure
    if failure:
        tally += f"; first failure on {failure['node']}: {failure['reason']}"
        if failure["message"]:
            tally += f" ({failure['message']})"
    if counts.ready == counts.desired:
        return Verdict("Ready", reasons.NodesWarm, tally)
    if failure and counts.failed == counts.desired:
        return Verdict("Failed", failure["reason"], reasons.with_remedy(tally, failure["reason"]))
    if failure:
        remedy = reasons.remedy(failure["reason"]) or reasons.remedy(reasons.NodeTierDegraded)
        return Verdict("Degraded", reasons.NodeTierDegraded, f"{tally.rstrip('.')}. {remedy}")
    return Verdict("Warming", reasons.NodesWarming, tally)


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


def blocked(request: protocol.Request, h: Hydration, cluster: FleetClusterView | None,
            node_cache: NodeCache | None, decision: Decision, volume: VolumeTier
            ) -> Verdict | None:
    """Why the tier composes nothing new here, or None when it composes."""
    where = f"on cluster {h.cluster}"
    if volume.problem or cluster is None:
        return Verdict("Pending", volume.reason or reasons.ClusterNotReady, volume.problem or
                       reasons.with_remedy(f"FleetCluster {h.cluster} cannot be used yet",
                                       reasons.ClusterNotReady))
    if node_cache is None:
        return Verdict("Pending", reasons.NodeTierNotConfigured, reasons.with_remedy(
            f"FleetCluster {h.cluster} sets no spec.nodeCache: this cache stays on the "
            f"cluster's volume there", reasons.NodeTierNotConfigured))
    if node_cache.storage_class:
        return Verdict("Pending", reasons.NodeCacheModeUnsupported, reasons.with_remedy(
            f"FleetCluster {h.cluster} asks for node caches from storage class "
            f"{node_cache.storage_class} (spec.nodeCache.storageClassName), which is reserved: "
            "this cache stays on the cluster's volume there", reasons.NodeCacheModeUnsupported))
    if node_cache.problem:
        return Verdict("Pending", reasons.NodeTierNotConfigured, reasons.with_remedy(
            f"FleetCluster {h.cluster}'s {node_cache.problem}: this cache stays on the "
            "cluster's volume there", reasons.NodeTierNotConfigured))
    if not h.repo:
        return Verdict("Pending", reasons.InvalidSpec, reasons.with_remedy(
            "spec.source.volume: an existing volume is served in place, in its own layout, so "
            "there is no fleetcache volume to warm nodes from; set spec.storage.tier: Volume "
            "on the ModelCache", reasons.InvalidSpec))
    if not h.manifest_digest:
        return Verdict("Pending", reasons.InvalidSpec, reasons.with_remedy(
            "spec.manifestDigest is empty: every node copy is verified against it (the "
            "ModelCache sets it from its resolve)", reasons.InvalidSpec))
    if not volume.shared:
        return Verdict("Pending", reasons.VolumeNotShared, reasons.with_remedy(
            f"the cache volume {where} is ReadWriteOnce: the warmers on every pool node read "
            "it at once, and a ReadWriteOnce volume attaches to one node", reasons.VolumeNotShared))
    if decision.evicted:
        return Verdict("Evicted", reasons.Evicted, (
            f"cluster {h.cluster} evicted {h.key} from its nodes to get under "
            "spec.nodeCache.lowWatermark (it was not pinned and no replica mounted the node "
            "copy): the warmers are gone, the node agent deletes the copies, the volume "
            "keeps serving"))
    if not (volume.composing and volume.ready):
        state = "was evicted" if volume.phase == "Evicted" else \
            f"does not hold {h.commit[:10]} yet" if volume.composing else \
            "composes nothing new"
        return Verdict("Pending", reasons.AwaitingVolumeTier, reasons.with_remedy(
            f"nodes {where} are warmed from the cluster's verified volume, which {state} "
            f"(the hydration is {volume.phase}, {volume.reason})", reasons.AwaitingVolumeTier))
    started = read.get_path(request.status, "nodeTier.phase") in STARTED
    if not (decision.admitted or started or request.observed.get(WARMER_KEY)):
        waiting = "has not decided on it yet" if not decision.known else \
            "has no room for it under spec.nodeCache.highWatermark yet"
        return Verdict("Pending", reasons.NodeCapacityLow, reasons.with_remedy(
            f"FleetCluster {h.cluster} {waiting} (status.nodeCache): the node copies of "
            f"{h.key} wait", reasons.NodeCapacityLow))
    return None


# --- 4. compose ---------------------------------------------------------------------------


def pv_manifest(h: Hydration, names: Names, node_cache: NodeCache) -> dict:
    """The pool's one hostPath PV: every pool node's own directory, pre-bound to the node PVC
    (claimRef), so no other claim can take it. Type Directory, never DirectoryOrCreate: the
    node agent creates it owned by the warmer's uid; the kubelet would create it root-owned."""
    path = f"{node_cache.path.rstrip('/')}/{h.namespace}/{h.cache}"
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": names.volume, "labels": dict(h.labels)},
            "spec": {"capacity": {"storage": node_cache.capacity},
                     "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain",
                     "storageClassName": STORAGE_CLASS,
                     "volumeMode": "Filesystem",
                     "hostPath": {"path": path, "type": "Directory"},
                     "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                  "namespace": h.namespace, "name": names.claim},
                     "nodeAffinity": {"required": node_cache.pool}}}


def claim_manifest(h: Hydration, names: Names, node_cache: NodeCache, existing: dict) -> dict:
    """The node PVC, bound by volumeName. Its request is kept once it exists (a claim on a
    class without expansion cannot be resized)."""
    size = read.get_path(existing, "spec.resources.requests.storage")
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": names.claim, "namespace": h.namespace,
                         "labels": {**h.labels, CLAIM_LABEL: "true"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": STORAGE_CLASS,
                     "volumeName": names.volume, "volumeMode": "Filesystem",
                     "resources": {"requests": {"storage": size if isinstance(size, str)
                                                and size else node_cache.capacity}}}}


def status_manifest(h: Hydration, names: Names) -> dict:
    """The warmers' records, one key per node; created empty, then only the warmers write."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": names.status, "namespace": h.namespace,
                         "labels": dict(h.labels)}}


def access_manifests(h: Hydration, names: Names) -> list[dict]:
    """The warmer's ServiceAccount, its Role (its records, listing pods to prune records of
    nodes without a warmer, one pruner Lease) and both bindings; the slot Role itself is
    composed once per cluster by compose-fleet-cluster."""
    meta = {"name": names.warmer, "namespace": h.namespace, "labels": dict(h.labels)}
    subject = {"kind": "ServiceAccount", "name": names.warmer, "namespace": h.namespace}
    rbac = "rbac.authorization.k8s.io"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta),
         "automountServiceAccountToken": False},
        {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": dict(meta), "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [names.status],
             "verbs": ["get", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": [names.pruner], "verbs": ["get", "update"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "verbs": ["create"]},
        ]},
        {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding", "metadata": dict(meta),
         "roleRef": {"apiGroup": rbac, "kind": "Role", "name": names.warmer},
         "subjects": [subject]},
        {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding",
         "metadata": {"name": names.slots_binding, "namespace": SYSTEM_NAMESPACE,
                      "labels": dict(h.labels)},
         "roleRef": {"apiGroup": rbac, "kind": "Role", "name": SLOTS_ROLE},
         "subjects": [subject]},
    ]


def warmer_manifest(h: Hydration, names: Names, node_cache: NodeCache, image: str,
                    volume_claim: str, keep: frozenset[str]) -> dict:
    """One restricted warmer pod per pool node. Its service account token is mounted only
    because it patches its own record, takes a copy slot (a Lease in fleetcache-system) and
    prunes records of departed nodes; the engine pods never get one."""
    selector = {naming.LABEL_COMPONENT: "node-warmer",
                naming.LABEL_MODEL_CACHE: naming.label_value(h.cache)}
    pods = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    args = ["node-warm", "--source", VOLUME_MOUNT, "--dest", NODE_MOUNT,
            "--repo", h.repo, "--commit", h.commit, "--manifest-digest", h.manifest_digest,
            "--node", "$(NODE_NAME)",
            "--status-configmap", f"{h.namespace}/{names.status}",
            "--slots-namespace", SYSTEM_NAMESPACE,
            "--holder", f"{h.namespace}/{h.cache}/$(NODE_NAME)",
            "--prune-selector", pods, "--pruner-lease", names.pruner]
    for commit in sorted(keep):
        args += ["--keep", commit]
    container = {
        "name": "warmer",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["fleetcache-agent"],
        "args": args,
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                 "fieldPath": "spec.nodeName"}}},
                {"name": "HOME", "value": "/tmp"}, {"name": "TMPDIR", "value": "/tmp"}],
        "readinessProbe": {"exec": {"command": [
            "fleetcache-agent", "node-ready", "--dest", NODE_MOUNT, "--commit", h.commit,
            "--manifest-digest", h.manifest_digest]},
                           "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 1},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"memory": "512Mi"}},
        "securityContext": dict(agent_job.RESTRICTED_CONTAINER_SECURITY),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "volume", "mountPath": VOLUME_MOUNT, "readOnly": True},
                         {"name": "node", "mountPath": NODE_MOUNT},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }
    pod = {
        "serviceAccountName": names.warmer,
        "automountServiceAccountToken": True,
        "securityContext": {"runAsNonRoot": True, "runAsUser": agent_job.AGENT_UID,
                            "runAsGroup": agent_job.AGENT_UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": node_cache.pool}},
        "containers": [container],
        "volumes": [{"name": "volume", "persistentVolumeClaim": {"claimName": volume_claim,
                                                                  "readOnly": True}},
                    {"name": "node", "persistentVolumeClaim": {"claimName": names.claim}},
                    {"name": "tmp", "emptyDir": {}}],
    }
    if node_cache.tolerations:
        pod["tolerations"] = [dict(t) for t in node_cache.tolerations]
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": names.warmer, "namespace": h.namespace,
                         "labels": dict(h.labels)},
            "spec": {"selector": {"matchLabels": selector},
                     "updateStrategy": {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": "100%"}},
                     "template": {"metadata": {"labels": {**h.labels, **selector}},
                                  "spec": pod}}}


def compose_objects(request: protocol.Request, h: Hydration, names: Names, node_cache: NodeCache,
                    cluster: FleetClusterView, volume_claim: str,
                    keep: frozenset[str] | None, outcome: protocol.Outcome) -> None:
    def remote(key: str, manifest: dict, ready: bool, **kwargs: Any) -> None:
        outcome.compose(key, objects.remote_object(names.object(key), h.namespace, manifest,
                                               cluster.provider_config, labels=h.labels,
                                               **kwargs), ready)

    def seen(key: str) -> bool:
        return bool(objects.remote_manifest(request.observed.get(key)))

    claim = objects.remote_manifest(request.observed.get(CLAIM_KEY))
    remote(PV_KEY, pv_manifest(h, names, node_cache), seen(PV_KEY))
    remote(CLAIM_KEY, claim_manifest(h, names, node_cache, claim),
           read.get_path(claim, "status.phase") == "Bound", readiness_query=CLAIM_BOUND_QUERY)
    remote(STATUS_KEY, status_manifest(h, names), seen(STATUS_KEY),
           management_policies=objects.OBSERVE_CREATE_DELETE)
    for key, manifest in zip(ACCESS_KEYS, access_manifests(h, names)):
        remote(key, manifest, seen(key))
    if keep is None:  # which commits replicas read is not known yet: the warmers stay as they are
        objects.carry_over(request, outcome, [WARMER_KEY])
        return
    remote(WARMER_KEY, warmer_manifest(h, names, node_cache, cluster.agent_image,
                                       volume_claim, keep), seen(WARMER_KEY))


# --- 5. the hook: decide, compose, report --------------------------------------------------


def warmer_commit(outcome: protocol.Outcome) -> str:
    """The commit the warmer DaemonSet of this call warms (composed, or kept as observed);
    "" when there is none."""
    resource = outcome.desired.get(WARMER_KEY)
    containers = read.get_path(resource[0] if resource else None,
                              "spec.forProvider.manifest.spec.template.spec.containers")
    args = containers[0].get("args") if isinstance(containers, list) and containers \
        and isinstance(containers[0], dict) else None
    if not isinstance(args, list) or "--commit" not in args[:-1]:
        return ""
    commit = args[args.index("--commit") + 1]
    return commit if shapes.is_resolved_commit(commit) else ""


WAITS = (reasons.AwaitingVolumeTier, "NodeCapacityLow")  # keep what exists; the rest removes it


def run(request: protocol.Request, h: Hydration, fleet_cluster: dict | None,
        cluster: FleetClusterView | None, volume_claim: str, volume: VolumeTier,
        replicas: list[dict] | None, outcome: protocol.Outcome) -> dict:
    """Decide, compose and return status.nodeTier.

    What exists stays while the tier waits for its volume or for room, and while the
    hydration holds what it has; the counts are then those of the commit the warmers keep
    (during a model update, the previous one until the volume holds the new one). A node
    eviction, or a cluster whose spec.nodeCache cannot serve this cache, removes it.
    """
    node_cache = NodeCache.of(read.get_path(fleet_cluster, "spec.nodeCache"))
    decision = Decision.of(read.get_path(fleet_cluster, "status.nodeCache"), h.key)
    names = Names(h, pool_hash(node_cache.pool) if node_cache and node_cache.pool else "")
    verdict = blocked(request, h, cluster, node_cache, decision, volume)
    if verdict is None:
        compose_objects(request, h, names, node_cache, cluster, volume_claim,
                        kept_on_nodes(replicas, h), outcome)
    elif verdict.reason in WAITS and volume.composing:
        objects.carry_over(request, outcome, [k for k in KEYS if k in request.observed])
    elif verdict.reason not in WAITS and not volume.problem:
        for key in KEYS:  # also over the hydration's hold: this cache has no node tier here
            outcome.desired.pop(key, None)
    warmed = warmer_commit(outcome) if not volume.problem else ""
    counts = count(request, warmed or h.commit)
    if verdict is None or (warmed and counts.observed):
        kept = from_counts(dataclasses.replace(h, commit=warmed or h.commit), names, counts)
        if verdict is not None and warmed != h.commit:
            kept = Verdict(kept.phase, kept.reason, f"{kept.message}; they keep "
                           f"{warmed[:10]} until the volume holds {h.commit[:10]}")
        verdict = kept
    labelled = node_cache is None or node_cache.labels
    status = {"phase": verdict.phase, "commit": warmed or h.commit,
              "labelKey": label_key(h.namespace, h.cache) if labelled else "",
              **Counts(True).as_status(), "reason": verdict.reason, "message": verdict.message}
    if names.pool_hash:
        status["claimName"] = names.claim
    if verdict.phase != "Evicted" and counts.observed:
        status.update(counts.as_status())
    return status
