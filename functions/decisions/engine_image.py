"""Whether a ModelDeployment's engine image is warm where a replica runs
(design/engine-images.md): its ModelCache keeps the image on a cluster's pool nodes when the
image is among the hydration's spec.images there (the same string as spec.engine.image),
pinned to the fleet's digest. The replica then runs that digest (the one every node pulled,
so the fleet runs one image as it serves one commit), prefers the nodes that keep it, and
reports Warm once every pool node of the cluster holds it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetcache import shapes
from fleetcache.functions import read

KEEPER_WEIGHT = 50  # below the node copy's 100: weights decide first, then the image
HOSTNAME = "kubernetes.io/hostname"


def on_cluster(image: str, cache_name: str, hydration: Any) -> dict | None:
    """A replica's spec.engineImage on the cluster of `hydration`, or None where its cache
    does not keep the engine's image."""
    entry = next((i for i in read.get_path(hydration, "spec.images") or ()
                  if isinstance(i, Mapping) and i.get("image") == image), None)
    digest = entry.get("digest") if entry else None
    if not shapes.is_oci_digest(digest):
        return None
    status = read.mapping_at(hydration, "status.images")
    desired = status.get("desired")
    held = next((i.get("readyNodes") for i in status.get("images") or ()
                 if isinstance(i, Mapping) and i.get("image") == image and i.get("digest") == digest), 0)
    warm = isinstance(desired, int) and desired > 0 and isinstance(held, int) and held >= desired
    return {"reference": shapes.image_by_digest(image, digest), "modelCacheName": cache_name, "warm": warm}


def by_cluster(image: str, cache_name: str, hydrations: Mapping[str, Any]) -> dict[str, dict]:
    """cluster -> spec.engineImage, for the clusters whose hydration keeps the engine's image."""
    found = {cluster: on_cluster(image, cache_name, h) for cluster, h in sorted(hydrations.items())}
    return {cluster: mount for cluster, mount in found.items() if mount is not None}


def keeper_affinity(keeper_selector: Mapping[str, str]) -> dict:
    """Prefer the nodes a keeper pod of the cache runs on (the pool's opted-in nodes): a
    pod affinity, as the nodes carry no label of the images they hold."""
    return {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": KEEPER_WEIGHT, "podAffinityTerm": {
            "labelSelector": {"matchLabels": dict(keeper_selector)}, "topologyKey": HOSTNAME}}]}}
