"""A ModelCacheHydration's Objects on its cluster: their keys, their control-plane and remote
names (design/api.md), their labels, the cache PVC (which only grows, and keeps its class and
access modes once it exists, and whose uid tells it from a namesake created again), the API
server's refusal to grow it, the Objects that speak of what the PVC holds, and the prune Job's
arguments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetcache import messages
from fleetcache.apis import specs
from fleetcache.functions import naming, quantities, read
from fleetcache.functions.k8s import agent_job, objects

NAMESPACE_KEY = "namespace"
VOLUME_KEY = "volume"
PROGRESS_KEY = "progress"
ACCESS_KEYS = ("service-account", "role", "role-binding")  # agent_job.progress_access_manifests order
TOKEN_KEY = "token-secret"
MIRROR_SECRET_KEY = "mirror-secret"
JOB_PREFIX = "job-"
PRUNE_PREFIX = "prune-"
# What the API server answers when a PVC's storage class cannot expand it; provider-kubernetes
# puts it on the volume Object's Synced=False condition.
RESIZE_REFUSED = ("only dynamically provisioned pvc can be resized",
                  "must support resize")
PVC_BOUND_QUERY = "has(object.status) && has(object.status.phase) && object.status.phase == 'Bound'"
# The progress record is final for a commit once its fetch or prune ended: until then the
# provider re-reads it every 30 s (objects.record_final_query).
FINAL_PHASES = ("Ready", "Failed", "Pruned")


def content_id(commit: str, manifest_digest: str) -> str:
    return f"{commit[:10]}-{manifest_digest[:6]}" if manifest_digest else commit[:10]


def job_key(commit: str, manifest_digest: str, template: str) -> str:
    """The fetch Job's Object key: its content and its template's digest, so a new template
    is a new Object, and Crossplane deletes the old one."""
    return f"{job_prefix(commit, manifest_digest)}{template}"


def job_prefix(commit: str, manifest_digest: str) -> str:
    """What every fetch Job of this content is keyed under, whatever its template."""
    return f"{JOB_PREFIX}{content_id(commit, manifest_digest)}-"


@dataclass(frozen=True)
class Names:
    """Control-plane Object names and keys, and the remote names (design/api.md)."""

    hydration: str
    cache: str
    commit: str
    manifest_digest: str
    template: str = ""  # agent_job.template_digest of the fetch Job ("" before it is known)

    def object(self, what: str) -> str:
        return naming.child_name(self.hydration, what)

    @property
    def volume(self) -> str:
        return naming.cache_volume_name(self.cache)

    @property
    def progress(self) -> str:
        return naming.child_name(self.cache, "progress")

    @property
    def agent(self) -> str:
        return naming.child_name(self.cache, "agent")

    @property
    def token(self) -> str:
        return naming.child_name(self.cache, "token")

    @property
    def mirror_secret(self) -> str:
        return naming.child_name(self.cache, "mirror-credentials")

    @property
    def manifest(self) -> str:
        """The pinned manifest's ConfigMap (contract §D), named for the content it pins."""
        return naming.child_name(self.cache, "manifest", self.content)

    @property
    def manifest_key(self) -> str:
        """The pinned manifest's Object key, also named for its content: a remote name is
        fixed for an Object's life (provider-kubernetes only touches the object its Object
        names), so new content is a new Object, and Crossplane deletes the old one with its
        ConfigMap."""
        return f"manifest-{self.content}"

    @property
    def content(self) -> str:
        """What this Job fetches: the commit and the filtered manifest."""
        return content_id(self.commit, self.manifest_digest)

    @property
    def job(self) -> str:
        """A Job's template is immutable (the API server refuses a changed one), so new
        content or a new template (another agent image, bandwidth, mirror role) is a new
        Job, named apart from the old."""
        return naming.child_name(self.cache, "hydrate", self.content, self.template)

    @property
    def job_key(self) -> str:
        return job_key(self.commit, self.manifest_digest, self.template)


def labels_for(cache: str, cluster: str) -> dict[str, str]:
    return {naming.LABEL_MANAGED_BY: "fleetcache", naming.LABEL_COMPONENT: "hydration",
            naming.LABEL_MODEL_CACHE: naming.label_value(cache),
            naming.LABEL_CLUSTER: naming.label_value(cluster)}


def volume_manifest(names: Names, namespace: str, labels: dict[str, str], size: str, access_mode: str,
                    storage_class: str | None, existing: dict, access_modes: tuple[str, ...]) -> dict:
    """The cache PVC: access_mode and storage_class are the hydration's, else the cluster's
    defaults; access_modes, those a cache volume may have.

    Once the PVC exists its class and access modes are immutable and it can only grow, so
    those are kept as they are and a smaller size (a smaller new commit) never shrinks it.
    """
    existing_size = read.get_path(existing, "spec.resources.requests.storage")
    if existing_bytes(existing_size) > quantities.quantity_bytes(size, "spec.storage.size"):
        size = existing_size
    modes = read.get_path(existing, "spec.accessModes")
    existing_class = read.get_path(existing, "spec.storageClassName")
    pvc_spec: dict = {
        "accessModes": modes if isinstance(modes, list) and modes
        and all(m in access_modes for m in modes)
        else [access_mode],
        "resources": {"requests": {"storage": size}},
        "volumeMode": "Filesystem",
    }
    storage_class = (existing_class if isinstance(existing_class, str) else None) or storage_class
    if storage_class:
        pvc_spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": names.volume, "namespace": namespace, "labels": dict(labels)},
            "spec": pvc_spec}


def existing_bytes(size: Any) -> int:
    """Bytes the observed PVC asks for; a size that is not a quantity reads as absent (0)."""
    try:
        return quantities.quantity_bytes(size, "the PVC's size") if size else 0
    except specs.InputError:
        return 0


def resize_refusal(volume: dict | None, size: str) -> str:
    """The API server's refusal to grow the PVC to `size`, from the volume Object's
    Synced=False condition: the one signal that says the class cannot expand. (A capacity
    below the request also shows a resize in progress, so it is not read as a refusal.)"""
    synced = read.condition_of(volume, "Synced")
    message = synced.get("message")
    if synced.get("status") != "False" or not isinstance(message, str) \
            or not any(words in message for words in RESIZE_REFUSED):
        return ""
    requested = existing_bytes(read.get_path(objects.remote_manifest(volume),
                                            "spec.resources.requests.storage"))
    return messages.clipped(message) if requested < quantities.quantity_bytes(size, "spec.storage.size") \
        else ""


def volume_uid(volume: dict | None) -> str:
    """The cache PVC's metadata.uid as provider-kubernetes last saw it ("" if it saw none).
    The API server gives every object it creates a uid of its own, so a PVC deleted and
    created again under its name has another."""
    uid = read.get_path(objects.remote_manifest(volume), "metadata.uid")
    return messages.clipped(uid, 128) if isinstance(uid, str) else ""


def of_the_volume(key: str) -> bool:
    """Whether an Object's remote object speaks of what the cache PVC holds: the agent's
    progress record (its fetch, its measure of the volume) and the fetch and prune Jobs.
    They go with the PVC they ran on."""
    return key == PROGRESS_KEY or key.startswith((JOB_PREFIX, PRUNE_PREFIX))


def prune_args(repo: str, progress_configmap: str, keep: frozenset[str]) -> list[str]:
    """The prune Job's arguments: every snapshot of `repo` on the volume but those kept."""
    args = ["prune", "--dest", agent_job.CACHE_MOUNT_PATH,
            "--repo", repo]
    for commit in sorted(keep):
        args += ["--keep", commit]
    return args + ["--progress-configmap", progress_configmap]
