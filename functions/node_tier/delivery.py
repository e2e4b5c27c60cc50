"""Node delivery: a replica reads its GPU node's own copy of the model (storage tier Node).

What compose-model-deployment and compose-model-replica share about it (design/node-tier.md
§3.6, design/deployments.md "Node delivery"):
1. read the node tier of a cluster from its ModelCacheHydration (spec.tier, status.nodeTier:
   phase, commit, readyNodes/desiredNodes, the node PVC and the node label it publishes);
2. decide, on a cluster whose volume is Ready, whether a replica gets Node or stays on the
   cluster volume (Cache), and say why;
3. compose what a Node pod needs under Pod Security `restricted`: both PVCs read-only, an
   emptyDir for the link, the `select` init container that links the node copy (else the
   volume), and the node affinity on the warm-node label (Prefer or Require);
4. time a Require placement: it reverts to Prefer once when the replica is not available
   requireTimeout after its Node delivery started (time only through the request's now).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any, Mapping

from fleetcache.apis import specs
from fleetcache.functions.k8s import agent_job
from fleetcache.functions import read
from fleetcache.functions import times
from fleetcache import messages
from fleetcache import reasons
from fleetcache import shapes
from fleetcache.volume import repo_folder

from fleetcache.functions.node_tier.warmers import NODE_MOUNT, VOLUME_MOUNT

RUN_PATH = "/var/run/fleetcache"                    # emptyDir holding the link `select` writes
LINK_PATH = f"{RUN_PATH}/cache"                     # HF_HUB_CACHE of a Node replica
NODE_VOLUME, VOLUME_VOLUME, RUN_VOLUME = "node-cache", "model-cache", "fleetcache-run"
LABEL_KEY_SHAPE = re.compile(r"^node-cache\.fleetcache\.dev/[0-9a-f]{16}$")
DIGEST_SHAPE = re.compile(r"^[0-9a-f]{64}$")
# Node tier phases in which the node PVC exists and nodes are (or will be) warmed.
MOUNTABLE = ("Warming", "Ready", "Degraded")
# Reasons of a node tier that will not warm on its own (the platform or the nodes must act).
NOT_WARMING = (reasons.NodeTierNotConfigured, reasons.NodeCacheModeUnsupported, reasons.NoEligibleNodes)
SELECT_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}


# --- 1. the node tier of one cluster, from its hydration -------------------------------------


@dataclass(frozen=True)
class NodeTier:
    """status.nodeTier of a hydration on tier Node, read as untrusted input."""

    phase: str
    commit: str
    claim_name: str
    label_key: str  # "" when the cluster sets no warm labels (nodeCache.labels: None)
    ready_nodes: int
    desired_nodes: int
    reason: str
    message: str

    @classmethod
    def of(cls, hydration: Any) -> "NodeTier | None":
        """None when the hydration is not on tier Node. A claim name or label key that is
        not one reads as absent: both end up in a pod template."""
        if read.get_path(hydration, "spec.tier") != "Node":
            return None
        tier = read.mapping_at(hydration, "status.nodeTier")
        claim = tier.get("claimName")
        label = tier.get("labelKey")
        commit = tier.get("commit")
        return cls(
            phase=messages.clipped(tier.get("phase") or "Pending", 32),
            commit=commit if shapes.is_label_value(commit) else "",
            claim_name=read.name_or_empty(claim),
            label_key=label if isinstance(label, str) and LABEL_KEY_SHAPE.match(label) else "",
            ready_nodes=max(0, read.as_int(tier.get("readyNodes"))),
            desired_nodes=max(0, read.as_int(tier.get("desiredNodes"))),
            reason=reasons.reason_or_empty(tier.get("reason")),
            message=messages.clipped(tier.get("message") or ""),
        )

    @property
    def mountable(self) -> bool:
        """The node PVC exists and nodes are being warmed: a pod may mount it (a node
        without the copy falls back to the volume inside the pod)."""
        return bool(self.claim_name) and self.phase in MOUNTABLE \
            and self.reason not in NOT_WARMING

    def serves(self, commit: str) -> bool:
        """At least one node holds `commit`, verified."""
        return self.mountable and self.commit == commit and self.ready_nodes >= 1

    def warm(self, commit: str) -> str:
        held = min(self.ready_nodes, self.desired_nodes) if self.commit == commit else 0
        return f"{held}/{self.desired_nodes} nodes warm on {commit[:12]}"


# --- 2. the decision on a cluster whose volume is Ready ---------------------------------------


@dataclass(frozen=True)
class NodePolicy:
    """spec.delivery.node of a ModelDeployment."""

    policy: str  # Prefer | Require | Never
    require_timeout: str

    @classmethod
    def of(cls, node: Mapping) -> "NodePolicy":
        return cls(node.get("policy") or "Prefer", node.get("requireTimeout") or "15m")


@dataclass(frozen=True)
class Choice:
    delivery: str  # Node | Cache
    reason: str
    detail: str  # what the reason means on this cluster (ModelReplica spec.deliveryReason)


def choose(tier: NodeTier, commit: str, policy: NodePolicy, switch_to_cache: str,
           before: str) -> Choice:
    """Node or the cluster volume for a replica of `commit` on a cluster whose volume is
    Ready on it; `before` is the replica's delivery on this cluster at the last compose
    ("" when new there). A running Node replica stays Node while the tier warms a new
    commit: its pod reads the volume on nodes without the copy, so it rolls once, not twice."""
    if policy.policy == "Never":
        return Choice("Cache", reasons.NodeDeliveryNever,
                      "spec.delivery.node.policy is Never; using the cluster volume")
    if tier.serves(commit):
        if switch_to_cache == "Never" and before == "Cache":
            return Choice("Cache", reasons.SwitchToNodeNever, (
                f"{tier.warm(commit)}, but spec.delivery.switchToCache is Never: the running "
                "replica stays on the cluster volume"))
        return Choice("Node", reasons.NodeReady, tier.warm(commit))
    if before == "Node" and tier.mountable:
        return Choice("Node", reasons.NodeTierWarming,
                      f"{tier.warm(commit)}; nodes without the copy read the cluster volume")
    if tier.mountable or (tier.phase == "Pending" and tier.reason not in NOT_WARMING):
        return Choice("Cache", reasons.NodeTierWarming,
                      f"{tier.warm(commit)}; using the cluster volume")
    why = f" ({tier.reason})" if tier.reason else ""
    said = f": {tier.message}" if tier.message else ""
    return Choice("Cache", reasons.NodeTierUnavailable,
                  f"node tier {tier.phase}{why}{said}; using the cluster volume")


def node_cache_spec(tier: NodeTier, commit: str, manifest_digest: str, policy: NodePolicy,
                    reverted_at: str) -> dict:
    """A Node replica's spec.nodeCache."""
    spec = {"claimName": tier.claim_name, "labelKey": tier.label_key, "commit": commit,
            "manifestDigest": manifest_digest, "policy": policy.policy,
            "requireTimeout": policy.require_timeout}
    if reverted_at and policy.policy == "Require":
        spec["revertedAt"] = reverted_at
    return spec


# --- 3. the pod -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeMount:
    """A Node replica's spec.nodeCache, read through the ModelReplica model."""

    claim_name: str
    label_key: str
    commit: str
    manifest_digest: str
    policy: str  # Prefer | Require
    require_timeout: str
    reverted_at: str

    @classmethod
    def of(cls, value: Mapping, where: str = "spec.nodeCache") -> "NodeMount":
        label = value.get("labelKey") or ""
        if label and not LABEL_KEY_SHAPE.match(label):
            raise specs.InputError(f"{where}.labelKey must be node-cache.fleetcache.dev/<16 hex "
                                 f"digits>, not {messages.shown(label)}")
        if not shapes.is_label_value(value["commit"]):
            raise specs.InputError(f"{where}.commit must be a label value (a commit), not "
                                 f"{messages.shown(value['commit'])}")
        if not DIGEST_SHAPE.match(value["manifestDigest"]):
            raise specs.InputError(f"{where}.manifestDigest must be 64 lowercase hex digits")
        reverted = value.get("revertedAt")
        if reverted and times.parse_time(reverted) is None:
            raise specs.InputError(f"{where}.revertedAt must be an RFC 3339 time")
        return cls(value["claimName"], label, value["commit"], value["manifestDigest"],
                   value["policy"], value.get("requireTimeout") or "15m", reverted or "")


def snapshot_link(repo: str, commit: str) -> str:
    """FLEETCACHE_MODEL of a Node replica: the snapshot through the link `select` wrote
    (relative ../../blobs links resolve in the tree it points to)."""
    return f"{LINK_PATH}/{repo_folder(repo)}/snapshots/{commit}"


def pod_volumes(node: NodeMount, volume_claim: str) -> tuple[list[dict], list[dict]]:
    """(volumes, the engine's mounts): the node PVC and the cluster PVC, read-only at the
    pod and the container, and the emptyDir holding the link (read-only to the engine)."""
    volumes = [
        {"name": NODE_VOLUME, "persistentVolumeClaim": {"claimName": node.claim_name,
                                                        "readOnly": True}},
        {"name": VOLUME_VOLUME, "persistentVolumeClaim": {"claimName": volume_claim,
                                                          "readOnly": True}},
        {"name": RUN_VOLUME, "emptyDir": {"sizeLimit": "1Mi"}},
    ]
    return volumes, mounts(run_read_only=True)


def mounts(run_read_only: bool) -> list[dict]:
    return [{"name": NODE_VOLUME, "mountPath": NODE_MOUNT, "readOnly": True},
            {"name": VOLUME_VOLUME, "mountPath": VOLUME_MOUNT, "readOnly": True},
            {"name": RUN_VOLUME, "mountPath": RUN_PATH, "readOnly": run_read_only}]


def select_container(node: NodeMount, repo: str, image: str) -> dict:
    """The init container: a stat-only check of the node copy (node-ready.json and the
    manifest digest), then a link to its hub/, else to the cluster volume's; it says which
    in its termination message. --node and --volume are the PVCs' mounts: the agent's
    `select` appends hub/ itself (agent/select.py)."""
    return {
        "name": "select",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["fleetcache-agent"],
        "args": ["select", "--node", NODE_MOUNT, "--volume", VOLUME_MOUNT,
                 "--repo", repo,
                 "--commit", node.commit, "--manifest-digest", node.manifest_digest,
                 "--link", LINK_PATH],
        "env": [{"name": "HOME", "value": RUN_PATH}, {"name": "TMPDIR", "value": RUN_PATH}],
        "resources": {k: dict(v) for k, v in SELECT_RESOURCES.items()},
        "securityContext": dict(agent_job.RESTRICTED_CONTAINER_SECURITY),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts(run_read_only=False),
    }


def affinity(node: NodeMount, placement: str) -> dict | None:
    """Prefer: warmth scores (weight 100), GPUs decide; Require: only warm nodes. None
    without a label key: the node PV's affinity keeps the pod in the pool, nothing more."""
    if not node.label_key:
        return None
    term = {"matchExpressions": [{"key": node.label_key, "operator": "In",
                                  "values": [node.commit]}]}
    if placement == "Require":
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}}
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": term}]}}


# --- 4. Require, then Prefer once ------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """How the pod is placed now, and the times latched in status.nodeCache."""

    placement: str  # Prefer | Require
    started_at: str
    reverted_at: str
    commit: str

    @property
    def reverted(self) -> bool:
        return bool(self.reverted_at)

    def as_status(self) -> dict:
        return {"commit": self.commit, "placement": self.placement,
                "startedAt": self.started_at, "revertedAt": self.reverted_at}


def latched_placement(status: Any) -> dict:
    """status.nodeCache as the replica latched it, its strings only (it is input): what a
    compose that cannot decide (an input missing) writes back unchanged."""
    latched = read.mapping_at(status, "nodeCache")
    return {key: latched[key] for key in ("commit", "placement", "startedAt", "revertedAt")
            if isinstance(latched.get(key), str) and len(latched[key]) <= 64}


def placement_of(node: NodeMount, latched: Mapping, available: bool,
                 now: datetime.datetime) -> Placement:
    """Require holds until the replica has been unavailable requireTimeout after its Node
    delivery of this commit started; then Prefer, latched (spec or status revertedAt) for
    as long as the replica stays Node on its cluster: one roll, never back."""
    started = times.parse_time(latched.get("startedAt")) \
        if latched.get("commit") == node.commit else None
    started_at = times.format_time(started or now)
    reverted = times.parse_time(node.reverted_at) or times.parse_time(latched.get("revertedAt"))
    reverted_at = times.format_time(reverted) if reverted else ""
    if node.policy != "Require" or not node.label_key:
        return Placement("Prefer", started_at, "", node.commit)
    if reverted_at:
        return Placement("Prefer", started_at, reverted_at, node.commit)
    if not available and now - (started or now) >= times.duration(node.require_timeout):
        return Placement("Prefer", started_at, times.format_time(now), node.commit)
    return Placement("Require", started_at, "", node.commit)
