"""Node delivery: a replica reads its GPU node's own copy of the model (storage tier Node).

What compose-model-replica composes for a Node replica (design/node-tier.md §3.6,
design/deployments.md "Node delivery"); the node tier of a cluster, as its hydration
publishes it, is views/node_tier.py, and the choice between Node and the cluster volume,
made by compose-model-deployment, is decisions/node_delivery.py:
1. read the replica's spec.nodeCache (the node PVC, the warm-node label, the commit and its
   manifest digest, the placement policy);
2. compose what a Node pod needs under Pod Security `restricted`: both PVCs read-only, an
   emptyDir for the link, the `select` init container that links the node copy (else the
   volume), and the node affinity on the warm-node label (Prefer or Require);
3. time a Require placement: it reverts to Prefer once when the replica is not available
   requireTimeout after its Node delivery started (time only through the request's now).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetcache import messages, shapes
from fleetcache.apis import specs
from fleetcache.functions import read, times
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.node_tier.warmer_names import NODE_MOUNT, VOLUME_MOUNT
from fleetcache.functions.views.node_tier import LABEL_KEY_SHAPE
from fleetcache.volume import repo_folder

RUN_PATH = "/var/run/fleetcache"                    # emptyDir holding the link `select` writes
LINK_PATH = f"{RUN_PATH}/cache"                     # HF_HUB_CACHE of a Node replica
NODE_VOLUME, VOLUME_VOLUME, RUN_VOLUME = "node-cache", "model-cache", "fleetcache-run"
SELECT_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}


# --- 1. the replica's spec.nodeCache -------------------------------------------------------


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
    def of(cls, value: Mapping, where: str = "spec.nodeCache") -> NodeMount:
        label = value.get("labelKey") or ""
        if label and not LABEL_KEY_SHAPE.match(label):
            raise specs.InputError(f"{where}.labelKey must be node-cache.fleetcache.dev/<16 hex "
                                 f"digits>, not {messages.shown(label)}")
        if not shapes.is_label_value(value["commit"]):
            raise specs.InputError(f"{where}.commit must be a label value (a commit), not "
                                 f"{messages.shown(value['commit'])}")
        if not shapes.is_sha256(value["manifestDigest"]):
            raise specs.InputError(f"{where}.manifestDigest must be 64 lowercase hex digits")
        reverted = value.get("revertedAt")
        if reverted and times.parse_time(reverted) is None:
            raise specs.InputError(f"{where}.revertedAt must be an RFC 3339 time")
        return cls(value["claimName"], label, value["commit"], value["manifestDigest"],
                   value["policy"], value.get("requireTimeout") or "15m", reverted or "")


# --- 2. the pod -------------------------------------------------------------------------------


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


# --- 3. Require, then Prefer once ------------------------------------------------------------


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
