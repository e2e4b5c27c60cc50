"""A replica whose engine image its cache keeps on the pool (design/engine-images.md):
compose-model-deployment hands it the image pinned by the fleet's digest and whether every
pool node of its cluster holds it (functions/decisions/engine_image.py); compose-model-replica
runs that digest, prefers the keeper's nodes under a node policy, and says Warm or Cold."""

from __future__ import annotations

from fleetcache.functions import protocol
from fleetcache.functions.composers import model_deployment
from fleetcache.functions.composers import model_replica as replica_composer
from fleetcache.functions.decisions import engine_image
from tests.support.deployments import CACHE, cache_required, cache_row, deployment, replica_xr
from tests.support.fleet import fleet_cluster
from tests.test_model_replica import pod_spec
from tests.test_model_replica_node import compose as compose_node_replica
from tests.test_model_replica_node import node_xr

ENGINE_IMAGE = "vllm/vllm-openai:v0.11.0"  # the engine of tests.support.deployments
DIGEST = "sha256:" + "a" * 64
PINNED = "vllm/vllm-openai@" + DIGEST
FLEET = [fleet_cluster("gpu-a"), fleet_cluster("gpu-b")]


def keeping(required: dict, cluster: str, *, ready: int, desired: int = 3, image: str = ENGINE_IMAGE) -> dict:
    """`required` with `cluster`'s hydration keeping `image`, `ready` of `desired` nodes holding it."""
    for hydration in required[model_deployment.HYDRATIONS_KEY]:
        if hydration["spec"]["clusterName"] == cluster:
            hydration["spec"]["images"] = [{"image": image, "digest": DIGEST}]
            hydration["status"]["images"] = {"desired": desired, "ready": ready, "images": [
                {"image": image, "digest": DIGEST, "readyNodes": ready}]}
    return required


def replicas_of(required: dict) -> dict[str, dict]:
    outcome = model_deployment.compose(protocol.Request(
        composite=deployment(replicas=2, maxReplicasPerCluster=1), observed={},
        required={model_deployment.FLEET_CLUSTERS_KEY: FLEET, **required}))
    return {r["spec"]["clusterName"]: r["spec"] for r, _ in outcome.desired.values()}


def test_a_replica_gets_the_engine_image_pinned_where_its_cache_keeps_it():
    required = keeping(cache_required(cache_row("gpu-a", "Ready"), cache_row("gpu-b", "Ready")),
                       "gpu-a", ready=3)
    found = replicas_of(required)
    assert found["gpu-a"]["engineImage"] == {"reference": PINNED, "modelCacheName": CACHE, "warm": True}
    assert "engineImage" not in found["gpu-b"]


def test_the_image_is_cold_until_every_pool_node_holds_it():
    required = keeping(cache_required(cache_row("gpu-a", "Ready")), "gpu-a", ready=2)
    assert replicas_of(required)["gpu-a"]["engineImage"]["warm"] is False


def test_a_cache_keeping_another_image_leaves_the_engine_alone():
    required = keeping(cache_required(cache_row("gpu-a", "Ready")), "gpu-a", ready=3,
                       image="docker.io/lmsysorg/sglang:v0.5")
    assert "engineImage" not in replicas_of(required)["gpu-a"]


def test_a_hydration_with_no_nodes_keeps_the_image_cold():
    hydration = {"spec": {"images": [{"image": ENGINE_IMAGE, "digest": DIGEST}]},
                 "status": {"images": {"desired": 0, "images": []}}}
    assert engine_image.on_cluster(ENGINE_IMAGE, CACHE, hydration)["warm"] is False


def with_engine_image(xr: dict, warm: bool) -> dict:
    xr["spec"]["engineImage"] = {"reference": PINNED, "modelCacheName": CACHE, "warm": warm}
    return xr


def test_the_engine_runs_the_pinned_digest():
    outcome = compose_node_replica(with_engine_image(node_xr(), True))
    (engine,) = pod_spec(outcome)["containers"]
    assert engine["image"] == PINNED


def test_a_node_policy_also_prefers_the_nodes_that_keep_the_image():
    affinity = pod_spec(compose_node_replica(with_engine_image(node_xr(), True)))["affinity"]
    (term,) = affinity["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["weight"] == 50 and term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "image-keeper"
    assert "nodeAffinity" in affinity  # the warm weights still come first


def test_the_replica_says_warm_or_cold():
    assert compose_node_replica(with_engine_image(node_xr(), True)).status["engineImage"] == "Warm"
    assert compose_node_replica(with_engine_image(node_xr(), False)).status["engineImage"] == "Cold"
    assert compose_node_replica(node_xr()).status["engineImage"] == "Cold"


def test_a_waiting_replica_is_cold():
    outcome = replica_composer.compose(protocol.Request(composite=replica_xr("Wait"), observed={}, required={}))
    assert outcome.status["engineImage"] == "Cold"
