"""Engine images kept on a pool (spec.images of a ModelCacheHydration): what
compose-model-cache-hydration composes on the cluster for them (functions/node_tier/
image_keepers.py), in both pod shapes, and status.images as it reads the DaemonSet and the
reporter's summary back. design/engine-images.md."""

from __future__ import annotations

import copy
import json

import pytest

from fleetcache import reasons
from fleetcache.functions import protocol
from fleetcache.functions.composers.model_cache_hydration import compose, on_nodes, read_spec
from fleetcache.functions.k8s import objects
from fleetcache.functions.k8s.hydration_objects import NAMESPACE_KEY
from fleetcache.functions.node_tier import image_keepers
from fleetcache.functions.views.fleet_cluster import FleetClusterView
from tests.support.builders import CLUSTER, fleet_cluster, hydration_request, hydration_xr, observe
from tests.support.k8s import assert_valid_k8s, restricted_violations

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
VLLM = {"image": "docker.io/vllm/vllm-openai:v0.11.0", "digest": DIGEST_A,
        "command": ["vllm", "serve", "--help=all"]}
SIDECAR = {"image": "localhost:5000/tools/probe:v1", "digest": DIGEST_B, "pullPolicy": "Always",
           "command": ["probe"], "args": ["--version"]}
NODE_CACHE = {"nodeSelector": {"matchLabels": {"gpu": "h100"}}, "path": "/mnt/nvme0",
              "capacityPerNode": "2Ti"}


def pool_cluster(*, image_volumes: bool = False, pool: bool = True, evicted: bool = False) -> dict:
    cluster = fleet_cluster(CLUSTER)
    if pool:
        cluster["spec"]["nodeCache"] = copy.deepcopy(NODE_CACHE)
        cluster["status"]["nodeCache"] = {"admitted": [], "evicted": ["ml/qwen"] if evicted else [],
                                          "waiting": []}
    if image_volumes:
        cluster["spec"]["features"] = {"imageVolumes": True}
    return cluster


def run(images=(VLLM,), *, cluster: dict | None = None, observed: dict | None = None,
        tier: str = "Volume") -> protocol.Outcome:
    xr = hydration_xr(tier=tier, images=[dict(i) for i in images])
    return compose(hydration_request(xr, observed=observed,
                                     cluster=pool_cluster() if cluster is None else cluster, replicas=[]))


def manifest(outcome: protocol.Outcome, key: str) -> dict:
    return outcome.desired[key][0]["spec"]["forProvider"]["manifest"]


def keeper_pod(outcome: protocol.Outcome) -> dict:
    return manifest(outcome, image_keepers.KEEPER_KEY)["spec"]["template"]["spec"]


def reported(outcome: protocol.Outcome, *, desired: int, ready: int, summary: dict | None = None) -> dict:
    """status.images once the DaemonSet and the reporter's ConfigMap are observed."""
    states = {image_keepers.KEEPER_KEY: {"desiredNumberScheduled": desired, "numberReady": ready}}
    data = {image_keepers.STATUS_KEY: {"status.json": json.dumps(summary)}} if summary is not None else {}
    again = run(observed=observe(outcome, states=states, data=data))
    return again.status["images"]


def test_a_hydration_without_images_composes_no_keeper_and_reports_none():
    outcome = run(images=())
    assert not set(outcome.desired) & set(image_keepers.KEYS)
    assert "images" not in outcome.status


def test_images_are_kept_on_a_volume_tier_cache_too():
    assert image_keepers.KEEPER_KEY in run(tier="Volume").desired
    assert image_keepers.KEEPER_KEY in run(tier="Node").desired


def test_without_image_volumes_each_image_runs_its_command_by_digest_after_the_slot_sidecar():
    pod = keeper_pod(run(images=(VLLM, SIDECAR)))
    slot, first, second = pod["initContainers"]
    assert (slot["name"], slot["restartPolicy"]) == ("slot", "Always")
    assert slot["args"][:1] == ["image-slot"] and "--held" in slot["startupProbe"]["exec"]["command"]
    assert first["image"] == "docker.io/vllm/vllm-openai@" + DIGEST_A
    assert first["command"] == ["vllm", "serve", "--help=all"]
    assert second["image"] == "localhost:5000/tools/probe@" + DIGEST_B
    assert (second["imagePullPolicy"], second["args"]) == ("Always", ["--version"])
    assert [c["args"][0] for c in pod["containers"]] == ["image-keep"]


def test_with_image_volumes_each_image_is_a_read_only_volume_and_nothing_of_it_runs():
    pod = keeper_pod(run(images=(VLLM, SIDECAR), cluster=pool_cluster(image_volumes=True)))
    assert "initContainers" not in pod
    images = [v["image"] for v in pod["volumes"] if "image" in v]
    assert images == [{"reference": "docker.io/vllm/vllm-openai@" + DIGEST_A, "pullPolicy": "IfNotPresent"},
                      {"reference": "localhost:5000/tools/probe@" + DIGEST_B, "pullPolicy": "Always"}]
    mounts = pod["containers"][0]["volumeMounts"]
    assert all(m["readOnly"] for m in mounts if m["name"].startswith("image-"))
    assert [(c["name"], c["command"]) for c in pod["containers"]] == [("keeper", ["fleetcache-agent"])]


def test_the_keeper_runs_on_the_pools_opted_in_nodes_only():
    affinity = keeper_pod(run())["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"]: e["operator"] for e in affinity["nodeSelectorTerms"][0]["matchExpressions"]}
    assert keys == {"gpu": "In", "fleetcache.dev/node-cache": "In",
                    "node-role.kubernetes.io/control-plane": "DoesNotExist",
                    "node-role.kubernetes.io/master": "DoesNotExist"}


@pytest.mark.parametrize("image_volumes", [False, True])
def test_every_pod_is_restricted_requests_no_gpu_and_no_image_sees_a_token(image_volumes):
    outcome = run(cluster=pool_cluster(image_volumes=image_volumes))
    for key in (image_keepers.KEEPER_KEY, image_keepers.REPORTER_KEY):
        pod = manifest(outcome, key)["spec"]["template"]["spec"]
        assert restricted_violations(pod) == []
        assert pod["automountServiceAccountToken"] is False
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            assert not any("gpu" in r for r in container["resources"].get("limits", {}))
            if container["name"].startswith("pull-"):
                assert all(m["name"] != "token" for m in container.get("volumeMounts", []))


@pytest.mark.parametrize("image_volumes", [False, True])
def test_every_manifest_is_a_valid_kubernetes_object(image_volumes):
    outcome = run(images=(VLLM, SIDECAR), cluster=pool_cluster(image_volumes=image_volumes))
    for key in image_keepers.KEYS:
        if key in outcome.desired:
            assert_valid_k8s(manifest(outcome, key))


def test_the_slot_binding_exists_only_where_a_slot_is_taken():
    assert "images-slots-binding" in run().desired
    assert "images-slots-binding" not in run(cluster=pool_cluster(image_volumes=True)).desired


def test_the_reporter_may_only_list_pods_and_events_and_patch_its_own_configmap():
    rules = manifest(run(), "images-reporter-role")["rules"]
    assert rules == [{"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list"]},
                     {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["qwen-images-status"],
                      "verbs": ["get", "patch"]}]


def test_an_image_without_a_command_is_refused_where_nothing_mounts_images():
    outcome = run(images=({"image": "docker.io/vllm/vllm-openai:v0.11.0", "digest": DIGEST_A},))
    assert not set(outcome.desired) & set(image_keepers.KEYS)
    status = outcome.status["images"]
    assert status["reason"] == reasons.ImageCommandRequired
    assert "spec.images[0].command" in status["message"] and "vllm serve --help=all" not in status["message"]
    assert "[vllm, serve, --help=all]" in status["message"]


def test_an_image_without_a_command_is_kept_by_an_image_volume():
    outcome = run(images=({"image": "docker.io/vllm/vllm-openai:v0.11.0", "digest": DIGEST_A},),
                  cluster=pool_cluster(image_volumes=True))
    assert image_keepers.KEEPER_KEY in outcome.desired


def test_a_cluster_without_the_pool_keeps_no_images_and_says_so():
    outcome = run(cluster=pool_cluster(pool=False))
    assert not set(outcome.desired) & set(image_keepers.KEYS)
    assert outcome.status["images"]["reason"] == reasons.NodeTierNotConfigured
    assert "no node pool default" in outcome.status["images"]["message"]


def test_a_cache_the_pool_evicted_releases_its_images():
    outcome = run(cluster=pool_cluster(evicted=True))
    assert not set(outcome.desired) & set(image_keepers.KEYS)
    assert outcome.status["images"]["reason"] == reasons.Evicted


def test_before_the_daemonset_reports_the_images_await_prerequisites():
    assert run().status["images"]["reason"] == reasons.AwaitingPrerequisites


def test_every_node_holding_every_image_is_warm():
    status = reported(run(), desired=3, ready=3, summary={
        "desired": 3, "ready": 3, "failed": 0, "pulling": 0,
        "images": [{"image": "docker.io/vllm/vllm-openai@" + DIGEST_A, "readyNodes": 3}]})
    assert (status["reason"], status["summary"], status["pulling"]) == (reasons.ImagesWarm, "3/3", 0)
    assert status["images"] == [{"image": VLLM["image"], "digest": DIGEST_A, "readyNodes": 3}]


def test_a_failed_pull_names_the_first_node_and_the_kubelets_words():
    failure = {"node": "gpu-2", "reason": "ErrImagePull", "message": 'Failed to pull image "x": not found'}
    status = reported(run(), desired=3, ready=1, summary={
        "desired": 3, "ready": 1, "failed": 1, "pulling": 1, "firstFailure": failure, "images": []})
    assert (status["ready"], status["failed"], status["pulling"]) == (1, 1, 1)
    assert status["firstFailure"] == failure
    assert status["reason"] == reasons.ImagePullFailed and "gpu-2: ErrImagePull" in status["message"]


def test_the_summary_never_counts_beyond_the_daemonsets_own_numbers():
    status = reported(run(), desired=2, ready=1, summary={"ready": 9, "failed": 9})
    assert (status["desired"], status["ready"], status["failed"], status["pulling"]) == (2, 1, 1, 0)


def test_a_garbage_summary_reads_as_nothing_reported():
    outcome = run()
    states = {image_keepers.KEEPER_KEY: {"desiredNumberScheduled": 2, "numberReady": 0}}
    again = run(observed=observe(outcome, states=states, data={image_keepers.STATUS_KEY: {"status.json": "{"}}))
    assert (again.status["images"]["pulling"], again.status["images"]["reason"]) == (2, reasons.ImagesPulling)


def test_no_eligible_node_says_how_to_opt_nodes_in():
    status = reported(run(), desired=0, ready=0, summary={})
    assert status["reason"] == reasons.NoEligibleNodes and "optInLabel" in status["message"]


def test_images_are_kept_while_the_fleet_cluster_is_not_ready():
    outcome = run()
    again = compose(hydration_request(hydration_xr(images=[dict(VLLM)]), observed=observe(outcome),
                                      cluster="not-ready", replicas=[]))
    assert image_keepers.KEEPER_KEY in again.desired


def test_where_the_hydration_composes_no_volume_the_keeper_makes_its_namespace():
    """An image-delivery hydration composes nothing of its own on the cluster: without the
    namespace the API server would refuse every keeper object in it."""
    cluster = pool_cluster(image_volumes=True)
    request = hydration_request(hydration_xr(images=[VLLM]), cluster=cluster, replicas=[])
    outcome = protocol.Outcome()
    image_keepers.run(request, on_nodes(request, read_spec(request)), cluster, FleetClusterView.of(cluster),
                      ("", ""), image_keepers.pinned_images([VLLM]), outcome)
    assert manifest(outcome, NAMESPACE_KEY)["kind"] == "Namespace"
    assert outcome.desired[NAMESPACE_KEY][0]["spec"]["managementPolicies"] == list(objects.CREATE_ONLY)


def test_where_the_hydration_composes_its_volume_the_namespace_stays_the_hydrations():
    assert run().desired[NAMESPACE_KEY] == run(images=()).desired[NAMESPACE_KEY]


# --- private images: the pull secrets the images name ----------------------------------------

PRIVATE = {**VLLM, "pullSecretRef": {"name": "regcred"}}
PRIVATE_SIDECAR = {**SIDECAR, "pullSecretRef": {"name": "regcred"}}
OTHER_REGISTRY = {"image": "registry.example.com/tools/probe:v2", "digest": DIGEST_B, "command": ["probe"],
                  "pullSecretRef": {"name": "example-pull", "key": "config.json"}}


@pytest.mark.parametrize("image_volumes", [False, True])
def test_the_keeper_pulls_private_images_with_a_copy_of_their_pull_secret(image_volumes):
    outcome = run(images=(PRIVATE,), cluster=pool_cluster(image_volumes=image_volumes))
    copy_of = manifest(outcome, f"{image_keepers.PULL_SECRET_PREFIX}0")
    assert keeper_pod(outcome)["imagePullSecrets"] == [{"name": copy_of["metadata"]["name"]}]
    assert (copy_of["type"], copy_of["metadata"]["namespace"]) == \
        ("kubernetes.io/dockerconfigjson", keeper_pod_namespace(outcome))
    assert_valid_k8s(copy_of)


def test_the_pull_secrets_copy_is_patched_in_by_the_provider_and_carries_no_credential():
    obj = run(images=(OTHER_REGISTRY,)).desired[f"{image_keepers.PULL_SECRET_PREFIX}0"][0]
    assert [(r["patchesFrom"]["name"], r["patchesFrom"]["fieldPath"], r["toFieldPath"])
            for r in obj["spec"]["references"]] == [("example-pull", "data[config.json]", "data[.dockerconfigjson]")]
    assert "data" not in obj["spec"]["forProvider"]["manifest"]


def test_images_naming_one_pull_secret_share_one_copy_and_others_get_their_own():
    outcome = run(images=(PRIVATE, PRIVATE_SIDECAR, OTHER_REGISTRY))
    copies = sorted(k for k in outcome.desired if k.startswith(image_keepers.PULL_SECRET_PREFIX))
    assert copies == [f"{image_keepers.PULL_SECRET_PREFIX}0", f"{image_keepers.PULL_SECRET_PREFIX}1"]
    assert len(keeper_pod(outcome)["imagePullSecrets"]) == 2


def test_public_images_name_no_pull_secret():
    outcome = run(images=(VLLM, SIDECAR))
    assert "imagePullSecrets" not in keeper_pod(outcome)
    assert not any(k.startswith(image_keepers.PULL_SECRET_PREFIX) for k in outcome.desired)


def test_a_pull_secrets_copy_goes_when_no_image_names_it():
    outcome = run(images=(PRIVATE,))
    again = run(images=(VLLM,), observed=observe(outcome))
    assert not any(k.startswith(image_keepers.PULL_SECRET_PREFIX) for k in again.desired)


def keeper_pod_namespace(outcome: protocol.Outcome) -> str:
    return manifest(outcome, image_keepers.KEEPER_KEY)["metadata"]["namespace"]
