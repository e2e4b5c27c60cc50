"""compose-model-replica: run one replica of a model's engine on its cluster.

Lifecycle, top to bottom:
1. read the spec the ModelDeployment wrote (cluster, delivery, model, cache, and the
   digest of the engine it composed with); ask Crossplane for the replica's FleetCluster
   and for its ModelDeployment, whose spec.engine every replica shares (a ModelReplica
   carries only what is its own, so 1,000 replicas do not copy one engine 1,000 times);
2. Wait and Fail compose nothing on the cluster: the replica reports Waiting (with the
   hydration's progress, or the missing ModelCache) or Failed (with the hydration's reason
   and remedy);
3. Node, Cache and Source compose, through provider-kubernetes Objects on that cluster, the
   namespace (create only, never deleted), a one-pod Deployment of the engine carrying
   the environment contract of DESIGN.md §3, and a Service (k8s/engine.py); a Node pod
   mounts the node copy and the cluster volume, links one of them in an init container and
   is placed on warm nodes (node_tier/delivery.py), Require reverting to Prefer once after
   its timeout; an Image pod mounts the cache's OCI artifact by digest as a read-only image
   volume, composed only on a FleetCluster that declares spec.features.imageVolumes; Cache
   and Node hold their ModelCache with a Crossplane Usage by the engine's Deployment Object
   (cache_usage);
4. report: the replica is ready when its Deployment is available (a CEL readiness query
   on the Object); the commit it serves (status.servingCommit, the `Serving` condition)
   moves only when the Deployment has rolled out, so a replica moved to a new commit
   reads Ready on the old one (reason RollingCommit) while the new pod loads, and a
   ModelCache's rollout counts from the real switch (views/cache_replicas.py). An Image
   replica whose Deployment timed out progressing says ImageVolumeUnavailable, and its
   ModelDeployment moves it to the volume path (decisions/image_delivery.py).

The engine is told where the model is through environment variables only, so one
command line (`--model=$(FLEETCACHE_MODEL)`) serves both deliveries. What real engines
need to run under Pod Security `restricted` is written down in design/engines.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from fleetcache import messages, reasons
from fleetcache.apis import specs
from fleetcache.apis.models import model_replica as api
from fleetcache.functions import naming, protocol, quantities, read
from fleetcache.functions.decisions import engine_image, image_delivery
from fleetcache.functions.k8s import objects
from fleetcache.functions.k8s.engine import (
    AVAILABLE_QUERY,
    LABEL_REPLICA,
    Pod,
    deployment_manifest,
    labels_of,
    remote_name,
    service_manifest,
)
from fleetcache.functions.node_tier import delivery as node_delivery
from fleetcache.functions.node_tier.image_keeper_manifests import keeper_selector
from fleetcache.functions.node_tier.warmer_names import VOLUME_MOUNT
from fleetcache.functions.views.fleet_cluster import FleetClusterView, fleet_cluster_requirement
from fleetcache.functions.views.model_replica import (
    HF_CACHE,
    IMAGE_MOUNT_PATH,
    SERVED_LIMIT,
    SERVING,
    CacheMount,
    Engine,
    ImageMount,
    served_commit,
)
from fleetcache.volume import hf_hub_cache

FLEET_CLUSTER_KEY = "fleet-cluster"
CACHE_USAGE_KEY = "cache-usage"
USAGE_API_VERSION = "protection.crossplane.io/v1beta1"
DEPLOYMENT_KEY = "model-deployment"
ENGINE_KEY = "deployment"  # the Object of the engine's Deployment, the pod that mounts the cache
REMOTE_KEYS = ("namespace", ENGINE_KEY, "service")
# What a Deployment's Progressing=False may say that a replica passes on; any other reads as NotProgressing.
STALLED = (reasons.ProgressDeadlineExceeded,)
MODEL_REVISION_ENV = "FLEETCACHE_MODEL_REVISION"


# --- 1. inputs ----------------------------------------------------------------------------


RUNNING = ("Node", "Cache", "Image", "Source")  # the deliveries that run the engine
IMAGE_VOLUME = "model-image"  # the pod's volume of the artifact


@dataclass(frozen=True)
class ReplicaSpec:
    name: str
    namespace: str
    deployment: str
    index: int
    cluster: str
    delivery: str
    repo: str
    revision: str
    commit: str
    cache: CacheMount | None
    hydration: dict
    engine_digest: str
    node: node_delivery.NodeMount | None = None
    delivery_reason: str = ""
    image: ImageMount | None = None
    engine_image: Mapping[str, Any] | None = None  # spec.engineImage: the cache keeps the engine's image

    @property
    def model(self) -> str:
        """FLEETCACHE_MODEL: on Node the snapshot through the link the select step wrote, on
        Cache the model's directory on the volume (a snapshot, or flat files), on Image the
        artifact's mount (its files at their paths), org/repo on Source."""
        if self.image:
            return IMAGE_MOUNT_PATH
        if self.node:
            return node_delivery.snapshot_link(self.repo, self.node.commit)
        return self.cache.snapshot_path if self.cache else self.repo

    @property
    def hub_cache(self) -> str:
        """HF_HUB_CACHE: the link on Node, the volume's hub/ on Cache of layout HfCache;
        none for Flat files, which are no Hugging Face cache."""
        if self.node:
            return node_delivery.LINK_PATH
        return hf_hub_cache(self.cache.mount_path) \
            if self.cache and self.cache.layout == HF_CACHE else ""

    @property
    def model_revision(self) -> str:
        """FLEETCACHE_MODEL_REVISION: the pinned commit, else the revision asked for."""
        if self.image:
            return self.image.commit
        if self.cache:
            return self.cache.commit
        return self.commit or self.revision

    @property
    def labels(self) -> dict[str, str]:
        """The labels of what is composed for this replica."""
        return labels_of(self.name, self.deployment, self.cluster)


def read_spec(request: protocol.Request) -> ReplicaSpec:
    """The spec read through the ModelReplica model; the ModelDeployment writes it."""
    spec = specs.read_spec(api.ModelReplica, request.composite.get("spec"))
    delivery = spec["delivery"]
    if delivery == "Node" and spec["cache"]["mountPath"] != VOLUME_MOUNT:
        raise specs.InputError(f"spec.cache.mountPath must be {VOLUME_MOUNT} "
                             "on Node (the select step links the volume there)")
    if delivery == "Node" and spec["cache"].get("layout", HF_CACHE) != HF_CACHE:
        raise specs.InputError("spec.cache.layout must be HfCache on Node (the select step "
                             "links a Hugging Face cache)")
    model = spec.get("model", {})
    return ReplicaSpec(
        name=request.name,
        namespace=request.namespace,
        deployment=spec["deploymentName"],
        index=spec["replica"],
        cluster=spec["clusterName"],
        delivery=delivery,
        repo=model.get("repo", ""),
        revision=model.get("revision") or "main",
        commit=model.get("commit", ""),
        cache=CacheMount.of(spec["cache"]) if delivery in ("Cache", "Node") else None,
        hydration=spec.get("hydration", {}),
        engine_digest=spec.get("engineDigest", "") if delivery in RUNNING else "",
        node=node_delivery.NodeMount.of(spec["nodeCache"]) if delivery == "Node" else None,
        delivery_reason=spec.get("deliveryReason", ""),
        image=ImageMount.of(spec["image"]) if delivery == "Image" else None,
        engine_image=spec.get("engineImage"),
    )


# --- 2. waiting and failed replicas -------------------------------------------------------


def hydration_progress(hydration: Mapping, cluster: str) -> str:
    """The hydration's phase, bytes and message (cut: they are input to this replica)."""
    phase = messages.clipped(hydration.get("phase") or "Pending", 32)
    done, total = read.as_int(hydration.get("bytesDone")), read.as_int(hydration.get("bytesTotal"))
    text = f"waiting for the model cache on cluster {cluster}: {phase}"
    if total > 0:
        text += f", {quantities.human_bytes(min(done, total))} of {quantities.human_bytes(total)} " \
                f"({done * 100 // total}%)"
    detail = hydration.get("message") or ""
    return messages.clipped(f"{text} ({detail})", messages.MESSAGE_LIMIT) if detail else text


def hydration_failure(hydration: Mapping, cluster: str) -> tuple[str, str]:
    """The message for a Fail replica: the hydration's own reason and remedy."""
    cause = reasons.reason_or_empty(hydration.get("reason"))
    detail = hydration.get("message") or ""
    text = f"the model cache failed to hydrate on cluster {cluster}"
    if cause:
        text += f" ({cause})"
    if detail:
        return reasons.HydrationFailed, messages.clipped(f"{text}: {detail}", messages.MESSAGE_LIMIT)
    return reasons.HydrationFailed, reasons.with_remedy(text, cause or reasons.HydrationFailed)


# --- 3. the engine on its cluster ---------------------------------------------------------


def environment(spec: ReplicaSpec) -> list[dict]:
    """The environment contract of DESIGN.md §3: where the model is, which revision, which
    delivery, and on Cache and Node the Hugging Face cache to read offline (on Image, the
    artifact's files: offline too)."""
    env = [{"name": "FLEETCACHE_MODEL", "value": spec.model},
           {"name": MODEL_REVISION_ENV, "value": spec.model_revision},
           {"name": "FLEETCACHE_DELIVERY", "value": spec.delivery.lower()}]
    if spec.hub_cache:
        env.append({"name": "HF_HUB_CACHE", "value": spec.hub_cache})
    if spec.cache or spec.image:
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    return env


@dataclass(frozen=True)
class NodePod:
    """What a Node pod adds: the select step's image (the cluster's agent image, as its
    Jobs use it) and how it is placed now."""

    agent_image: str
    placement: node_delivery.Placement


def engine_pod(spec: ReplicaSpec, node_pod: NodePod | None = None) -> Pod:
    """What this replica puts into its engine's pod: the environment contract, and on Cache
    the model cache PVC, read-only at both the pod and the container (on Node the node PVC
    and the cluster PVC, both read-only, and the link's emptyDir, the select init container
    and the affinity on warm nodes; on Image the artifact as an image volume, by digest,
    read-only)."""
    volumes: list[dict] = []
    mounts: list[dict] = []
    if spec.node and spec.cache:
        volumes, mounts = node_delivery.pod_volumes(spec.node, spec.cache.volume)
    elif spec.cache:
        volumes.append({"name": "model-cache", "persistentVolumeClaim": {
            "claimName": spec.cache.volume, "readOnly": True}})
        mounts.append({"name": "model-cache", "mountPath": spec.cache.mount_path,
                       "readOnly": True})
    elif spec.image:  # pinned by digest: IfNotPresent never pulls other bytes
        volumes.append({"name": IMAGE_VOLUME, "image": {"reference": spec.image.reference,
                                                        "pullPolicy": "IfNotPresent"}})
        mounts.append({"name": IMAGE_VOLUME, "mountPath": IMAGE_MOUNT_PATH, "readOnly": True})
    if spec.node and node_pod:
        select = node_delivery.select_container(spec.node, spec.repo, node_pod.agent_image)
        placed = node_delivery.affinity(spec.node, node_pod.placement.placement)
        if spec.engine_image:  # the node policy also prefers the nodes that keep the image
            placed = {**(placed or {}), **engine_image.keeper_affinity(
                keeper_selector(spec.engine_image["modelCacheName"]))}
        return Pod(spec.delivery, environment(spec), volumes, mounts, [select], placed)
    return Pod(spec.delivery, environment(spec), volumes, mounts)


def object_name(spec: ReplicaSpec, what: str) -> str:
    """The name of the Object this replica composes under the key `what`."""
    return naming.child_name(spec.name, what)


def compose_engine(spec: ReplicaSpec, engine: Engine, cluster: FleetClusterView,
                   outcome: protocol.Outcome, node_pod: NodePod | None = None) -> None:
    name = remote_name(spec.name)

    def remote(what: str, manifest: dict, **kwargs: Any) -> None:
        outcome.compose(what, objects.remote_object(
            object_name(spec, what), spec.namespace, manifest, cluster.provider_config,
            labels={LABEL_REPLICA: naming.label_value(spec.name)}, **kwargs))

    remote("namespace", objects.namespace_manifest(spec.namespace),
           management_policies=objects.CREATE_ONLY)
    if spec.engine_image:  # the digest every pool node pulled, not the tag
        engine = replace(engine, image=spec.engine_image["reference"])
    remote(ENGINE_KEY, deployment_manifest(name, spec.namespace, spec.labels, engine,
                                           engine_pod(spec, node_pod)),
           readiness_query=AVAILABLE_QUERY)
    remote("service", service_manifest(name, spec.namespace, spec.labels, engine))


def shared_engine(request: protocol.Request, spec: ReplicaSpec) -> tuple[Engine | None, str, str]:
    """(engine, "", "") from the ModelDeployment's spec.engine, or (None, reason, message).

    A required resource is read, never trusted: a missing ModelDeployment or a malformed
    engine reads as absent, so what runs is kept."""
    owner = next(iter(request.required.get(DEPLOYMENT_KEY) or []), None)
    where = f"ModelDeployment {spec.namespace}/{spec.deployment}"
    if not isinstance(owner, Mapping):
        return None, reasons.DeploymentNotFound, reasons.with_remedy(f"{where} does not exist",
                                                        reasons.DeploymentNotFound)
    try:
        return Engine.of(read.get_path(owner, "spec.engine"), f"{where} spec.engine"), "", ""
    except specs.InputError as err:
        return None, reasons.InvalidSpec, reasons.with_remedy(str(err), reasons.InvalidSpec)


# --- 4. report ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    phase: str  # Pending | Waiting | Ready | Failed
    reason: str
    message: str


def engine_phase(request: protocol.Request, cluster: str, name: str) -> Phase:
    """The composed engine's phase, from its Deployment Object."""
    observed = request.observed.get("deployment")
    if read.is_true(observed, "Ready"):
        return Phase("Ready", reasons.Available, f"Deployment {name} is available on cluster {cluster}")
    progressing = read.condition_of(objects.remote_manifest(observed), "Progressing")
    if progressing.get("status") == "False":
        reason = progressing.get("reason")
        reason = reason if reason in STALLED else reasons.NotProgressing
        return Phase("Pending", reason, reasons.with_remedy(
            f"Deployment {name} on cluster {cluster} is not progressing: "
            f"{messages.shown(str(progressing.get('message') or ''))}", reason))
    return Phase("Pending", reasons.Starting, f"waiting for Deployment {name} on cluster {cluster} "
                 "to become available (pulling the image, loading the model)")


def rolled_out(deployment: dict) -> bool:
    """Whether every pod of the Deployment runs its current template, decided as `kubectl
    rollout status` decides it (kubernetes/kubectl pkg/polymorphichelpers/rollout_status.go,
    DeploymentStatusViewer): the controller has observed this generation, the progress
    deadline has not passed, every replica is updated, no old one is left, and every updated
    one is available."""
    status = read.mapping_at(deployment, "status")
    if read.as_int(read.get_path(deployment, "metadata.generation")) > read.as_int(status.get("observedGeneration")):
        return False
    if read.condition_of(deployment, "Progressing").get("reason") == reasons.ProgressDeadlineExceeded:
        return False
    updated = read.as_int(status.get("updatedReplicas"))
    return updated >= read.as_int(read.get_path(deployment, "spec.replicas"), 1) \
        and read.as_int(status.get("replicas")) <= updated \
        and read.as_int(status.get("availableReplicas")) >= updated


def template_commit(deployment: dict) -> str:
    """The commit the Deployment's pod template tells its engine (FLEETCACHE_MODEL_REVISION);
    "" when the template names none."""
    containers = read.get_path(deployment, "spec.template.spec.containers")
    for container in containers if isinstance(containers, list) else ():
        env = read.get_path(container, "env")
        for var in env if isinstance(env, list) else ():
            value = read.get_path(var, "value")
            if read.get_path(var, "name") == MODEL_REVISION_ENV and isinstance(value, str) \
                    and 0 < len(value) <= SERVED_LIMIT:
                return value
    return ""


def serving_commit(observed_engine: dict | None, latched: str) -> str:
    """The commit every pod of the engine serves: its template's once the Deployment has
    rolled out, else the one served before (the old pod serves it while the new one starts:
    the rolling update keeps maxUnavailable 0)."""
    deployment = objects.remote_manifest(observed_engine)
    commit = template_commit(deployment)
    return commit if commit and rolled_out(deployment) else latched


def report_serving(request: protocol.Request, spec: ReplicaSpec, outcome: protocol.Outcome,
                   current: Phase) -> Phase:
    """status.servingCommit and the Serving condition, a Normal event when the commit served
    changes, and the phase as reported: Ready on the old commit reads RollingCommit while
    the Deployment rolls to the new one."""
    if spec.delivery not in RUNNING:
        outcome.condition(SERVING, False, reasons.NotServing,
                          f"no engine runs for this replica on cluster {spec.cluster} (delivery {spec.delivery})")
        return current
    before = served_commit(request.status)
    serving = serving_commit(request.observed.get(ENGINE_KEY), before)
    name, target = remote_name(spec.name), spec.model_revision
    if serving:
        outcome.status["servingCommit"] = serving
    if serving and serving != before:
        outcome.notices.append(f"Deployment {name} on cluster {spec.cluster} serves commit {serving}"
                               + (f" (was {before})" if before else ""))
    if serving == target:
        outcome.condition(SERVING, True, reasons.CommitServed,
                          f"every pod of Deployment {name} on cluster {spec.cluster} serves commit {target}")
        return current
    rolling = f"Deployment {name} on cluster {spec.cluster} rolls to commit {target}; " + (
        f"commit {serving} serves meanwhile" if serving else "no commit was served before")
    outcome.condition(SERVING, False, reasons.RollingCommit, rolling)
    if current.phase == "Ready" and serving:
        return Phase("Ready", reasons.RollingCommit, rolling)
    return current


def waiting_phase(spec: ReplicaSpec) -> Phase:
    """A Wait replica waits for its cluster's cache, for a ModelCache that does not exist
    (its ModelDeployment never served a model: there is nothing to load yet), or, on a
    cluster outside the cache's targets, for a placement that would put it there (an S3 or
    existing-volume model has no source an engine loads)."""
    if spec.hydration.get("reason") == reasons.ModelCacheNotFound:
        detail = messages.clipped(spec.hydration.get("message") or "")
        return Phase("Waiting", reasons.ModelCacheNotFound, reasons.with_remedy(
            f"nothing runs on cluster {spec.cluster}: {detail}", reasons.ModelCacheNotFound))
    if spec.hydration.get("reason") == reasons.NotACacheTarget:  # its message says what to do
        return Phase("Waiting", reasons.NotACacheTarget, messages.clipped(
            spec.hydration.get("message") or f"cluster {spec.cluster} is not a cache target",
            messages.MESSAGE_LIMIT))
    return Phase("Waiting", reasons.Hydrating, hydration_progress(spec.hydration, spec.cluster))


def running_phase(request: protocol.Request, spec: ReplicaSpec, outcome: protocol.Outcome) -> Phase:
    """Compose the engine on its cluster, or keep what runs while an input is missing."""
    clusters = request.required.get(FLEET_CLUSTER_KEY)
    if clusters is None or DEPLOYMENT_KEY not in request.required:  # not fetched yet
        objects.carry_over(request, outcome, REMOTE_KEYS)
        return Phase("Pending", reasons.Resolving, f"looking up FleetCluster {spec.cluster} and "
                     f"ModelDeployment {spec.deployment}")
    view = FleetClusterView.of(clusters[0]) if clusters and isinstance(
        clusters[0], Mapping) else None
    if view is None or not view.ready:
        reason: str = reasons.ClusterNotFound if view is None else reasons.ClusterNotReady
        objects.carry_over(request, outcome, REMOTE_KEYS)
        return Phase("Pending", reason, reasons.with_remedy(
            f"FleetCluster {spec.cluster} " + ("does not exist" if view is None
                                               else "is not Ready"), reason))
    engine, reason, message = shared_engine(request, spec)
    if engine is None:
        objects.carry_over(request, outcome, REMOTE_KEYS)
        outcome.warnings.append(message)
        return Phase("Pending", reason, message)

    name = remote_name(spec.name)
    outcome.status["endpoint"] = f"{name}.{spec.namespace}.svc:{engine.port}"
    outcome.status["model"] = {"name": spec.model, "revision": spec.model_revision}
    if engine.digest != spec.engine_digest:
        objects.carry_over(request, outcome, REMOTE_KEYS)
        running = engine_phase(request, spec.cluster, name)
        if running.phase == "Ready":
            return running
        return Phase("Pending", reasons.EngineChanging, reasons.with_remedy(
            f"ModelDeployment {spec.deployment}'s spec.engine is not the one it composed this "
            f"replica with (engineDigest {spec.engine_digest}); waiting for it to recompose "
            "the replica", reasons.EngineChanging))
    node_pod = None
    if spec.node:
        placement = node_delivery.placement_of(
            spec.node, node_delivery.latched_placement(request.status),
            read.is_true(request.observed.get("deployment"), "Ready"), request.now)
        node_pod = NodePod(view.agent_image, placement)
        outcome.status["nodeCache"] = placement.as_status()
        if placement.reverted:
            outcome.status["deliveryReason"] = reasons.with_remedy(
                f"NodeRequireReverted: not available {spec.node.require_timeout} after its "
                f"Node delivery started ({placement.started_at}); placed by preference on "
                f"warm nodes since {placement.reverted_at}", reasons.NodeRequireReverted)
    if spec.image and not view.image_volumes:  # never composed where nodes may not mount it
        objects.carry_over(request, outcome, REMOTE_KEYS)
        return Phase("Pending", reasons.ImageVolumeUnavailable, reasons.with_remedy(
            f"FleetCluster {spec.cluster} does not declare spec.features.imageVolumes, so no image "
            f"volume of {spec.image.reference} is composed there", reasons.ImageVolumeUnavailable))
    compose_engine(spec, engine, view, outcome, node_pod)
    running = engine_phase(request, spec.cluster, name)
    unmounted = image_delivery.unmounted(objects.remote_manifest(request.observed.get(ENGINE_KEY))) \
        if spec.image else ""
    if unmounted and spec.image:
        return Phase("Pending", reasons.ImageVolumeUnavailable, reasons.with_remedy(messages.clipped(
            f"Deployment {name} on cluster {spec.cluster} timed out mounting {spec.image.reference} "
            f"as an image volume: {unmounted}", messages.MESSAGE_LIMIT), reasons.ImageVolumeUnavailable))
    return running


def cache_usage(spec: ReplicaSpec, cache: CacheMount) -> dict:
    """A Crossplane Usage of the ModelCache by this replica's engine Deployment Object: while
    the engine that mounts the cache may run, Crossplane's admission webhook refuses to delete
    the ModelCache (and with it every volume), and replays the deletion once the last such
    Usage is gone. `by` is the Object, not the replica: a composed Usage waits for its `by`
    to be gone before it goes, and under foreground deletion the replica waits for the
    Usage it owns, so a Usage by the replica itself held both for ever
    (design/deployments.md, "Holding the cache")."""
    return {
        "apiVersion": USAGE_API_VERSION,
        "kind": "Usage",
        "metadata": {"name": naming.child_name(spec.name, "uses-cache"),
                     "labels": spec.labels},
        "spec": {
            "of": {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
                   "resourceRef": {"name": cache.model_cache}},
            "by": {"apiVersion": objects.OBJECT_API_VERSION, "kind": "Object",
                   "resourceRef": {"name": object_name(spec, ENGINE_KEY)}},
            "replayDeletion": True,
        },
    }


def compose(request: protocol.Request) -> protocol.Outcome:
    outcome = protocol.Outcome()
    spec = read_spec(request)
    if spec.cache is not None:  # Cache and Node read the cluster volume
        outcome.compose(CACHE_USAGE_KEY, cache_usage(spec, spec.cache), ready=True)
    outcome.status = {"clusterName": spec.cluster, "delivery": spec.delivery}
    if spec.delivery_reason:
        outcome.status["deliveryReason"] = spec.delivery_reason
    if spec.node and node_delivery.latched_placement(request.status):
        # kept while an input is missing; a compose that places the pod rewrites it
        outcome.status["nodeCache"] = node_delivery.latched_placement(request.status)
    if spec.delivery == "Wait":
        current = waiting_phase(spec)
    elif spec.delivery == "Fail":
        current = Phase("Failed", *hydration_failure(spec.hydration, spec.cluster))
    else:
        outcome.require(FLEET_CLUSTER_KEY, fleet_cluster_requirement(spec.cluster))
        outcome.require(DEPLOYMENT_KEY, protocol.Requirement(
            naming.API_VERSION, "ModelDeployment", match_name=spec.deployment,
            namespace=request.namespace))
        current = running_phase(request, spec, outcome)
    current = report_serving(request, spec, outcome, current)
    outcome.status.update({"phase": current.phase, "reason": current.reason,
                           "message": current.message,
                           "engineImage": "Warm" if spec.engine_image and spec.engine_image["warm"] else "Cold"})
    outcome.composite_ready = current.phase == "Ready"
    return outcome
