"""Issue 22, item 3: image-volume delivery end to end on three simulated clusters, two that
declare spec.features.imageVolumes and one that does not. A ModelPack artifact pushed to the
CNCF distribution registry on loopback resolves once; the replicas on the two image-volume
clusters mount it by digest (the simulated kubelet pulls it from the registry and mounts each
layer's file at its path, as CRI-O does), their hydrations warm no PVC and take no room, and
the third cluster's replica mounts its volume. An artifact the kubelet cannot pull (a registry
that wants credentials the engine pod does not have) leaves the engine Deployment not
available until its progress deadline (compressed), and the replica falls back to the volume,
saying why.

Real function server, real agents (resolve and fetch Jobs), `docker-registry` on loopback
(tests/support/registry.py), fleetcache.simulation for Crossplane and the clusters. The fleet
is played once (the `story` fixture); each test reads one behaviour of it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fleetcache import reasons
from fleetcache.devtools.demo import sources as act
from fleetcache.devtools.demo.stage import Stage
from fleetcache.functions import naming, read
from fleetcache.functions.views.model_replica import IMAGE_MOUNT_PATH
from tests.support.oci_fleet import (
    REPOSITORY,
    Engine,
    docker_config_secret,
    engines,
    model_deployment,
    model_files,
    oci_cache,
    simulated_fleet,
)
from tests.support.registry import LoopbackRegistry

IMAGE_CLUSTERS = ("gpu-a", "gpu-b")
VOLUME_CLUSTER = "gpu-c"
CLUSTERS = (*IMAGE_CLUSTERS, VOLUME_CLUSTER)
USER, PASSWORD = "puller", "pull-secret-password"
PUBLIC, PRIVATE = "tiny", "private-tiny"
PULL_SECRET = "regcred"
DEADLINE = 120.0  # a hang guard: the story takes seconds
PUSHED = model_files(7)
IMAGE_VOLUMES = {name: {"cache": {"capacity": "10Gi"}, **({"features": {"imageVolumes": True}}
                                                        if name in IMAGE_CLUSTERS else {})}
                 for name in CLUSTERS}


@dataclass
class Story:
    resolved: dict = field(default_factory=dict)  # the public cache's status.resolved
    placements: dict[str, dict] = field(default_factory=dict)  # by cluster
    replicas: dict[str, Engine] = field(default_factory=dict)  # by cluster
    hydrations: dict[str, dict] = field(default_factory=dict)  # status, by cluster
    claims: dict[str, bool] = field(default_factory=dict)  # the cache PVC exists, by cluster
    capacity: dict[str, dict] = field(default_factory=dict)  # FleetCluster status.cache, by cluster
    served: int = 0  # blob bytes the public registry served (resolve, fetches, pulls)
    fallback: dict = field(default_factory=dict)  # the private deployment's placement
    fallback_replica: dict = field(default_factory=dict)  # its ModelReplica, once back on the volume
    stalled: dict = field(default_factory=dict)  # its ModelReplica while Image timed out
    fallback_env: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def deployment_status(stage: Stage, name: str) -> dict:
    return read.get_path(stage.control.xrs.get(("ModelDeployment", act.NAMESPACE, name), {}), "status", {}) or {}


def replica_of(stage: Stage, deployment: str) -> dict:
    return next((r for r in stage.control.of_kind("ModelReplica")
                 if read.get_path(r, "spec.deploymentName") == deployment), {})


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> Story:
    told = Story()
    started = time.monotonic()
    with LoopbackRegistry() as public, LoopbackRegistry(users={USER: PASSWORD}) as private, \
            simulated_fleet(tmp_path_factory.mktemp("image-volumes"), CLUSTERS, DEADLINE,
                            IMAGE_VOLUMES) as stage:
        control, clusters = stage.control, stage.clusters

        # 1. a public artifact on all three clusters, and a replica on each
        public.push_modelpack(REPOSITORY, "v1", PUSHED)
        control.apply(oci_cache(PUBLIC, public, CLUSTERS))
        control.apply(model_deployment(PUBLIC, PUBLIC, CLUSTERS))
        assert stage.until(lambda: read.get_path(deployment_status(stage, PUBLIC), "replicas.ready")
                           == len(CLUSTERS), "every replica to be ready") == ""
        assert act.settle(stage, PUBLIC, CLUSTERS) == ""
        told.resolved = act.status_of(control, PUBLIC)["resolved"]
        told.placements = {p["cluster"]: p for p in deployment_status(stage, PUBLIC)["placements"]}
        told.replicas = engines(stage, PUBLIC)
        for name in CLUSTERS:
            told.hydrations[name] = read.get_path(act.hydration_of(control, PUBLIC, name), "status", {})
            told.claims[name] = ("PersistentVolumeClaim", act.NAMESPACE,
                                 naming.cache_volume_name(PUBLIC)) in clusters[name].objects
            told.capacity[name] = read.get_path(stage.fleet_cluster(name), "status.cache", {})
        told.served = public.blob_bytes_served()

        # 2. an artifact the kubelet cannot pull (its registry wants credentials the engine
        #    pod does not carry): the replica falls back to the volume
        private.push_modelpack(REPOSITORY, "v1", PUSHED)
        control.apply(docker_config_secret(PULL_SECRET, private.host, USER, PASSWORD))
        control.apply(oci_cache(PRIVATE, private, IMAGE_CLUSTERS[:1], pullSecretRef={"name": PULL_SECRET}))
        control.apply(model_deployment(PRIVATE, PRIVATE, IMAGE_CLUSTERS[:1]))
        assert stage.until(lambda: read.get_path(replica_of(stage, PRIVATE), "status.reason")
                           == reasons.ImageVolumeUnavailable, "the image volume to time out") == ""
        told.stalled = replica_of(stage, PRIVATE)
        assert stage.until(lambda: read.get_path(deployment_status(stage, PRIVATE), "replicas.ready") == 1
                           and read.get_path(replica_of(stage, PRIVATE), "spec.delivery") == "Cache",
                           "the replica to be ready on the volume") == ""
        told.fallback = deployment_status(stage, PRIVATE)["placements"][0]
        told.fallback_replica = replica_of(stage, PRIVATE)
        told.fallback_env = engines(stage, PRIVATE)[IMAGE_CLUSTERS[0]].env
    told.seconds = time.monotonic() - started
    return told


# --- 1. two clusters mount the artifact, the third its volume -------------------------------


def test_replicas_on_image_volume_clusters_are_delivered_the_artifact(story):
    assert {c: story.placements[c]["delivery"] for c in CLUSTERS} == {
        "gpu-a": "Image", "gpu-b": "Image", VOLUME_CLUSTER: "Cache"}
    assert {story.placements[c]["reason"] for c in IMAGE_CLUSTERS} == {str(reasons.ImageVolume)}


def test_an_image_replica_mounts_the_resolved_reference_by_digest_read_only(story):
    for cluster in IMAGE_CLUSTERS:
        pod = story.replicas[cluster].pod
        volume = next(v for v in pod["volumes"] if "image" in v)
        assert volume["image"] == {"reference": story.resolved["reference"], "pullPolicy": "IfNotPresent"}
        mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
        assert mount == {"name": volume["name"], "mountPath": IMAGE_MOUNT_PATH, "readOnly": True}


def test_fleetcache_model_of_an_image_replica_holds_exactly_the_pushed_files(story):
    for cluster in IMAGE_CLUSTERS:
        assert story.replicas[cluster].env["FLEETCACHE_MODEL"] == IMAGE_MOUNT_PATH
        assert story.replicas[cluster].env["FLEETCACHE_DELIVERY"] == "image"
        assert story.replicas[cluster].files == PUSHED


def test_the_replica_on_the_cluster_without_image_volumes_mounts_its_volume(story):
    replica = story.replicas[VOLUME_CLUSTER]
    assert not any("image" in v for v in replica.pod["volumes"])
    assert replica.env["FLEETCACHE_DELIVERY"] == "cache"
    assert replica.files == PUSHED


def test_no_pvc_is_claimed_for_the_cache_on_image_volume_clusters(story):
    assert story.claims == {"gpu-a": False, "gpu-b": False, VOLUME_CLUSTER: True}


def test_an_image_volume_clusters_hydration_is_ready_warming_nothing(story):
    for cluster in IMAGE_CLUSTERS:
        status = story.hydrations[cluster]
        assert (status["phase"], status["reason"]) == ("Ready", str(reasons.ImageVolume))
        assert "volumeName" not in status
    assert story.hydrations[VOLUME_CLUSTER]["reason"] == str(reasons.Hydrated)


def test_an_image_volume_cluster_counts_nothing_against_its_capacity(story):
    for cluster in IMAGE_CLUSTERS:
        cache = story.capacity[cluster]
        assert (cache["usedBytes"], cache["reservedBytes"]) == (0, 0)
        assert cache["admitted"] == []
    assert story.capacity[VOLUME_CLUSTER]["usedBytes"] >= sum(map(len, PUSHED.values()))


def test_the_registry_serves_one_copy_per_volume_and_one_pull_per_image_cluster(story):
    assert story.served == len(CLUSTERS) * sum(map(len, PUSHED.values()))


# --- 2. an artifact that cannot be mounted ------------------------------------------------------


def test_an_image_replica_whose_deployment_times_out_says_the_image_volume_is_unavailable(story):
    status = story.stalled["status"]
    assert story.stalled["spec"]["delivery"] == "Image"
    assert "ErrImagePull" in status["message"] and "401" in status["message"]


def test_an_unmountable_artifact_falls_back_to_the_volume_saying_why(story):
    assert (story.fallback["delivery"], story.fallback["reason"]) == ("Cache", str(reasons.ImageVolumeUnavailable))
    said = story.fallback_replica["spec"]["deliveryReason"]
    assert said.startswith(f"{reasons.ImageVolumeUnavailable}: ") and "could not be mounted" in said


def test_a_fallen_back_replica_loads_from_its_clusters_volume(story):
    assert story.fallback_env["FLEETCACHE_DELIVERY"] == "cache"
    assert story.fallback_replica["status"]["phase"] == "Ready"


def test_the_story_stays_within_its_budget(story):
    assert story.seconds < 60

