"""Image delivery (design/image-volumes.md): which artifact a cache's replicas can mount as an
image volume, on which clusters, and when they go back to the cluster volume.

- The artifact: a cache published to an OCI mirror mounts its ModelPack artifact
  (status.resolved.artifact); an OCI source mounts its resolved reference, when each of its
  files is a whole layer (a runtime mounts an artifact's layers as files at their paths, never
  the members of a tar layer); nothing else has one. Both are pinned by digest, so a replica
  mounts exactly the resolved bytes.
- The cluster: its FleetCluster declares spec.features.imageVolumes; the composers cannot see
  a node's kubelet or runtime, so it is never guessed.
- The way back: a replica whose engine Deployment timed out while mounting the artifact
  (Progressing False, ProgressDeadlineExceeded: the Deployment's status is all a composer
  sees, never the pod's ErrImagePull) uses the cluster volume from then on, for that artifact,
  and its cluster's hydration warms the volume for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fleetcache import messages, reasons
from fleetcache.functions import read
from fleetcache.functions.views.fleet_cluster import FleetClusterView
from fleetcache.functions.views.hydration import MOUNTING
from fleetcache.functions.views.model_replica import Previous, fell_back_from_image, image_fallback_said
from fleetcache.functions.views.served_model import Artifact, mountable_artifact

IMAGE = "Image"
FALLBACK = "Fallback"


def fell_back(before: Previous | None, cluster: str, artifact: Artifact) -> bool:
    """The replica could not mount this artifact on this cluster: its status said so while it
    was Image, or its spec says it uses the volume for that reason."""
    if before is None or before.cluster != cluster:
        return False
    if before.delivery == IMAGE:
        return before.reason == reasons.ImageVolumeUnavailable and before.image_reference == artifact.reference
    return image_fallback_said(before.delivery_reason, artifact.reference)


def choose(artifact: Artifact | None, commit: str, image_volumes: bool, cluster: str,
           before: Previous | None) -> str:
    """IMAGE, FALLBACK (the volume path, because the artifact could not be mounted here) or ""
    (the volume path: no artifact of the commit served, or no image volumes on the cluster)."""
    if artifact is None or artifact.commit != commit or not image_volumes:
        return ""
    return FALLBACK if fell_back(before, cluster, artifact) else IMAGE


def mounted_detail(artifact: Artifact, cluster: str) -> str:
    return f"cluster {cluster} mounts {artifact.reference} as a read-only image volume " \
           "(spec.features.imageVolumes); no volume is warmed for it"


def fallback_detail(artifact: Artifact, cluster: str) -> str:
    """Begins with the reference: image_fallback_said reads it back from spec.deliveryReason."""
    return f"{artifact.reference} could not be mounted as an image volume on cluster {cluster}; " \
           "the replica uses the cluster volume"


def unmounted(deployment: Any) -> str:
    """Why an Image replica's engine Deployment could not start ("" while it may): it timed out
    progressing (ProgressDeadlineExceeded); the words are its Available condition's, else its
    Progressing condition's."""
    progressing = read.condition_of(deployment, "Progressing")
    if progressing.get("status") != "False" or progressing.get("reason") != reasons.ProgressDeadlineExceeded:
        return ""
    said = read.condition_of(deployment, "Available").get("message") or progressing.get("message") or ""
    return messages.shown(str(said)) if said else reasons.ProgressDeadlineExceeded


def volume_wanted(replicas: Iterable[Any]) -> bool:
    """A replica of the cache on the cluster mounts its volume (Cache, Node) or could not mount
    the artifact: the hydration warms the volume."""
    return any(read.get_path(r, "spec.delivery") in MOUNTING or fell_back_from_image(r)
               for r in replicas if isinstance(r, Mapping))


def hydrates_nothing(cluster: FleetClusterView | None, cache: Any, commit: str,
                     replicas: Iterable[Any] | None) -> Artifact | None:
    """The artifact when a hydration of `commit` warms nothing on its cluster: the cluster
    mounts image volumes, the cache has an artifact of that commit, and no replica there needs
    the volume (the replicas fetched: None, not yet); else None."""
    artifact = mountable_artifact(cache)
    if cluster is None or not cluster.image_volumes or artifact is None or artifact.commit != commit \
            or replicas is None or volume_wanted(replicas):
        return None
    return artifact


def served_by_image(hydration: Any) -> bool:
    """A hydration that warms nothing on its cluster (its status says ImageVolume): it takes no
    room there and needs no admission."""
    return read.get_path(hydration, "status.reason") == reasons.ImageVolume
