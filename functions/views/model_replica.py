"""What compose-model-deployment writes into a ModelReplica's spec and compose-model-replica
reads back: the engine (spec.engine, with the digest that says which engine a replica was
composed with) and the warm cache it mounts (spec.cache); what the deployment reads back
of its replicas at its next compose (where each ran, how, whether it was Ready, and why not);
and the commit a replica's engine serves, which compose-model-replica writes and a
ModelCache's rollout reads back (views/cache_replicas.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetcache import reasons
from fleetcache.apis import specs
from fleetcache.apis.models import model_deployment as deployment_api
from fleetcache.functions import naming, quantities, read, times
from fleetcache.functions.k8s.engine import Container

ENGINE_DIGEST_LENGTH = 16
# The condition whose lastTransitionTime says since when status.servingCommit is served:
# True (CommitServed) once every pod serves the commit the replica is composed for
# (status.model.revision), False (RollingCommit) while its Deployment rolls to it, False
# (NotServing) when no engine runs. Its message names the commits, so its time moves with them.
SERVING = "Serving"
SERVED_LIMIT = 255  # a commit, or on Source without one the revision (spec.model.revision's maxLength)


def served_commit(value: Any) -> str:
    """status.servingCommit as a replica wrote it: the commit every pod of its engine serves,
    "" before its Deployment first rolled out (or for a value no replica writes)."""
    commit = read.get_path(value, "servingCommit")
    return commit if isinstance(commit, str) and 0 < len(commit) <= SERVED_LIMIT else ""


@dataclass(frozen=True)
class Engine(Container):
    """The serving engine's container template, normalized with its defaults: a
    ModelDeployment's spec.engine, which every one of its replicas reads (the fields are
    those of k8s/engine.py Container, which the replica's pod runs)."""

    @property
    def digest(self) -> str:
        """What a ModelReplica carries of its engine: the ModelDeployment composed it with
        this engine, and the replica runs the engine only when the one it reads agrees."""
        return naming.digest_of(self.as_spec())[:ENGINE_DIGEST_LENGTH]

    @classmethod
    def of(cls, value: Any, where: str = "spec.engine") -> Engine:
        """A ModelDeployment's spec.engine read through its model (defaults filled in). The
        variables fleetcache sets may not appear in env: the XRD's CEL rule says so, and
        compose-model-deployment holds its spec to it."""
        engine = specs.read_model(deployment_api.Engine, value, where)
        shm = engine.get("sharedMemorySize")
        if shm is not None:
            quantities.quantity_bytes(shm, f"{where}.sharedMemorySize")
        return cls(
            image=engine["image"],
            command=tuple(engine.get("command", ())),
            args=tuple(engine.get("args", ())),
            env=tuple(engine.get("env", ())),
            resources=engine.get("resources", {}),
            port=engine["port"],
            readiness_path=engine["readinessPath"],
            shared_memory_size=shm,
        )

    def as_spec(self) -> dict:
        spec: dict[str, Any] = {"image": self.image, "args": list(self.args),
                                "env": [dict(e) for e in self.env], "port": self.port,
                                "readinessPath": self.readiness_path}
        if self.command:
            spec["command"] = list(self.command)
        if self.resources:
            spec["resources"] = dict(self.resources)
        if self.shared_memory_size:
            spec["sharedMemorySize"] = self.shared_memory_size
        return spec


HF_CACHE, FLAT = "HfCache", "Flat"  # spec.cache.layout


@dataclass(frozen=True)
class CacheMount:
    """Where the warm cache is: the claim on the cluster and the model's directory inside
    it, a snapshot of the Hugging Face cache (HfCache) or files at their paths (Flat: an
    existing volume's subPath, an S3 prefix fetched flat)."""

    model_cache: str
    volume: str
    mount_path: str
    snapshot_path: str
    commit: str
    layout: str = HF_CACHE

    @classmethod
    def of(cls, value: Mapping, where: str = "spec.cache") -> CacheMount:
        """The cache of a spec read through the ModelReplica model (required on Cache by
        the XRD's CEL rule). A snapshot lies below the mount; flat files may sit at it."""
        mount, path = value["mountPath"].rstrip("/"), value["snapshotPath"]
        layout = value.get("layout") or HF_CACHE
        if not (path.startswith(mount + "/") or (layout == FLAT and path.rstrip("/") == mount)):
            raise specs.InputError(f"{where}.snapshotPath must lie under {where}.mountPath")
        return cls(value["modelCacheName"], value["volumeName"], value["mountPath"],
                   path, value["commit"], layout)

    def as_spec(self) -> dict:
        return {"modelCacheName": self.model_cache, "volumeName": self.volume,
                "mountPath": self.mount_path, "snapshotPath": self.snapshot_path,
                "commit": self.commit, **({"layout": FLAT} if self.layout == FLAT else {})}


# Where an Image replica's pod mounts the artifact: the runtime puts each layer's file at its
# path under it (design/image-volumes.md), so it is FLEETCACHE_MODEL itself.
IMAGE_MOUNT_PATH = "/var/cache/fleetcache-image"


@dataclass(frozen=True)
class ImageMount:
    """An Image replica's spec.image: the cache's OCI artifact, pinned by digest, and the commit
    it holds."""

    model_cache: str
    reference: str
    commit: str

    @classmethod
    def of(cls, value: Mapping) -> ImageMount:
        """The image of a spec read through the ModelReplica model (required on Image by the
        XRD's CEL rule, the reference pinned by its pattern)."""
        return cls(value["modelCacheName"], value["reference"], value["commit"])

    def as_spec(self) -> dict:
        return {"modelCacheName": self.model_cache, "reference": self.reference, "commit": self.commit}


def image_fallback_said(delivery_reason: str, reference: str = "") -> bool:
    """Whether a spec.deliveryReason says the replica uses the volume because an image volume
    could not be mounted (of `reference`, when one is given)."""
    said = f"{reasons.ImageVolumeUnavailable}: "
    return delivery_reason.startswith(said + reference + (" " if reference else ""))


def fell_back_from_image(replica: Any) -> bool:
    """A ModelReplica whose image volume could not be mounted: compose-model-replica says so in
    status.reason while it is still Image, compose-model-deployment in spec.deliveryReason once
    it uses the cluster volume instead. Its cluster's hydration warms the volume for it."""
    said = read.get_path(replica, "spec.deliveryReason")
    return (read.get_path(replica, "spec.delivery") == "Image"
            and read.get_path(replica, "status.reason") == reasons.ImageVolumeUnavailable) \
        or (isinstance(said, str) and image_fallback_said(said))


@dataclass(frozen=True)
class Previous:
    """Where a replica ran at the last compose, from its observed ModelReplica."""

    cluster: str
    delivery: str
    ready: bool
    node: Mapping = field(default_factory=dict)  # spec.nodeCache of a Node replica
    reason: str = ""  # its status.reason, when it has a reason's shape
    delivery_reason: str = ""  # its spec.deliveryReason
    image_reference: str = ""  # spec.image.reference of an Image replica

    @property
    def reverted_at(self) -> str:
        """When a Require placement reverted to Prefer: the replica latches it in its status,
        this deployment carries it in the replica's spec from then on."""
        moment = times.parse_time(self.node.get("revertedAt"))
        return times.format_time(moment) if moment else ""
