"""A ModelCacheHydration's engine images (spec.images, each pinned by digest): pulled on every
opted-in node of the cache's pool on the cluster and kept there while the hydration has them
(design/engine-images.md), whatever the cache's tier.

compose-model-cache-hydration calls `run` once per call. Lifecycle, top to bottom:
1. read the FleetCluster's pool (spec.nodeCache for default, else its spec.nodePools[] entry)
   and whether its runtime mounts image volumes (spec.features.imageVolumes);
2. decide: a reason the images cannot be kept here (the cluster cannot be used, it has no
   such pool, the pool's nodes evicted the cache, an image without a command where nothing
   can mount it), else keep them;
3. compose the keeper DaemonSet, the reporter Deployment, the status ConfigMap it writes and
   their access (node_tier/image_keeper_manifests.py);
4. report status.images from the DaemonSet's numbers and the reporter's summary, each count
   clamped to the DaemonSet's own (a summary is input, never trusted beyond it).

The images go from the nodes with the keeper pods: when the cache is deleted, its pool's
nodes evict it, or an image leaves spec.images (a new template rolls every keeper pod), the
kubelet's image GC may take them once no present pod uses them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fleetcache import messages, reasons, shapes
from fleetcache.functions import protocol, read
from fleetcache.functions.k8s import job_mounts, objects
from fleetcache.functions.k8s.hydration_objects import NAMESPACE_KEY
from fleetcache.functions.node_tier.image_keeper_manifests import (
    ImageNames,
    PinnedImage,
    access_manifests,
    keeper_manifest,
    pull_secrets,
    reporter_manifest,
    status_manifest,
)
from fleetcache.functions.node_tier.warmer_inputs import Decision, Hydration, NodeCache
from fleetcache.functions.views.fleet_cluster import FleetClusterView

KEEPER_KEY = "images-keeper"
REPORTER_KEY = "images-reporter"
STATUS_KEY = "images-status"
ACCESS_KEYS = ("images-keeper-account", "images-reporter-account", "images-reporter-role",
               "images-reporter-binding", "images-slots-binding")
PULL_SECRET_PREFIX = "images-pull-secret-"  # + the index: a copy of each pull secret the images name
KEYS = (KEEPER_KEY, REPORTER_KEY, STATUS_KEY, *ACCESS_KEYS)
SUMMARY_KEY = "status.json"  # the reporter's data key in the status ConfigMap
MESSAGE_MAX = 120


def pinned_images(spec_images: Any) -> tuple[PinnedImage, ...]:
    """The hydration's spec.images, as its model read them."""
    return tuple(PinnedImage(i["image"], i["digest"], i.get("pullPolicy", "IfNotPresent"),
                             tuple(i.get("command") or ()), tuple(i.get("args") or ()),
                             (i["pullSecretRef"]["name"], i["pullSecretRef"].get("key", job_mounts.DOCKER_CONFIG_KEY))
                             if i.get("pullSecretRef") else None)
                 for i in spec_images or ())


# --- 2. decide ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Blocked:
    reason: str
    message: str
    keep: bool  # what exists stays (the cluster cannot be used now); else it goes


def blocked(h: Hydration, cluster: FleetClusterView | None, problem: tuple[str, str],
            node_cache: NodeCache | None, decision: Decision,
            images: tuple[PinnedImage, ...]) -> Blocked | None:
    """Why the images are not kept on this cluster, or None: they are."""
    if cluster is None or problem[0]:
        reason = problem[0] or reasons.AwaitingPrerequisites
        return Blocked(reason, reasons.with_remedy(problem[1] or "the FleetCluster is not known yet",
                                                   reason), keep=True)
    if node_cache is None or node_cache.problem or node_cache.pool is None:
        why = node_cache.problem if node_cache and node_cache.problem else \
            f"FleetCluster {h.cluster} has no node pool {h.pool}"
        return Blocked(reasons.NodeTierNotConfigured, reasons.with_remedy(
            f"{why}: the engine images are not kept on its nodes", reasons.NodeTierNotConfigured),
            keep=False)
    if decision.evicted:
        return Blocked(reasons.Evicted, f"the pool {h.pool} evicted this cache from its nodes "
                                        "(FleetCluster status), and its images with it", keep=False)
    commandless = [i for i, pinned in enumerate(images) if not pinned.command]
    if commandless and not cluster.image_volumes:
        fields = ", ".join(f"spec.images[{i}].command ({images[i].image})" for i in commandless)
        return Blocked(reasons.ImageCommandRequired, reasons.with_remedy(
            f"FleetCluster {h.cluster} does not mount images as volumes "
            f"(spec.features.imageVolumes), so each image runs its command once per node to be "
            f"pulled, and {fields} is empty", reasons.ImageCommandRequired), keep=False)
    return None


# --- 3. compose ---------------------------------------------------------------------------


def compose_objects(request: protocol.Request, h: Hydration, names: ImageNames, node_cache: NodeCache,
                    cluster: FleetClusterView, images: tuple[PinnedImage, ...],
                    outcome: protocol.Outcome) -> None:
    def remote(key: str, manifest: dict, **kwargs: Any) -> None:
        ready = bool(objects.remote_manifest(request.observed.get(key)))
        outcome.compose(key, objects.remote_object(names.object(key), h.namespace, manifest,
                                                   cluster.provider_config, labels=h.labels,
                                                   **kwargs), ready)

    if NAMESPACE_KEY not in outcome.desired:  # no volume here (image delivery): the namespace is ours to make
        remote(NAMESPACE_KEY, objects.namespace_manifest(h.namespace), management_policies=objects.CREATE_ONLY)
    settled = read.get_path(request.status, "images.reason") == reasons.ImagesWarm
    remote(STATUS_KEY, status_manifest(h, names), management_policies=objects.OBSERVE_CREATE_DELETE,
           readiness_query=objects.awaited_query(not settled), watch=True)
    for key, manifest in zip(ACCESS_KEYS, access_manifests(h, names, cluster.image_volumes), strict=False):
        remote(key, manifest)
    for index, (name, theirs) in enumerate(pull_secrets(images)):  # each a kubernetes.io/dockerconfigjson copy
        secret = job_mounts.SecretRef(name, ((theirs, job_mounts.DOCKER_CONFIG_KEY),), "",
                                      "spec.images[].pullSecretRef", type=job_mounts.DOCKER_CONFIG_TYPE)
        key = f"{PULL_SECRET_PREFIX}{index}"
        outcome.compose(key, job_mounts.secret_object(names.object(key), names.pull_secret(index), h.namespace,
                                                      cluster.provider_config, secret, h.labels))
    remote(REPORTER_KEY, reporter_manifest(h, names, cluster.agent_image),
           readiness_query=objects.ROLLED_OUT_QUERY, watch=True)
    remote(KEEPER_KEY, keeper_manifest(h, names, node_cache, cluster.agent_image, images,
                                       cluster.image_volumes),
           readiness_query=objects.ROLLED_OUT_QUERY, watch=True)


# --- 4. report ----------------------------------------------------------------------------


def summary_of(request: protocol.Request) -> dict:
    """The reporter's summary as last observed ({} until it wrote one, or when it is not JSON)."""
    text = read.mapping_at(objects.remote_manifest(request.observed.get(STATUS_KEY)), "data").get(SUMMARY_KEY)
    if not isinstance(text, str) or len(text) > 65536:
        return {}
    try:
        summary = json.loads(text)
    except ValueError:
        return {}
    return summary if isinstance(summary, dict) else {}


def count(value: Any, most: int) -> int:
    return max(0, min(value, most)) if isinstance(value, int) and not isinstance(value, bool) else 0


def first_failure(value: Any) -> dict | None:
    if not isinstance(value, dict):
        return None
    failure = {k: messages.clipped(str(value.get(k) or ""), MESSAGE_MAX) for k in ("node", "reason", "message")}
    if not shapes.is_object_name(failure["node"]):
        return None
    failure["reason"] = reasons.reason_or_empty(failure["reason"]) or reasons.ImagePullFailed
    return failure


def status_of(request: protocol.Request, images: tuple[PinnedImage, ...]) -> dict:
    """status.images from what the cluster reports: the DaemonSet's numbers bound every count."""
    daemonset = objects.remote_manifest(request.observed.get(KEEPER_KEY))
    scheduled = read.get_path(daemonset, "status.desiredNumberScheduled")
    summary = summary_of(request)
    per_image = {entry.get("image"): entry.get("readyNodes") for entry in summary.get("images") or ()
                 if isinstance(entry, dict)}
    if not isinstance(scheduled, int) or isinstance(scheduled, bool):
        return {"desired": 0, "ready": 0, "pulling": 0, "failed": 0, "summary": "",
                "images": [{"image": p.image, "digest": p.digest, "readyNodes": 0} for p in images],
                "reason": reasons.AwaitingPrerequisites, "message": reasons.with_remedy(
                    "the keeper DaemonSet has not reported its nodes yet", reasons.AwaitingPrerequisites)}
    desired = max(scheduled, 0)
    ready = min(count(summary.get("ready"), desired), count(read.get_path(daemonset, "status.numberReady"), desired))
    failed = count(summary.get("failed"), desired - ready)
    failure = first_failure(summary.get("firstFailure")) if failed else None
    status: dict = {
        "desired": desired, "ready": ready, "pulling": desired - ready - failed, "failed": failed,
        "summary": f"{ready}/{desired}",
        "images": [{"image": p.image, "digest": p.digest,
                    "readyNodes": max(ready, count(per_image.get(p.reference), desired))} for p in images]}
    if failure:
        status["firstFailure"] = failure
    if desired == 0:
        status["reason"], status["message"] = reasons.NoEligibleNodes, reasons.with_remedy(
            "no opted-in node of the pool to keep the images on", reasons.NoEligibleNodes)
    elif ready == desired:
        status["reason"] = reasons.ImagesWarm
        status["message"] = f"{messages.counted(len(images), 'image')} kept on every pool node ({desired})"
    elif failure:
        status["reason"], status["message"] = reasons.ImagePullFailed, reasons.with_remedy(
            f"{failed} of {desired} nodes failed; first {failure['node']}: {failure['reason']}: "
            f"{failure['message']}", reasons.ImagePullFailed)
    else:
        status["reason"] = reasons.ImagesPulling
        status["message"] = reasons.with_remedy(f"{ready} of {desired} nodes hold every image",
                                                reasons.ImagesPulling)
    return status


# --- the hook -----------------------------------------------------------------------------


def own_keys(keys: Iterable[str]) -> list[str]:
    """The keys of what this module composes, among `keys`."""
    return [k for k in keys if k in KEYS or k.startswith(PULL_SECRET_PREFIX)]


def run(request: protocol.Request, h: Hydration, fleet_cluster: dict | None,
        cluster: FleetClusterView | None, problem: tuple[str, str],
        images: tuple[PinnedImage, ...], outcome: protocol.Outcome) -> dict | None:
    """Decide, compose and return status.images; None without spec.images (nothing of them
    is composed, so Crossplane deletes what was)."""
    for key in own_keys(outcome.desired):
        outcome.desired.pop(key, None)
    if not images:
        return None
    node_cache = NodeCache.of_pool(read.get_path(fleet_cluster, "spec"), h.pool)
    decision = Decision.of_pool(read.get_path(fleet_cluster, "status"), h.pool, h.key)
    names = ImageNames(h)
    stop = blocked(h, cluster, problem, node_cache, decision, images)
    if stop is None:
        if cluster is not None and node_cache is not None:  # always: blocked() said why not
            compose_objects(request, h, names, node_cache, cluster, images, outcome)
        return status_of(request, images)
    if stop.keep:
        objects.carry_over(request, outcome, own_keys(request.observed))
        kept = status_of(request, images) if KEEPER_KEY in request.observed else {}
        return {**kept, "reason": stop.reason, "message": stop.message}
    return {"desired": 0, "ready": 0, "pulling": 0, "failed": 0, "summary": "",
            "images": [{"image": p.image, "digest": p.digest, "readyNodes": 0} for p in images],
            "reason": stop.reason, "message": stop.message}
