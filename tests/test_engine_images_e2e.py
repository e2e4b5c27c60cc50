"""Engine images kept on the pool (issue 23 items 1-3, design/engine-images.md) end to end on
two simulated clusters with nodes: `keep-cmd`, whose runtime mounts no image volumes (each
keeper pod runs the image's command behind a warm slot), and `keep-vol`, which declares
spec.features.imageVolumes (the keeper mounts the image). A ModelCache names an 8 GiB engine
image by tag in a docker-registry on loopback: it resolves once to the registry's digest, every
opted-in pool node of both clusters pulls it at 100 MiB/s of the simulated clock and keeps it,
a replica of a ModelDeployment of that engine runs the digest and says Warm, a fresh node is
warm before any replica lands there, the kubelet's image GC under disk pressure takes only what
no keeper keeps, and an image leaving spec.images goes at the next GC pass. A digest the
registry does not have fails on both clusters' keepers (ErrImagePull) and is counted; an image
without a command is refused where nothing can mount it and kept where something can.

Real function server over gRPC, real agents (resolve-images Job, image-slot, image-keep,
image-status), `docker-registry` on loopback (tests/support/registry.py), fleetcache.simulation
for Crossplane, the clusters, their kubelets and image stores. One story is played (the
fixture); each test reads one behaviour off what it recorded. `-s` prints the warm-up figure.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fleetcache import reasons
from fleetcache.devtools import render as rendering
from fleetcache.devtools.demo import sources as act
from fleetcache.devtools.demo.stage import Stage
from fleetcache.devtools.simulation import Clock, Cluster
from fleetcache.devtools.simulation.node_images import GcResult
from fleetcache.functions import naming, read
from tests.support.oci_fleet import REPOSITORY, docker_config_secret, fleet_cluster, model_files, oci_cache
from tests.support.plane import control_plane
from tests.support.registry import PASSWORD, USER, LoopbackRegistry

CMD, VOL = "keep-cmd", "keep-vol"  # without and with image volumes
CLUSTERS = (CMD, VOL)
GiB, MiB = 1 << 30, 1 << 20
ENGINE_SIZE, SCRATCH_SIZE, BARE_SIZE = 8 * GiB, GiB // 2, GiB
BANDWIDTH = "100Mi"  # bytes a second each node pulls at
IMAGEFS = "9Gi"  # the engine alone fills 89%: over the GC's high threshold (85%)
SECONDS_PER_ROUND = 10.0
DEADLINE = 120.0  # a hang guard: the story takes well under a minute
ENGINE_REPO, SCRATCH_REPO, BARE_REPO = "engines/vllm", "engines/scratch", "engines/bare"
TAG = "v0.11.0"
NODE_PATH = "/mnt/nvme0"
MISSING_DIGEST = "sha256:" + "0" * 64

ENGINES, BROKEN, BARE = "engines", "broken", "bare"  # the caches
POOL_SELECTOR = {"gpu.fleetcache.dev/class": "standard"}
OPT_IN = {"fleetcache.dev/node-cache": "enabled"}
# (node, labels, control plane): two opted-in pool nodes, one in the pool's selector that did
# not opt in, and a control-plane node that matches and opted in, which the pool excludes.
NODES = (("pool-1", {**POOL_SELECTOR, **OPT_IN}, False),
         ("pool-2", {**POOL_SELECTOR, **OPT_IN}, False),
         ("idle", dict(POOL_SELECTOR), False),
         ("control-plane", {**POOL_SELECTOR, **OPT_IN}, True))
POOL = ("pool-1", "pool-2")
FRESH, COLD = "fresh", "cold"  # nodes joining keep-cmd for the figure: in the pool, and not


def cluster_spec(image_volumes: bool) -> dict:
    return {"cache": {"capacity": "10Gi"},
            "nodeCache": {"nodeSelector": {"matchLabels": dict(POOL_SELECTOR)}, "path": NODE_PATH,
                          "capacityPerNode": "100Gi", "maxConcurrentNodes": 2},
            **({"features": {"imageVolumes": True}} if image_volumes else {})}


def engine_deployment(name: str, cache: str, image: str) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": act.NAMESPACE},
            "spec": {"modelCacheRef": {"name": cache}, "replicas": 1, "maxReplicasPerCluster": 1,
                     "placement": {"clusterNames": [CMD]},
                     "engine": {"image": image, "args": ["--model=$(FLEETCACHE_MODEL)"]}}}


def probe_pod_deployment(name: str, node: str, reference: str) -> dict:
    """A bare engine pod on one node: what a replica landing there needs of the image."""
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "probe"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
                         "containers": [{"name": "engine", "image": reference,
                                         "command": ["vllm", "serve"]}]}}}}


# --- the story ------------------------------------------------------------------------------


@dataclass
class Figure:
    """Seconds of the simulated clock on a node that just joined keep-cmd's pool."""

    keeper_warm: float = 0.0  # from joining until the keeper's pull of the engine is done
    start_warm: float = 0.0  # a pod placed on that node, until its engine image is there
    start_cold: float = 0.0  # the same on a node no keeper runs on (the pod pulls it)


@dataclass
class Story:
    registry_digest: str = ""  # what the registry serves for the engine's tag
    reference: str = ""  # the engine pinned: repo@digest
    cache_images: list = field(default_factory=list)  # the ModelCache's status.images
    summary: str = ""  # its IMAGES column
    resolve_jobs: set = field(default_factory=set)  # (cluster, Job) of every resolve-images Job seen
    hydrations: dict = field(default_factory=dict)  # cluster -> status.images
    holding: dict = field(default_factory=dict)  # cluster -> nodes whose store has the digest
    listed: dict = field(default_factory=dict)  # cluster -> nodes listing it in node.status.images
    keeper_shape: dict = field(default_factory=dict)  # cluster -> (init containers, image volumes)
    replica: dict = field(default_factory=dict)  # the ModelReplica on keep-cmd
    engine_image: str = ""  # what its engine Deployment runs
    figure: Figure = field(default_factory=Figure)
    gc_pressure: GcResult = field(default_factory=GcResult)  # pool-1, kept engine + a scratch image
    after_pressure: set = field(default_factory=set)  # image IDs on pool-1 after it
    engine_id: str = ""
    scratch_id: str = ""
    keeper_after_removal: bool = True  # the engines keeper DaemonSet still exists on keep-cmd
    gc_after_removal: GcResult = field(default_factory=GcResult)
    broken: dict = field(default_factory=dict)  # cluster -> the broken cache's hydration status.images
    broken_summary: str = ""
    bare: dict = field(default_factory=dict)  # cluster -> the bare cache's hydration status.images
    bare_on_vol: set = field(default_factory=set)  # keep-vol nodes holding the bare image
    seconds: float = 0.0


class Fleet:
    def __init__(self, stage: Stage, registry: LoopbackRegistry):
        self.stage, self.registry = stage, registry
        self.control, self.clusters = stage.control, stage.clusters
        self.resolve_jobs: set = set()

    def round(self) -> None:
        self.stage.round()
        for name, cluster in self.clusters.items():
            self.resolve_jobs |= {(name, key) for key in cluster.objects
                                  if key[0] == "Job" and "image-resolve" in key[2]}

    def until(self, done, what: str) -> None:
        while not done():
            assert time.monotonic() < self.stage.deadline, f"timed out waiting for {what}: {self.state()}"
            self.round()

    def state(self) -> str:
        """What a timeout shows: the caches' and hydrations' image statuses, the clusters' pods."""
        lines = [f"{c['metadata']['name']}: {read.get_path(c, 'status.images')} "
                 f"{read.get_path(c, 'status.imagesSummary')} {read.get_path(c, 'status.reason')}"
                 for c in self.control.of_kind("ModelCache")]
        lines += [f"{h['metadata']['name']}: {read.get_path(h, 'status.images')}"
                  for h in self.control.of_kind("ModelCacheHydration")]
        lines += [f"composed {key[2]}: {sorted(names)}" for key, names in self.control.composed.items()
                  if key[0] == "ModelCacheHydration"]
        for name, cluster in self.clusters.items():
            lines += [f"{name} {kind} {obj_name}: {read.get_path(obj, 'status')}"
                      for (kind, _, obj_name), obj in cluster.objects.items()
                      if kind in ("Job", "Pod", "DaemonSet")]
        return "\n".join(lines)

    def cache(self, name: str) -> dict:
        return act.status_of(self.control, name)

    def images_status(self, cache: str, cluster: str) -> dict:
        return read.get_path(act.hydration_of(self.control, cache, cluster), "status.images", {}) or {}

    def warm(self, cache: str, cluster: str, nodes: int) -> bool:
        status = self.images_status(cache, cluster)
        return status.get("reason") == reasons.ImagesWarm and status.get("ready") == nodes

    def holders(self, cluster: str, reference: str) -> set[str]:
        return {name for name, node in self.clusters[cluster].nodes.items() if node.images.find(reference)}

    def listing(self, cluster: str, reference: str) -> set[str]:
        return {name for (kind, _, name), node in self.clusters[cluster].objects.items() if kind == "Node"
                and any(reference in i["names"] for i in read.get_path(node, "status.images", []) or [])}

    def keeper(self, cluster: str, cache: str) -> dict | None:
        return self.clusters[cluster].objects.get(("DaemonSet", act.NAMESPACE, f"{cache}-images"))

    def replica(self, deployment: str) -> dict:
        return next((r for r in self.control.of_kind("ModelReplica")
                     if read.get_path(r, "spec.deploymentName") == deployment), {})

    def engine_pod_image(self, deployment: str) -> str:
        for (kind, _, _), obj in self.clusters[CMD].objects.items():
            labels = read.get_path(obj, "metadata.labels", {}) or {}
            if kind == "Deployment" and labels.get(f"{naming.GROUP}/model-deployment") == deployment:
                return obj["spec"]["template"]["spec"]["containers"][0]["image"]
        return ""

    def started_after(self, cluster: str, name: str, node: str, reference: str) -> float:
        """Seconds of the clock from placing a probe pod on `node` until its engine container
        started (its image on the node)."""
        target = self.clusters[cluster]
        target.apply(probe_pod_deployment(name, node, reference))
        placed = self.stage.clock.seconds()

        def started() -> bool:
            pods = target.pods.get(("Deployment", "probe", name), [])
            return any(pod.containers and pod.containers[0].started for pod in pods)

        self.until(started, f"the probe pod on {node} to start")
        seconds = self.stage.clock.seconds() - placed
        target.delete(("Deployment", "probe", name))
        return seconds


def play(fleet: Fleet, story: Story) -> None:
    control, registry, clock = fleet.control, fleet.registry, fleet.stage.clock
    engine_tag = f"{registry.host}/{ENGINE_REPO}:{TAG}"

    # 1-2. the engine image by tag, on both clusters' pools
    control.apply(oci_cache(ENGINES, registry, CLUSTERS, spec={"images": [
        {"image": engine_tag, "command": ["vllm", "serve", "--help=all"]}]}))
    fleet.until(lambda: all(fleet.warm(ENGINES, c, len(POOL)) for c in CLUSTERS),
                "both pools to hold the engine image")
    fleet.round()  # the ModelCache reads what its hydrations reported last
    story.cache_images = copy.deepcopy(fleet.cache(ENGINES)["images"])
    story.summary = fleet.cache(ENGINES)["imagesSummary"]
    story.reference = f"{registry.host}/{ENGINE_REPO}@{story.cache_images[0]['digest']}"
    for cluster in CLUSTERS:
        story.hydrations[cluster] = copy.deepcopy(fleet.images_status(ENGINES, cluster))
        story.holding[cluster] = fleet.holders(cluster, story.reference)
        story.listed[cluster] = fleet.listing(cluster, story.reference)
        pod = fleet.keeper(cluster, ENGINES)["spec"]["template"]["spec"]
        story.keeper_shape[cluster] = ([c["name"] for c in pod.get("initContainers", [])],
                                       [v["image"]["reference"] for v in pod["volumes"] if "image" in v])

    # 7. a replica of the engine on keep-cmd
    control.apply(engine_deployment("chat", ENGINES, engine_tag))
    fleet.until(lambda: read.get_path(fleet.replica("chat"), "status.engineImage") == "Warm"
                and fleet.engine_pod_image("chat"), "the replica to be Warm")
    story.replica = copy.deepcopy(fleet.replica("chat"))
    story.engine_image = fleet.engine_pod_image("chat")

    # 8. a fresh node joins keep-cmd's pool, and one no keeper runs on
    cmd = fleet.clusters[CMD]
    cmd.add_node(FRESH, {**POOL_SELECTOR, **OPT_IN}, pull_bandwidth=BANDWIDTH, imagefs=IMAGEFS,
                 filesystems=(NODE_PATH,))
    joined = clock.seconds()
    fleet.until(lambda: FRESH in fleet.holders(CMD, story.reference), "the fresh node's keeper to pull")
    story.figure.keeper_warm = clock.seconds() - joined
    story.figure.start_warm = fleet.started_after(CMD, "warm-probe", FRESH, story.reference)
    cmd.add_node(COLD, {"gpu.fleetcache.dev/class": "spare"}, pull_bandwidth=BANDWIDTH, imagefs=IMAGEFS)
    story.figure.start_cold = fleet.started_after(CMD, "cold-probe", COLD, story.reference)
    for joined_node in (FRESH, COLD):  # the pool is back to its two nodes
        cmd.remove_node(joined_node)

    # 3. disk pressure on pool-1: an image no pod keeps beside the kept engine
    node = cmd.nodes["pool-1"]
    scratch = f"{registry.host}/{SCRATCH_REPO}:v1"
    node.images.finish(node.images.pull(scratch, clock.seconds()))  # a pod that pulled it is gone
    story.engine_id = node.images.find(story.reference).id
    story.scratch_id = node.images.find(scratch).id
    clock.advance(datetime.timedelta(minutes=3))  # both older than the GC's MinAge (2 min)
    story.gc_pressure = cmd.image_gc("pool-1")
    story.after_pressure = set(node.images.images)

    # 4. the engine leaves spec.images: its keeper goes, then the next GC pass takes it
    control.apply(oci_cache(ENGINES, registry, CLUSTERS))
    fleet.until(lambda: fleet.keeper(CMD, ENGINES) is None, "the keeper to go")
    story.keeper_after_removal = fleet.keeper(CMD, ENGINES) is not None
    control.delete(("ModelDeployment", act.NAMESPACE, "chat"))  # its engine pod uses the image too
    fleet.until(lambda: not any(key[0] == "Deployment" and "chat" in key[2] for key in cmd.objects),
                "the replica's engine to go")
    fleet.round()
    story.gc_after_removal = cmd.image_gc("pool-1")

    # 5-6. a digest the registry does not have; an image without a command
    control.apply(oci_cache(BROKEN, registry, CLUSTERS, spec={"images": [
        {"image": f"{registry.host}/{ENGINE_REPO}@{MISSING_DIGEST}", "command": ["vllm", "--version"]}]}))
    control.apply(oci_cache(BARE, registry, CLUSTERS, spec={"images": [
        {"image": f"{registry.host}/{BARE_REPO}:v1"}]}))
    fleet.until(lambda: all(fleet.images_status(BROKEN, c).get("failed") == len(POOL) for c in CLUSTERS)
                and fleet.warm(BARE, VOL, len(POOL))
                and fleet.images_status(BARE, CMD).get("reason") == reasons.ImageCommandRequired,
                "the broken image to fail on both clusters and the bare one to settle")
    fleet.round()
    story.broken = {c: copy.deepcopy(fleet.images_status(BROKEN, c)) for c in CLUSTERS}
    story.broken_summary = fleet.cache(BROKEN).get("imagesSummary", "")
    story.bare = {c: copy.deepcopy(fleet.images_status(BARE, c)) for c in CLUSTERS}
    bare_digest = fleet.cache(BARE)["images"][0]["digest"]
    story.bare_on_vol = fleet.holders(VOL, f"{registry.host}/{BARE_REPO}@{bare_digest}")
    story.resolve_jobs = set(fleet.resolve_jobs)


@contextlib.contextmanager
def fleet_on(registry: LoopbackRegistry, root: Path) -> Iterator[Fleet]:
    """keep-cmd and keep-vol with their nodes, granted, on a real function server."""
    with rendering.function_process() as address, rendering.channel_to(address) as channel:
        clock = Clock(seconds_per_round=SECONDS_PER_ROUND)
        clusters = {name: Cluster(name, root / name, clock=clock) for name in CLUSTERS}
        for cluster in clusters.values():
            for node, labels, runs_control_plane in NODES:
                cluster.add_node(node, labels, control_plane=runs_control_plane, pull_bandwidth=BANDWIDTH,
                                 imagefs=IMAGEFS, filesystems=(NODE_PATH,))
        control = control_plane(channel, clusters)
        stage = Stage(control, clusters, (), clock, act.NAMESPACE, "", "", 0, CLUSTERS, 0.05,
                      time.monotonic() + DEADLINE, lambda line: None)
        try:
            for name in CLUSTERS:
                control.apply(fleet_cluster(name, **cluster_spec(name == VOL)))
            control.apply(act.grant(CLUSTERS))
            yield Fleet(stage, registry)
        finally:
            for cluster in clusters.values():
                cluster.stop()


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> Story:
    told = Story()
    started = time.monotonic()
    with LoopbackRegistry() as registry:
        registry.push_modelpack(REPOSITORY, "v1", model_files(11))
        told.registry_digest = registry.push_sim_image(
            ENGINE_REPO, TAG, size=ENGINE_SIZE, executables=["vllm", "python3"], entrypoint=["vllm", "serve"])
        registry.push_sim_image(SCRATCH_REPO, "v1", size=SCRATCH_SIZE, executables=["sh"])
        registry.push_sim_image(BARE_REPO, "v1", size=BARE_SIZE, executables=["sh"])
        with fleet_on(registry, tmp_path_factory.mktemp("engine-images")) as fleet:
            play(fleet, told)
    told.seconds = time.monotonic() - started
    print(f"\nengine image {ENGINE_SIZE // GiB} GiB, node pull bandwidth {BANDWIDTH}B/s "
          f"({SECONDS_PER_ROUND:g} s of the simulated clock a round):\n"
          f"  a node joining the pool holds it after {told.figure.keeper_warm:.0f} s (its keeper's pull);\n"
          f"  a replica pod placed there then finds it within {told.figure.start_warm:.0f} s;\n"
          f"  a replica pod on a node no keeper runs on waits {told.figure.start_cold:.0f} s "
          f"for its own pull\n  (story: {told.seconds:.1f} s of wall time)")
    return told


# --- 1. one digest for the fleet, on every opted-in pool node of both shapes ----------------


def test_the_tag_resolves_once_to_the_digest_the_registry_serves(story):
    assert [row["digest"] for row in story.cache_images] == [story.registry_digest]
    assert len([job for _, job in story.resolve_jobs if job[2].startswith(f"{ENGINES}-")]) == 1


def test_every_opted_in_pool_node_of_both_clusters_holds_the_digest(story):
    assert story.holding == {CMD: set(POOL), VOL: set(POOL)}


def test_the_nodes_list_the_digest_in_node_status_images(story):
    assert story.listed == {CMD: set(POOL), VOL: set(POOL)}


def test_the_keeper_runs_the_command_behind_a_slot_without_image_volumes_and_mounts_it_with(story):
    assert story.keeper_shape == {CMD: (["slot", "pull-0"], []), VOL: ([], [story.reference])}


# --- 2. status: the hydrations and the IMAGES column -------------------------------------------


def test_each_hydration_says_its_pool_holds_the_images(story):
    for cluster in CLUSTERS:
        status = story.hydrations[cluster]
        assert (status["ready"], status["desired"], status["failed"]) == (len(POOL), len(POOL), 0)
        assert (status["reason"], status["summary"]) == (reasons.ImagesWarm, "2/2")


def test_the_model_caches_images_column_sums_both_clusters(story):
    assert story.summary == "1 image 4/4"
    assert [(row["readyNodes"], row["desiredNodes"]) for row in story.cache_images] == [(4, 4)]


# --- 7. a replica of the engine ------------------------------------------------------------------


def test_a_replica_of_the_kept_engine_says_warm_and_runs_the_fleets_digest(story):
    assert story.replica["status"]["engineImage"] == "Warm"
    assert story.replica["spec"]["engineImage"] == {"reference": story.reference, "modelCacheName": ENGINES,
                                                    "warm": True}
    assert story.engine_image == story.reference


# --- 8. the figure: a node joining the pool ------------------------------------------------------


def test_a_node_joining_the_pool_holds_the_engine_before_a_replica_needs_it(story):
    pull = ENGINE_SIZE / (100 * MiB)  # 82 s at 100 MiB/s
    assert pull <= story.figure.keeper_warm <= pull + 4 * SECONDS_PER_ROUND
    assert story.figure.start_warm <= SECONDS_PER_ROUND
    assert story.figure.start_cold >= pull


# --- 3-4. what the kubelet's image GC takes ------------------------------------------------------


def test_gc_under_disk_pressure_removes_an_unkept_image_and_keeps_the_kept_one(story):
    assert story.gc_pressure.removed == [story.scratch_id]
    assert story.engine_id in story.after_pressure and story.scratch_id not in story.after_pressure


def test_an_image_leaving_spec_images_loses_its_keeper_and_goes_at_the_next_gc_pass(story):
    assert not story.keeper_after_removal
    assert story.gc_after_removal.removed == [story.engine_id]


# --- 5. an image the registry does not have -----------------------------------------------------


def test_a_digest_the_registry_lacks_fails_on_every_pool_node_of_both_shapes(story):
    for cluster in CLUSTERS:
        status = story.broken[cluster]
        assert (status["failed"], status["ready"], status["reason"]) == (len(POOL), 0, reasons.ImagePullFailed)
        failure = status["firstFailure"]
        assert failure["node"] == "pool-1"
        assert failure["reason"] in ("ErrImagePull", "ImagePullBackOff")
        assert MISSING_DIGEST[:20] in failure["message"]


def test_the_model_caches_images_column_counts_the_failures(story):
    assert story.broken_summary == "1 image 0/4 (4 failed)"


# --- 6. an image without a command ---------------------------------------------------------------


def test_an_image_without_a_command_is_refused_where_nothing_can_mount_it(story):
    status = story.bare[CMD]
    assert (status["reason"], status["desired"]) == (reasons.ImageCommandRequired, 0)
    assert "spec.images[0].command" in status["message"]


def test_an_image_without_a_command_is_kept_where_the_runtime_mounts_it(story):
    assert (story.bare[VOL]["reason"], story.bare[VOL]["ready"]) == (reasons.ImagesWarm, len(POOL))
    assert story.bare_on_vol == set(POOL)


def test_the_story_stays_within_its_budget(story):
    assert story.seconds < 75


# --- 9. a private registry: spec.images[].pullSecretRef ------------------------------------------

PRIVATE = "private"  # the cache of the engine in a registry that wants credentials
ANONYMOUS = "anonymous"  # the same engine named without its pull secret


@dataclass
class PrivateStory:
    registry_digest: str = ""
    cache_images: list = field(default_factory=list)
    holding: dict = field(default_factory=dict)  # cluster -> nodes whose store has the digest
    pull_secrets: dict = field(default_factory=dict)  # cluster -> the keeper's imagePullSecrets
    copies: dict = field(default_factory=dict)  # cluster -> (type, keys) of the keeper's pull secret copy
    resolve_mounts: list = field(default_factory=list)  # the resolve-images Job's --registry-config flags
    composites: list = field(default_factory=list)  # every composite, spec and status, as JSON
    secret_data: str = ""  # the user's Secret's .dockerconfigjson, as stored
    anonymous_summary: str = ""  # the IMAGES column of the cache that names no pull secret


@pytest.fixture(scope="module")
def private_story(tmp_path_factory) -> PrivateStory:
    """The engine in a registry that answers only with credentials: the ModelCache names a
    kubectl-made docker-registry Secret for its model and its image."""
    told = PrivateStory()
    with LoopbackRegistry(users={USER: PASSWORD}) as registry:
        registry.push_modelpack(REPOSITORY, "v1", model_files(12))
        told.registry_digest = registry.push_sim_image(
            ENGINE_REPO, TAG, size=ENGINE_SIZE, executables=["vllm"], entrypoint=["vllm", "serve"])
        with fleet_on(registry, tmp_path_factory.mktemp("private-images")) as fleet:
            control = fleet.control
            control.apply(docker_config_secret("regcred", registry.host, USER, PASSWORD))
            control.apply(oci_cache(PRIVATE, registry, CLUSTERS, pullSecretRef={"name": "regcred"}, spec={
                "images": [{"image": f"{registry.host}/{ENGINE_REPO}:{TAG}", "command": ["vllm", "--version"],
                            "pullSecretRef": {"name": "regcred"}}]}))

            def resolving_job() -> None:
                for cluster in fleet.clusters.values():
                    for (kind, _, name), obj in cluster.objects.items():
                        if kind == "Job" and "image-resolve" in name and not told.resolve_mounts:
                            args = obj["spec"]["template"]["spec"]["containers"][0]["args"]
                            told.resolve_mounts = [a for i, a in enumerate(args) if args[i - 1] == "--registry-config"]

            fleet.until(lambda: (resolving_job(), all(fleet.warm(PRIVATE, c, len(POOL)) for c in CLUSTERS))[1],
                        "both pools to hold the private engine image")
            fleet.round()
            told.cache_images = copy.deepcopy(fleet.cache(PRIVATE)["images"])
            reference = f"{registry.host}/{ENGINE_REPO}@{told.cache_images[0]['digest']}"
            for name, cluster in fleet.clusters.items():
                told.holding[name] = fleet.holders(name, reference)
                pod = fleet.keeper(name, PRIVATE)["spec"]["template"]["spec"]
                told.pull_secrets[name] = pod.get("imagePullSecrets", [])
                copy_of = cluster.objects.get(("Secret", act.NAMESPACE, f"{PRIVATE}-images-pull-0"), {})
                told.copies[name] = (copy_of.get("type"), sorted(copy_of.get("data") or {}))
            control.apply(oci_cache(ANONYMOUS, registry, CLUSTERS, pullSecretRef={"name": "regcred"}, spec={
                "images": [{"image": f"{registry.host}/{ENGINE_REPO}:{TAG}", "command": ["vllm", "--version"]}]}))
            fleet.until(lambda: fleet.cache(ANONYMOUS).get("imagesSummary", "").startswith("resolve failed"),
                        "the image named without its pull secret to fail to resolve")
            told.anonymous_summary = fleet.cache(ANONYMOUS)["imagesSummary"]
            told.composites = [json.dumps(obj, sort_keys=True) for obj in control.xrs.values()]
            told.secret_data = control.others[("Secret", act.NAMESPACE, "regcred")]["data"][".dockerconfigjson"]
    return told


def test_a_private_image_resolves_with_its_pull_secret_to_the_registrys_digest(private_story):
    assert [row["digest"] for row in private_story.cache_images] == [private_story.registry_digest]
    assert len(private_story.resolve_mounts) == 1


def test_a_private_image_named_without_its_pull_secret_shows_auth_failed_in_the_images_column(private_story):
    assert private_story.anonymous_summary == "resolve failed (AuthFailed)"


def test_every_opted_in_pool_node_of_both_shapes_pulls_the_private_image(private_story):
    assert private_story.holding == {CMD: set(POOL), VOL: set(POOL)}


def test_each_keeper_pulls_with_a_dockerconfigjson_copy_of_the_pull_secret(private_story):
    for cluster in CLUSTERS:
        assert private_story.pull_secrets[cluster] == [{"name": f"{PRIVATE}-images-pull-0"}]
        assert private_story.copies[cluster] == ("kubernetes.io/dockerconfigjson", [".dockerconfigjson"])


def test_the_registry_credentials_appear_in_no_composites_spec_or_status(private_story):
    config = base64.b64decode(private_story.secret_data).decode()
    auth = json.loads(config)["auths"]
    secrets = [PASSWORD, private_story.secret_data, *(entry["auth"] for entry in auth.values())]
    assert len(private_story.composites) > 3
    assert not [c for c in private_story.composites for secret in secrets if secret in c]
