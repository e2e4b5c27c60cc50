"""Image delivery (design/image-volumes.md): which artifact a cache's replicas mount as an image
volume, on which clusters, when they go back to the volume; the Image replica's pod, valid
against the Kubernetes 1.37 schema under Pod Security restricted, and never composed on a
cluster that does not declare spec.features.imageVolumes; which hydrations warm nothing."""

from __future__ import annotations

import copy

import pytest

from fleetcache import reasons
from fleetcache.apis import specs
from fleetcache.functions import protocol
from fleetcache.functions.composers import model_replica as composer
from fleetcache.functions.decisions import image_delivery
from fleetcache.functions.decisions.delivery import Policy, decide
from fleetcache.functions.decisions.node_delivery import NodePolicy
from fleetcache.functions.views.fleet_cluster import FleetClusterView
from fleetcache.functions.views.hydration import ClusterReport
from fleetcache.functions.views.model_replica import IMAGE_MOUNT_PATH, Previous
from fleetcache.functions.views.served_model import Artifact, Content, Model, mountable_artifact
from tests.support.deployments import CACHE, CLUSTER, REPLICA_ENGINE, deployment, engine_digest, replica_xr
from tests.support.fleet import fleet_cluster
from tests.support.k8s import assert_valid_k8s, iter_remote_manifests, restricted_violations

DIGEST = "sha256:" + "ab" * 32
COMMIT = "oci-" + "ab" * 20
SOURCE_REF = f"registry.example.com/models/qwen3@{DIGEST}"
MIRROR_REF = "mirror.example.com:5000/fleet-models/qwen3@sha256:" + "cd" * 32
ARTIFACT = Artifact(SOURCE_REF, COMMIT)
POLICY = Policy("Source", "Source", "Immediately", NodePolicy.of({}))
MANIFEST = [{"path": "config.json", "size": 2, "sha256": "ef" * 32, "blob": "sha256:" + "ef" * 32}]


def model(*, artifact: Artifact | None = ARTIFACT, image_clusters=(CLUSTER,), phase: str = "Ready",
          held: dict | None = None) -> Model:
    return Model("oci/registry.example.com/models/qwen3", "v1", COMMIT, CACHE, True,
                 {CLUSTER: ClusterReport(CLUSTER, phase)}, DIGEST, held=held or {},
                 artifact=artifact, image_clusters=frozenset(image_clusters))


def was(delivery: str, reason: str = "", said: str = "", reference: str = "", cluster: str = CLUSTER) -> Previous:
    return Previous(cluster, delivery, False, reason=reason, delivery_reason=said, image_reference=reference)


# --- the delivery decision ---------------------------------------------------------------------


def test_a_cluster_with_image_volumes_mounts_the_caches_artifact():
    chosen = decide(model(), CLUSTER, POLICY, None)
    assert (chosen.delivery, chosen.reason, chosen.commit) == ("Image", reasons.ImageVolume, COMMIT)
    assert chosen.image == {"modelCacheName": CACHE, "reference": SOURCE_REF, "commit": COMMIT}
    assert chosen.delivery_reason.startswith(f"{reasons.ImageVolume}: ")


@pytest.mark.parametrize("case", [
    {"image_clusters": ()},  # the cluster does not declare spec.features.imageVolumes
    {"artifact": None},  # the cache has no artifact to mount
])
def test_without_image_volumes_or_an_artifact_the_replica_keeps_the_volume_path(case):
    chosen = decide(model(**case), CLUSTER, POLICY, None)
    assert (chosen.delivery, chosen.reason) == ("Cache", reasons.CacheReady)
    assert chosen.image == {}


def test_a_cluster_held_on_an_earlier_commit_by_a_rollout_keeps_the_volume_path():
    held = {CLUSTER: Content("oci-" + "01" * 20, "sha256:" + "01" * 32)}
    assert decide(model(held=held), CLUSTER, POLICY, None).delivery == "Cache"


def test_image_delivery_does_not_wait_for_the_clusters_hydration():
    assert decide(model(phase="Hydrating"), CLUSTER, POLICY, None).delivery == "Image"


def test_an_image_replica_that_timed_out_falls_back_to_the_volume_saying_why():
    chosen = decide(model(), CLUSTER, POLICY, was("Image", reasons.ImageVolumeUnavailable, reference=SOURCE_REF))
    assert (chosen.delivery, chosen.reason) == ("Cache", reasons.ImageVolumeUnavailable)
    assert chosen.delivery_reason.startswith(f"{reasons.ImageVolumeUnavailable}: {SOURCE_REF} ")


def test_a_fallen_back_replica_stays_on_the_volume_for_that_artifact():
    said = f"{reasons.ImageVolumeUnavailable}: {SOURCE_REF} could not be mounted"
    chosen = decide(model(), CLUSTER, POLICY, was("Cache", reasons.Available, said))
    assert (chosen.delivery, chosen.reason) == ("Cache", reasons.ImageVolumeUnavailable)


def test_a_new_artifact_is_tried_again_as_an_image_volume():
    said = f"{reasons.ImageVolumeUnavailable}: {MIRROR_REF} could not be mounted"
    assert decide(model(), CLUSTER, POLICY, was("Cache", reasons.Available, said)).delivery == "Image"


def test_a_replica_that_fell_back_on_another_cluster_is_image_here():
    before = was("Image", reasons.ImageVolumeUnavailable, reference=SOURCE_REF, cluster="elsewhere")
    assert decide(model(), CLUSTER, POLICY, before).delivery == "Image"


def test_a_fallback_while_the_volume_hydrates_follows_the_table_and_says_why():
    wait = Policy("Wait", "Source", "Immediately", NodePolicy.of({}))
    chosen = decide(model(phase="Hydrating"), CLUSTER, wait,
                    was("Image", reasons.ImageVolumeUnavailable, reference=SOURCE_REF))
    assert (chosen.delivery, chosen.reason) == ("Wait", reasons.ImageVolumeUnavailable)


# --- the artifact a cache has ----------------------------------------------------------------


def cache(source: dict, spec: dict | None = None, **resolved) -> dict:
    return {"spec": {"source": source, **(spec or {})}, "status": {"resolved": {"commit": COMMIT, **resolved}}}


OCI_MIRROR = {"distribution": {"mirror": {"oci": {"repository": "mirror.example.com/fleet"}}}}


OCI = {"oci": {"reference": "registry.example.com/models/qwen3:v1"}}
HUB = {"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}}


@pytest.mark.parametrize("resource, reference", [
    (cache(OCI, reference=SOURCE_REF, manifest=MANIFEST), SOURCE_REF),
    (cache(OCI, reference=SOURCE_REF, manifest=MANIFEST, artifact={"reference": MIRROR_REF, "digest": DIGEST}),
     MIRROR_REF),  # the mirror's artifact first
    (cache(HUB, artifact={"reference": MIRROR_REF}), MIRROR_REF),
    (cache(HUB, artifact={"reference": "mirror.example.com/fleet/qwen3", "digest": DIGEST}),
     f"mirror.example.com/fleet/qwen3@{DIGEST}"),
], ids=["oci source", "mirror over source", "hub source published", "repository and digest"])
def test_the_artifact_a_cache_mounts(resource, reference):
    assert mountable_artifact(resource) == Artifact(reference, COMMIT)


@pytest.mark.parametrize("resource", [
    cache(HUB),
    cache(OCI, reference=SOURCE_REF),  # no pinned manifest: what the layers hold is unknown
    cache(OCI, reference=SOURCE_REF, manifest=[{**MANIFEST[0], "offset": 512, "blobSize": 2048}]),
    cache(OCI, reference="registry.example.com/models/qwen3:v1", manifest=MANIFEST),  # not pinned
    cache(HUB, artifact={"reference": "mirror.example.com/fleet/qwen3:v1"}),
    {"spec": {"source": OCI}, "status": {"resolved": {"reference": SOURCE_REF, "manifest": MANIFEST}}},
    cache(OCI, OCI_MIRROR, reference=SOURCE_REF, manifest=MANIFEST),  # the mirror's is not published yet
], ids=["hub source", "no manifest", "tar layer member", "tag", "mirror by tag", "not resolved",
        "oci mirror not yet published"])
def test_a_cache_without_a_mountable_artifact_has_none(resource):
    assert mountable_artifact(resource) is None


# --- the Image replica's pod -------------------------------------------------------------------


def image_xr() -> dict:
    return replica_xr("Image", model={"repo": "oci/registry.example.com/models/qwen3", "revision": "v1",
                                      "commit": COMMIT},
                      engineDigest=engine_digest(REPLICA_ENGINE),
                      image={"modelCacheName": CACHE, "reference": SOURCE_REF, "commit": COMMIT})


def image_cluster(enabled: bool) -> dict:
    found = fleet_cluster(CLUSTER)
    found["spec"]["features"] = {"imageVolumes": enabled}
    return found


def compose_image(enabled: bool, observed: dict | None = None) -> protocol.Outcome:
    return composer.compose(protocol.Request(
        composite=image_xr(), observed=observed or {},
        required={composer.FLEET_CLUSTER_KEY: [image_cluster(enabled)],
                  composer.DEPLOYMENT_KEY: [deployment(engine=REPLICA_ENGINE)]}))


def pod_of(outcome: protocol.Outcome) -> dict:
    return outcome.desired[composer.ENGINE_KEY][0]["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]


def test_an_image_replica_mounts_the_artifact_by_digest_read_only():
    pod = pod_of(compose_image(True))
    volume = next(v for v in pod["volumes"] if "image" in v)
    assert volume["image"] == {"reference": SOURCE_REF, "pullPolicy": "IfNotPresent"}
    assert {"name": volume["name"], "mountPath": IMAGE_MOUNT_PATH, "readOnly": True} \
        in pod["containers"][0]["volumeMounts"]


def test_an_image_replica_is_told_the_artifacts_mount_and_commit():
    env = {e["name"]: e.get("value") for e in pod_of(compose_image(True))["containers"][0]["env"]}
    assert (env["FLEETCACHE_MODEL"], env["FLEETCACHE_MODEL_REVISION"], env["FLEETCACHE_DELIVERY"]) \
        == (IMAGE_MOUNT_PATH, COMMIT, "image")
    assert env["HF_HUB_OFFLINE"] == "1" and "HF_HUB_CACHE" not in env


def test_an_image_replicas_manifests_pass_the_kubernetes_schema_under_restricted():
    outcome = compose_image(True)
    for _, manifest in iter_remote_manifests(outcome):
        assert_valid_k8s(manifest)
    assert restricted_violations(pod_of(outcome)) == []


def test_an_image_volume_is_never_composed_on_a_cluster_without_the_feature():
    outcome = compose_image(False)
    assert composer.ENGINE_KEY not in outcome.desired
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", reasons.ImageVolumeUnavailable)
    assert "spec.features.imageVolumes" in outcome.status["message"]


def test_an_image_replica_needs_its_image():
    xr = image_xr()
    del xr["spec"]["image"]
    with pytest.raises(specs.InputError, match="spec.image"):
        composer.compose(protocol.Request(composite=xr))


def stalled_engine(progressing: dict) -> dict:
    manifest = {"status": {"conditions": [
        {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
         "message": 'ErrImagePull: failed to pull image "x": 401 Unauthorized'}, progressing]}}
    return {"status": {"atProvider": {"manifest": manifest}}}


def test_an_image_replica_whose_deployment_timed_out_says_the_image_volume_is_unavailable():
    observed = {composer.ENGINE_KEY: stalled_engine(
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
         "message": 'ReplicaSet "r" has timed out progressing.'})}
    outcome = compose_image(True, observed)
    assert outcome.status["reason"] == reasons.ImageVolumeUnavailable
    assert "ErrImagePull" in outcome.status["message"]


def test_an_image_replica_still_progressing_is_starting():
    observed = {composer.ENGINE_KEY: stalled_engine(
        {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"})}
    assert compose_image(True, observed).status["reason"] == reasons.Starting


# --- which hydrations warm nothing -------------------------------------------------------------


def cluster_view(enabled: bool) -> FleetClusterView:
    return FleetClusterView.of(image_cluster(enabled))


ARTIFACT_CACHE = cache(OCI, reference=SOURCE_REF, manifest=MANIFEST)


def replica(delivery: str, **more) -> dict:
    return {"spec": {"delivery": delivery, **more.pop("spec", {})}, **more}


@pytest.mark.parametrize("replicas", [[], [replica("Image")], [replica("Source")]],
                         ids=["none", "an Image replica", "a Source replica"])
def test_a_hydration_warms_nothing_where_no_replica_needs_the_volume(replicas):
    assert image_delivery.hydrates_nothing(cluster_view(True), ARTIFACT_CACHE, COMMIT, replicas) == ARTIFACT


@pytest.mark.parametrize("replicas", [
    None,  # not fetched yet
    [replica("Cache")],
    [replica("Image", status={"reason": str(reasons.ImageVolumeUnavailable)})],
    [replica("Wait", spec={"deliveryReason": f"{reasons.ImageVolumeUnavailable}: {SOURCE_REF} could not"})],
], ids=["not fetched", "a Cache replica", "an Image replica timed out", "a replica fallen back"])
def test_a_hydration_warms_the_volume_a_replica_needs(replicas):
    assert image_delivery.hydrates_nothing(cluster_view(True), ARTIFACT_CACHE, COMMIT, replicas) is None


def test_a_hydration_on_a_cluster_without_image_volumes_warms_the_volume():
    assert image_delivery.hydrates_nothing(cluster_view(False), ARTIFACT_CACHE, COMMIT, []) is None


def test_a_hydration_of_another_commit_than_the_artifacts_warms_the_volume():
    assert image_delivery.hydrates_nothing(cluster_view(True), ARTIFACT_CACHE, "oci-" + "01" * 20, []) is None


def test_a_hydration_that_warms_nothing_takes_no_room():
    assert image_delivery.served_by_image({"status": {"phase": "Ready", "reason": str(reasons.ImageVolume)}})
    assert not image_delivery.served_by_image({"status": {"phase": "Ready", "reason": str(reasons.Hydrated)}})


def test_the_fleet_cluster_view_reads_the_feature_off_by_default():
    assert cluster_view(True).image_volumes
    assert not FleetClusterView.of(copy.deepcopy(fleet_cluster(CLUSTER))).image_volumes
