"""`fleetcache demo`, the node tier: a model on each GPU node's own disk, warmed from its
cluster's verified volume, and a replica on a warm node reading that copy.

Played after the other acts, on the demo's control plane, with two more clusters that only
this act's label places on, each with four nodes: two GPU nodes opted in to the node cache,
one GPU node in the pool that did not opt in, and a control-plane node. Each cluster has its
own Hub counter (its agents are pointed at their own copy of the test hub), so the bytes each
one reads from the origin show.

1. a ModelCache on storage tier Node: each cluster hydrates its volume from the Hub once,
   then the warmer DaemonSet copies it onto every opted-in pool node (never the one that did
   not opt in, never the control plane); node counts per round, as `kubectl get` shows them;
2. churn on the first cluster: a GPU node opts in (it joins the pool) and is warmed from the
   volume while its Hub counter stands still; mid-way, another node is removed, and the
   counts drop at once;
3. a ModelDeployment with delivery node Prefer: its replica on each cluster lands on a warm
   node (on the first cluster the node that joined: the other warm node is cordoned first),
   and the pod's `select` init container says `node` (FLEETCACHE_MODEL resolves into that
   node's copy); the ModelDeployment reports every replica ready;
4. `kubectl get` of the ModelCache (NODES), the FleetClusters (NODE-CACHE) and the replicas
   (DELIVERY Node);
5. the Hub bytes each cluster read: one model's worth, however many nodes it warmed;
6. the engine image (spec.images, design/engine-images.md): an 8 GiB image pushed to a
   loopback registry is resolved once to a digest and kept on every opted-in node (pulled by
   running its command behind a warm slot); the joining node gets it too before its replica
   lands there; each replica runs that digest, its pod pulls nothing (the image is on the
   node) and says ENGINE-IMAGE Warm; the wait a fresh node would have had is printed.

`play` returns what differs from that ending; [] when the fleet converged as it should.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetcache.devtools.demo.stage import Stage
from fleetcache.devtools.package.modelpack import Pusher
from fleetcache.devtools.package.registry import loopback_registry
from fleetcache.devtools.simulation import CONTROL_PLANE_ROLE, Cluster, NodePod, kubectl_table
from fleetcache.devtools.testhub.content import make_model
from fleetcache.devtools.testhub.server import TestHub
from fleetcache.functions import naming, quantities
from fleetcache.functions.read import get_path

NAMESPACE = "inference"
GRANT = "inference"
CACHE = "edge-chat"
REPO = "fleetcache-demo/edge-chat"
TIER = "node-tier"  # the FleetClusters' fleetcache.dev/tier label: only this act places here
CLUSTERS = ("gpu-nodes-a", "gpu-nodes-b")
CHURN_CLUSTER = CLUSTERS[0]
POOL = {"nvidia.com/gpu.present": "true"}
OPT_IN_KEY, OPT_IN_VALUE = "fleetcache.dev/node-cache", "enabled"  # the default optInLabel
OPT_IN = {OPT_IN_KEY: OPT_IN_VALUE}
CACHE_PATH = "/mnt/nvme0"  # spec.nodeCache.path: a disk of its own on every GPU node
# (node, its labels, control plane): two opted in, one in the pool but not opted in, one
# control-plane node that opted in (the pool excludes it anyway).
NODES = (("gpu-1", {**POOL, **OPT_IN}, False), ("gpu-2", {**POOL, **OPT_IN}, False),
         ("gpu-3", dict(POOL), False), ("control-plane", dict(OPT_IN), True))
JOINING, LEAVING = "gpu-3", "gpu-2"  # gpu-3 opts in; gpu-2 is removed while gpu-3 warms
STAYING = "gpu-1"  # cordoned before the replicas come, so one lands on the joining node
ORIGIN_SLACK = 1.05  # a cluster's Hub bytes: at most this many models (metadata on top)
ENGINE_REPOSITORY, ENGINE_TAG = "engines/vllm-openai", "v0.11.0"
ENGINE_BYTES = 8 << 30  # what the simulated engine image stands for (vLLM images are 8-20 GB)
PULL_BANDWIDTH = 2 << 30  # bytes a second a simulated node pulls at: compressed, as the rounds are
REAL_BANDWIDTH = 200 << 20  # what the note's figure assumes of a real node's registry pull


@dataclass(frozen=True)
class Fleet:
    """The act's clusters and the Hub copy each one reads from."""

    clusters: dict[str, Cluster]
    hubs: dict[str, TestHub]
    model_bytes: int
    engine_image: str  # <registry>/engines/vllm-openai:v0.11.0, kept by the cache


# --- what the platform team and the tenant apply --------------------------------------------


def fleet_cluster(name: str) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "FleetCluster",
            "metadata": {"name": name, "labels": {"fleetcache.dev/tier": TIER}},
            "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                             "name": f"{name}-kubeconfig"},
                     "cache": {"storageClassName": "fast-rwx"},
                     "nodeCache": {"nodeSelector": {"matchLabels": dict(POOL)},
                                   "path": CACHE_PATH, "capacityPerNode": "100Gi",
                                   "maxConcurrentNodes": 2}}}


def grant() -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
            "metadata": {"name": GRANT, "namespace": NAMESPACE},
            "spec": {"clusters": {"clusterSelector": {"matchLabels": {"fleetcache.dev/tier": TIER}}},
                     "quota": {"bytes": "2Gi"}}}


def model_cache(endpoint: str, engine_image: str = "") -> dict:
    """The act's ModelCache; with `engine_image`, kept on the pool too (the node tier's
    end-to-end test plays it without one, having no registry)."""
    images = [{"image": engine_image, "command": ["vllm", "serve", "--help=all"]}] if engine_image else []
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": CACHE, "namespace": NAMESPACE},
            "spec": {"grantRef": {"name": GRANT},
                     "source": {"huggingFace": {"repo": REPO, "endpoint": endpoint}},
                     "storage": {"tier": "Node"},
                     **({"images": images} if images else {}),
                     "placement": {"clusterSelector": {
                         "matchLabels": {"fleetcache.dev/tier": TIER}}}}}


def model_deployment(engine_image: str = f"vllm/vllm-openai:{ENGINE_TAG}") -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": CACHE, "namespace": NAMESPACE},
            "spec": {"modelCacheRef": {"name": CACHE}, "replicas": len(CLUSTERS),
                     "maxReplicasPerCluster": 1,
                     "placement": {"clusterSelector": {
                         "matchLabels": {"fleetcache.dev/tier": TIER}}},
                     "delivery": {"node": {"policy": "Prefer"}},
                     "engine": {"image": engine_image, "args": ["--model=$(FLEETCACHE_MODEL)"]}}}


# --- what kubectl would print ---------------------------------------------------------------


def hydration(stage: Stage, cluster: str) -> dict:
    return next((h for h in stage.hydrations(CACHE) if h["spec"]["clusterName"] == cluster), {})


def node_tier(stage: Stage, cluster: str) -> dict:
    return get_path(hydration(stage, cluster), "status.nodeTier", {}) or {}


def tier_rows(stage: Stage) -> list[list[str]]:
    rows = [["CLUSTER", "VOLUME", "NODE TIER", "DESIRED", "READY", "DOWNLOADING", "FAILED",
             "REASON", "IMAGES"]]
    for cluster in CLUSTERS:
        status = get_path(hydration(stage, cluster), "status", {}) or {}
        tier = status.get("nodeTier") or {}
        rows.append([cluster, status.get("phase", "-"), tier.get("phase", "-"),
                     *(str(tier.get(k, 0)) for k in ("desiredNodes", "readyNodes",
                                                     "downloadingNodes", "failedNodes")),
                     tier.get("reason", ""), get_path(status, "images.summary", "") or "-"])
    return rows


def images_warm(stage: Stage, cluster: str, nodes: int) -> bool:
    images = get_path(hydration(stage, cluster), "status.images", {}) or {}
    return images.get("reason") == "ImagesWarm" and images.get("desired") == nodes == images.get("ready")


def node_rows(fleet: Fleet, cluster: str, label_key: str) -> list[list[str]]:
    """`kubectl get nodes -L <opt-in>,<warm label>`."""
    rows = [["NODE", "ROLES", "OPT-IN", "WARM COMMIT"]]
    for name, node in sorted(fleet.clusters[cluster].nodes.items()):
        rows.append([name, "control-plane" if CONTROL_PLANE_ROLE in node.labels
                     else "gpu" if all(node.labels.get(k) == v for k, v in POOL.items())
                     else "<none>", node.labels.get(OPT_IN_KEY, "<none>"),
                     node.labels.get(label_key, "<none>")[:10]])
    return rows


def selected(pod: NodePod) -> dict:
    """The select init container's termination message: which copy the engine reads."""
    for status in pod.manifest()["status"]["initContainerStatuses"]:
        message = get_path(status, "state.terminated.message", "")
        if status["name"] == "select" and message:
            with contextlib.suppress(ValueError):
                return json.loads(message)
    return {}


def replica_pods(clusters: dict[str, Cluster]) -> list[tuple[str, NodePod]]:
    """(cluster, pod) of every engine pod of the act's replicas (not the cache's images
    reporter, also a Deployment)."""
    return [(name, pod) for name in CLUSTERS for (kind, ns, _), pods in
            sorted(clusters[name].pods.items())
            if kind == "Deployment" and ns == NAMESPACE for pod in pods
            if pod.labels.get(naming.LABEL_COMPONENT) == "engine"]


# --- the story ------------------------------------------------------------------------------


class Printer:
    """Prints the node-count table whenever it changed."""

    def __init__(self, stage: Stage):
        self.stage = stage
        self.last: list[str] = []

    def __call__(self) -> None:
        view = kubectl_table(tier_rows(self.stage))
        if view != self.last:
            self.stage.out(f"  round {self.stage.rounds}")
            for line in view:
                self.stage.out(line)
            self.last = view

    def then(self, done: Callable[[], bool]) -> Callable[[], bool]:
        """`done` for Stage.until, each check after printing the table if it changed."""
        def check() -> bool:
            self()
            return done()
        return check


def all_warm(stage: Stage, cluster: str, nodes: int) -> bool:
    tier = node_tier(stage, cluster)
    return tier.get("phase") == "Ready" and tier.get("desiredNodes") == nodes == \
        tier.get("readyNodes")


def converge(stage: Stage, fleet: Fleet, show: Printer) -> list[str]:
    opted = sum(1 for _, labels, cp in NODES if not cp and OPT_IN_KEY in labels)
    stage.out(f"\nnode tier: ModelCache {NAMESPACE}/{CACHE} on storage tier Node, placed on "
              f"{' and '.join(CLUSTERS)}; each cluster has {len(NODES)} nodes: "
              f"{opted} GPU nodes opted in, 1 GPU node not opted in, 1 control-plane node")
    problem = stage.until(show.then(lambda: all(all_warm(stage, c, opted) and images_warm(stage, c, opted)
                                                for c in CLUSTERS)),
                          "every opted-in node to hold the commit and the engine image")
    if problem:
        return [problem]
    show()
    label = node_tier(stage, CLUSTERS[0]).get("labelKey", "")
    stage.out(f"\n$ kubectl get nodes -L {OPT_IN_KEY},{label}   # on {CLUSTERS[0]}")
    for line in kubectl_table(node_rows(fleet, CLUSTERS[0], label)):
        stage.out(line)
    return []


def churn(stage: Stage, fleet: Fleet, show: Printer) -> list[str]:
    """A node joins the pool and is warmed from the volume (the Hub counter stands still);
    while it warms, another node is removed and stops counting at once."""
    cluster, hub = fleet.clusters[CHURN_CLUSTER], fleet.hubs[CHURN_CLUSTER]
    before = (hub.bytes_sent(), len(hub.requests()))
    cluster.label_node(JOINING, dict(OPT_IN))
    stage.out(f"\n{CHURN_CLUSTER}: node {JOINING} opts in (kubectl label node {JOINING} "
              f"{OPT_IN_KEY}={OPT_IN_VALUE}); Hub counter {quantities.human_bytes(before[0])}")
    problem = stage.until(show.then(lambda: node_tier(stage, CHURN_CLUSTER).get(
        "desiredNodes") == 3), f"{JOINING} to count")
    if problem:
        return [problem]
    cluster.remove_node(LEAVING)
    stage.out(f"{CHURN_CLUSTER}: node {LEAVING} is removed (kubectl delete node {LEAVING}) "
              f"while {JOINING} warms")
    problem = stage.until(show.then(lambda: all_warm(stage, CHURN_CLUSTER, 2)
                                    and images_warm(stage, CHURN_CLUSTER, 2)),
                          f"{JOINING} to hold the commit and the engine image and {LEAVING} to stop counting")
    if problem:
        return [problem]
    show()
    after = (hub.bytes_sent(), len(hub.requests()))
    stage.out(f"  {JOINING} warmed from the cluster volume: Hub counter "
              f"{quantities.human_bytes(after[0])}, {after[1] - before[1]} requests since it joined")
    if after != before:
        return [f"{CHURN_CLUSTER}: the Hub served {after[0] - before[0]} bytes in "
                f"{after[1] - before[1]} requests while {JOINING} warmed"]
    return []


def serve(stage: Stage, fleet: Fleet) -> list[str]:
    """Replicas with delivery node Prefer land on warm nodes and read the node copy; on the
    churned cluster that is the node that joined, the other warm one being cordoned."""
    fleet.clusters[CHURN_CLUSTER].cordon_node(STAYING)
    stage.out(f"\n{CHURN_CLUSTER}: kubectl cordon {STAYING}, so its replica goes to {JOINING}, the node that joined")
    stage.control.apply(model_deployment(fleet.engine_image))
    stage.out(f"ModelDeployment {CACHE}: {len(CLUSTERS)} replicas, delivery.node.policy Prefer")

    def placed() -> bool:
        pods = replica_pods(fleet.clusters)
        deployment = stage.control.xrs.get(("ModelDeployment", NAMESPACE, CACHE), {})
        return len(pods) == len(CLUSTERS) and all(
            pod.ready and selected(pod).get("delivery") == "node" for _, pod in pods) and all(
            r["spec"]["delivery"] == "Node" and get_path(r, "status.phase") == "Ready"
            and get_path(r, "status.engineImage") == "Warm"
            for r in stage.control.of_kind("ModelReplica")
            if r["metadata"]["namespace"] == NAMESPACE) and \
            get_path(deployment, "status.summary") == f"{len(CLUSTERS)}/{len(CLUSTERS)}"

    problem = stage.until(placed, "the replicas to run on warm nodes from the node copy")
    if problem:
        return [problem]
    rows = [["CLUSTER", "POD", "NODE", "NODE WARM", "SELECT", "FLEETCACHE_MODEL READS", "ENGINE PULLED"]]
    problems = []
    for name, pod in replica_pods(fleet.clusters):
        pulled = engine_pulls(fleet.clusters[name], pod)
        cluster = fleet.clusters[name]
        label = node_tier(stage, name).get("labelKey", "")
        node = cluster.nodes[pod.node]
        model = Path(pod.containers[0].env.get("FLEETCACHE_MODEL", ""))
        reads = os.path.realpath(model)
        rows.append([name, pod.name, pod.node, node.labels.get(label, "no")[:10],
                     f"{selected(pod).get('delivery')} ({selected(pod).get('reason')})",
                     f"{pod.node}:/{os.path.relpath(reads, node.disk)}".replace(
                         model.name, model.name[:10]), "yes" if pulled else "no"])
        if pulled:
            problems.append(f"{name}: the replica's pod on {pod.node} pulled its engine image ({pulled[0]})")
        if "@sha256:" not in pod.containers[0].spec.get("image", ""):
            problems.append(f"{name}: the engine runs {pod.containers[0].spec.get('image')}, not the pinned digest")
        if not reads.startswith(str(node.host(CACHE_PATH))) or \
                not (model / "config.json").is_file():
            problems.append(f"{name}: the replica's FLEETCACHE_MODEL resolves to {reads}, "
                            f"not into {pod.node}'s copy")
    for line in kubectl_table(rows):
        stage.out(line)
    return problems


def engine_pulls(cluster: Cluster, pod: NodePod) -> list[str]:
    """The kubelet's Pulling events about the pod (none when its image was on the node)."""
    return [obj.get("message", "") for (kind, namespace, _), obj in sorted(cluster.objects.items())
            if kind == "Event" and namespace == NAMESPACE and obj.get("reason") == "Pulling"
            and get_path(obj, "involvedObject.name") == pod.name]


def fresh_node_wait(stage: Stage, fleet: Fleet) -> list[str]:
    """What the joining node's keeper pulled before the replica came, what the replica's pod
    found there, and so what a replica on a fresh node waits with and without it warmed."""
    cluster = fleet.clusters[CHURN_CLUSTER]
    events = [obj for (kind, _, _), obj in sorted(cluster.objects.items()) if kind == "Event"]
    kept = [e.get("message", "") for e in events if e.get("reason") == "Pulled"
            and get_path(e, "source.host") == JOINING and ENGINE_REPOSITORY in e.get("message", "")
            and e.get("message", "").startswith("Successfully pulled")]
    replica = next((pod.name for name, pod in replica_pods(fleet.clusters)
                    if name == CHURN_CLUSTER and pod.node == JOINING), "")
    found = [e.get("message", "") for e in events if e.get("reason") == "Pulled"
             and get_path(e, "involvedObject.name") == replica]
    stage.out(f"\nengine image: {quantities.human_bytes(ENGINE_BYTES)} (simulated), pulled by each node "
              f"at {quantities.human_bytes(PULL_BANDWIDTH)}/s here (compressed).\n"
              f"  {JOINING}'s keeper, when the node joined: {kept[0] if kept else 'no pull seen'}\n"
              f"  the replica's pod on {JOINING}: {found[0] if found else 'no pull event'}")
    stage.out(f"  a replica on a fresh node waits for the engine image: "
              f"{ENGINE_BYTES / REAL_BANDWIDTH:.0f} s at {quantities.human_bytes(REAL_BANDWIDTH)}/s without it warmed, "
              "0 s with it")
    if not kept:
        return [f"{CHURN_CLUSTER}: no Pulled event of the engine image on {JOINING}"]
    if not replica or not found or not found[0].endswith("already present on machine"):
        return [f"{CHURN_CLUSTER}: the replica on {JOINING} did not find the engine image there "
                f"({found[0] if found else 'no replica or no event'})"]
    return []


def columns(stage: Stage) -> list[str]:
    """What `kubectl get` shows of the node tier: the ModelCache's NODES, each
    FleetCluster's NODE-CACHE, and the replicas' DELIVERY."""
    control = stage.control
    cache = control.xrs.get(("ModelCache", NAMESPACE, CACHE), {}).get("status", {})
    tables = {
        f"modelcache -n {NAMESPACE} {CACHE}": [
            ["NAME", "CLUSTERS", "SIZE", "NODES", "IMAGES"],
            [CACHE, cache.get("summary", ""), cache.get("sizeHuman", ""),
             get_path(cache, "nodeTier.summary", "<none>"), cache.get("imagesSummary", "<none>")]],
        f"fleetcluster {' '.join(CLUSTERS)}": [["NAME", "NODE-CACHE"]] + [
            [name, get_path(control.xrs.get(("FleetCluster", "", name), {}),
                                "status.nodeCache.summary", "<none>")] for name in CLUSTERS],
        f"modelreplica -n {NAMESPACE}": [["NAME", "CLUSTER", "DELIVERY", "PHASE", "ENGINE-IMAGE"]] + [
            [r["metadata"]["name"], r["spec"]["clusterName"], r["spec"]["delivery"],
             get_path(r, "status.phase", ""), get_path(r, "status.engineImage", "")]
            for r in control.of_kind("ModelReplica")
            if r["metadata"]["namespace"] == NAMESPACE]}
    for command, rows in tables.items():
        stage.out(f"\n$ kubectl get {command}")
        for line in kubectl_table(rows):
            stage.out(line)
    return []


def origin_bytes(stage: Stage, fleet: Fleet) -> list[str]:
    rows = [["CLUSTER", "HUB BYTES READ", "MODEL", "NODES WARM"]]
    problems = []
    for name in CLUSTERS:
        read = fleet.hubs[name].bytes_sent()
        rows.append([name, quantities.human_bytes(read), quantities.human_bytes(fleet.model_bytes),
                     str(node_tier(stage, name).get("readyNodes", 0))])
        if not fleet.model_bytes <= read <= ORIGIN_SLACK * fleet.model_bytes:
            problems.append(f"{name}: read {read} bytes from the Hub, expected one model "
                            f"({fleet.model_bytes})")
    stage.out("\nBytes each cluster read from the Hub (one origin download per cluster):")
    for line in kubectl_table(rows):
        stage.out(line)
    return problems


def add_clusters(stage: Stage, hubs: dict[str, TestHub], registry: str, root: Path) -> Fleet:
    model = make_model(max(stage.model_bytes // 6, 2 * 2**20), shards=2, seed=11)
    for hub in hubs.values():
        hub.add_repo(REPO, dict(model))
    Pusher(registry).push_sim_image(ENGINE_REPOSITORY, ENGINE_TAG, size=ENGINE_BYTES,
                                    executables=("vllm", "python3"), entrypoint=("vllm", "serve"))
    engine_image = f"{registry}/{ENGINE_REPOSITORY}:{ENGINE_TAG}"
    for name in CLUSTERS:
        cluster = Cluster(name, root / name, hubs[name].endpoint)
        for node, labels, control_plane in NODES:
            cluster.add_node(node, labels, control_plane=control_plane,
                             filesystems=(CACHE_PATH,), pull_bandwidth=str(PULL_BANDWIDTH))
        stage.clusters[name] = cluster
        stage.control.apply(fleet_cluster(name))
    stage.control.apply(grant())
    stage.control.apply(model_cache(hubs[CLUSTERS[0]].endpoint, engine_image))
    return Fleet({n: stage.clusters[n] for n in CLUSTERS}, hubs,
                 sum(c.size for c in model.values()), engine_image)


def play(demo: Stage, root: Path) -> list[str]:
    """The act in order on the demo's control plane and fleet (its composites pass the same
    `on_composite` as the earlier acts'); its clusters join the fleet and stop with it. A
    later step only plays on a fleet the earlier one left right."""
    stage = dataclasses.replace(demo, hubs=(), namespace=NAMESPACE, cache=CACHE, repo=REPO,
                                healthy=CLUSTERS, rounds=0)
    with contextlib.ExitStack() as stack:
        hubs = {name: stack.enter_context(TestHub()) for name in CLUSTERS}
        try:
            registry = stack.enter_context(loopback_registry())
        except RuntimeError as err:  # docker-registry missing and not installable, or not starting
            return [f"the node tier act's registry: {err}"]

        def stop_clusters() -> None:
            for name in CLUSTERS:
                if name in stage.clusters:
                    stage.clusters[name].stop()

        stack.callback(stop_clusters)
        fleet = add_clusters(stage, hubs, registry, root)
        show = Printer(stage)
        for step in (lambda: converge(stage, fleet, show), lambda: churn(stage, fleet, show),
                     lambda: serve(stage, fleet), lambda: columns(stage),
                     lambda: origin_bytes(stage, fleet), lambda: fresh_node_wait(stage, fleet)):
            problems = step()
            if problems:
                return problems
        return []
