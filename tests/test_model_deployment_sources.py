"""compose-model-deployment over caches that are not a Hugging Face cache on a volume of
their own (contract §D, design/sources.md "Layout, and what engines get"):

- an existing volume (spec.source.volume): replicas mount the user's claim, the one the
  cluster's hydration verified (its status.volumeName), and load <mount>/<subPath>;
- an S3 prefix fetched with layout Flat: the cache PVC, the commit's directory of files;
- replicas pin the commit they mount (a volume's commit is its manifest's);
- where the table says Source, a model no engine loads from its source (an S3 prefix, a
  volume's own files) waits instead.
"""

from __future__ import annotations

import copy

import pytest

from fleetcache.functions import naming, protocol
from fleetcache.functions.composers import model_deployment as composer
from fleetcache.functions.k8s import agent_job
from fleetcache.volume import flat_commit_path
from tests.support import xrd
from tests.support.deployments import CACHE, cache_required, cache_row, deployment
from tests.support.fleet import COMMIT, fleet_cluster

FLEET = [fleet_cluster("gpu-a"), fleet_cluster("gpu-b")]
ON_GPU_A = {"placement": {"clusterNames": ["gpu-a"]}}
MOUNT = agent_job.CACHE_MOUNT_PATH
CLAIM = "preloaded"
VOL_COMMIT = "vol-" + "3c" * 20
OLD_VOL_COMMIT = "vol-" + "9e" * 20
S3_COMMIT = "s3-" + "5d" * 20
S3_REPO = "s3/weights/chat/v1"
SOURCES = {
    "hub": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B", "revision": "main"}},
    "volume": {"volume": {"claimName": CLAIM, "subPath": "chat"}},
    "volume-root": {"volume": {"claimName": CLAIM, "subPath": ""}},
    "volume-hub-manifest": {"volume": {"claimName": CLAIM, "subPath": "chat", "manifest": {
        "huggingFace": {"repo": "Qwen/Qwen3-0.6B", "revision": "main"}}}},
    "s3-flat": {"s3": {"bucket": "weights", "prefix": "chat/v1", "layout": "Flat"}},
    "s3-hf-cache": {"s3": {"bucket": "weights", "prefix": "chat/v1", "layout": "HfCache"}},
}
# What each source's resolve latches (status.resolved.repo and commit) and what its
# hydrations report as status.volumeName.
RESOLVED = {"hub": ("Qwen/Qwen3-0.6B", COMMIT), "volume": ("", VOL_COMMIT),
            "volume-root": ("", VOL_COMMIT), "volume-hub-manifest": ("Qwen/Qwen3-0.6B", COMMIT),
            "s3-flat": (S3_REPO, S3_COMMIT), "s3-hf-cache": (S3_REPO, S3_COMMIT)}


def claim_of(source: str) -> str:
    return CLAIM if source.startswith("volume") else naming.cache_volume_name(CACHE)


def cache_of(source: str, *rows: dict, volume_name: str | None = None) -> dict:
    """What the deployment requires of a cache from `source`, each row's hydration saying
    which claim it filled or verified (volume_name; None: the source's own)."""
    repo, commit = RESOLVED[source]
    required = cache_required(*rows, commit=commit)
    cache = required[composer.MODEL_CACHE_KEY][0]
    cache["spec"]["source"] = copy.deepcopy(SOURCES[source])
    hub = "huggingFace" in SOURCES[source] or "manifest" in SOURCES[source].get("volume", {})
    cache["status"]["resolved"].update(repo=repo, revision="main" if hub else "")
    for hydration in required[composer.HYDRATIONS_KEY]:
        hydration["status"]["volumeName"] = claim_of(source) if volume_name is None \
            else volume_name
        if "servingCommit" in hydration["status"]:
            hydration["status"]["servingRepo"] = repo
    return required


def replica(source: str, *rows: dict, **deployment_spec) -> dict:
    rows = rows or (cache_row("gpu-a", "Ready"),)
    outcome = composer.compose(protocol.Request(
        composite=deployment(**{**ON_GPU_A, **deployment_spec}),
        required={composer.FLEET_CLUSTERS_KEY: FLEET, **cache_of(source, *rows)}))
    return next(r for r, _ in outcome.desired.values())["spec"]


# --- the claim and the model's directory --------------------------------------------------


@pytest.mark.parametrize("source, volume, model_dir, layout", [
    ("hub", naming.cache_volume_name(CACHE),
     f"{MOUNT}/hub/models--Qwen--Qwen3-0.6B/snapshots/{COMMIT}", None),
    ("s3-hf-cache", naming.cache_volume_name(CACHE),
     f"{MOUNT}/hub/models--s3--weights--chat--v1/snapshots/{S3_COMMIT}", None),
    ("s3-flat", naming.cache_volume_name(CACHE), flat_commit_path(MOUNT, S3_COMMIT), "Flat"),
    ("volume", CLAIM, f"{MOUNT}/chat", "Flat"),
    ("volume-root", CLAIM, MOUNT, "Flat"),
    ("volume-hub-manifest", CLAIM, f"{MOUNT}/chat", "Flat"),
])
def test_a_cache_replica_mounts_the_claim_and_loads_the_directory_its_source_lays_out(
        source, volume, model_dir, layout):
    cache = replica(source)["cache"]
    assert (cache["volumeName"], cache["mountPath"], cache["snapshotPath"],
            cache.get("layout")) == (volume, MOUNT, model_dir, layout)


def test_the_claim_is_the_one_the_clusters_hydration_reports():
    required = cache_of("volume", cache_row("gpu-a", "Ready"), volume_name="restored-copy")
    outcome = composer.compose(protocol.Request(composite=deployment(**ON_GPU_A), required={
        composer.FLEET_CLUSTERS_KEY: FLEET, **required}))
    assert next(r for r, _ in outcome.desired.values())["spec"]["cache"]["volumeName"] == \
        "restored-copy"


@pytest.mark.parametrize("reported, mounted", [
    (None, CLAIM),                 # a hydration that has not said yet: the source's claim
    ("Not A Claim/..", CLAIM),     # not a claim name: read as absent
    (7, CLAIM),
])
def test_without_a_claim_name_from_the_hydration_an_existing_volume_mounts_its_own_claim(
        reported, mounted):
    required = cache_of("volume", cache_row("gpu-a", "Ready"))
    status = required[composer.HYDRATIONS_KEY][0]["status"]
    if reported is None:
        del status["volumeName"]
    else:
        status["volumeName"] = reported
    outcome = composer.compose(protocol.Request(composite=deployment(**ON_GPU_A), required={
        composer.FLEET_CLUSTERS_KEY: FLEET, **required}))
    assert next(r for r, _ in outcome.desired.values())["spec"]["cache"]["volumeName"] == mounted


def test_without_a_claim_name_from_the_hydration_a_flat_s3_cache_mounts_the_cache_pvc():
    required = cache_of("s3-flat", cache_row("gpu-a", "Ready"))
    del required[composer.HYDRATIONS_KEY][0]["status"]["volumeName"]
    outcome = composer.compose(protocol.Request(composite=deployment(**ON_GPU_A), required={
        composer.FLEET_CLUSTERS_KEY: FLEET, **required}))
    assert next(r for r, _ in outcome.desired.values())["spec"]["cache"]["volumeName"] == \
        naming.cache_volume_name(CACHE)


def test_a_sub_path_that_climbs_out_of_the_claim_reads_as_its_root_with_a_warning():
    required = cache_of("volume", cache_row("gpu-a", "Ready"))
    required[composer.MODEL_CACHE_KEY][0]["spec"]["source"]["volume"]["subPath"] = "a/../../etc"
    outcome = composer.compose(protocol.Request(composite=deployment(**ON_GPU_A), required={
        composer.FLEET_CLUSTERS_KEY: FLEET, **required}))
    assert next(r for r, _ in outcome.desired.values())["spec"]["cache"]["snapshotPath"] == MOUNT
    assert any("subPath" in w for w in outcome.warnings)


# --- what the replica pins ----------------------------------------------------------------


def test_a_volume_replica_pins_the_volumes_manifest_commit_and_names_the_claim_as_its_model():
    spec = replica("volume")
    assert spec["model"] == {"repo": f"volume/{CLAIM}/chat", "revision": "main",
                             "commit": VOL_COMMIT}
    assert spec["cache"]["commit"] == VOL_COMMIT


def test_a_volume_verified_for_a_new_manifest_keeps_replicas_pinned_to_the_commit_they_mount():
    spec = replica("volume", cache_row("gpu-a", "Hydrating", servingCommit=OLD_VOL_COMMIT))
    assert (spec["delivery"], spec["cache"]["commit"], spec["cache"]["snapshotPath"],
            spec["cache"]["volumeName"]) == ("Cache", OLD_VOL_COMMIT, f"{MOUNT}/chat", CLAIM)


def test_a_flat_s3_cache_on_tier_node_serves_replicas_from_the_volume():
    required = cache_of("s3-flat", cache_row("gpu-a", "Ready"))
    hydration = required[composer.HYDRATIONS_KEY][0]
    hydration["spec"]["tier"] = "Node"
    hydration["status"]["nodeTier"] = {
        "phase": "Ready", "commit": S3_COMMIT, "claimName": "qwen-node", "readyNodes": 2,
        "desiredNodes": 2, "labelKey": "node-cache.fleetcache.dev/0123456789abcdef"}
    outcome = composer.compose(protocol.Request(composite=deployment(**ON_GPU_A), required={
        composer.FLEET_CLUSTERS_KEY: FLEET, **required}))
    spec = next(r for r, _ in outcome.desired.values())["spec"]
    assert (spec["delivery"], spec["cache"]["layout"]) == ("Cache", "Flat")
    assert "nodeCache" not in spec


# --- no source an engine loads: Wait where the table says Source ---------------------------


@pytest.mark.parametrize("source, row, policy, delivery, reason", [
    ("volume", cache_row("gpu-a", "Hydrating"), {}, "Wait", "Hydrating"),
    ("s3-flat", cache_row("gpu-a", "Hydrating"), {}, "Wait", "Hydrating"),
    ("s3-hf-cache", cache_row("gpu-a", "Pending"), {}, "Wait", "Hydrating"),
    ("volume", cache_row("gpu-a", "Failed"), {}, "Wait", "HydrationFailed"),
    ("volume", cache_row("gpu-a", "Failed"), {"onHydrationFailure": "Fail"}, "Fail",
     "HydrationFailed"),
    ("volume-hub-manifest", cache_row("gpu-a", "Hydrating"), {}, "Source", "Hydrating"),
    ("hub", cache_row("gpu-a", "Hydrating"), {}, "Source", "Hydrating"),
])
def test_a_replica_the_table_sends_to_the_source_waits_when_no_engine_loads_that_source(
        source, row, policy, delivery, reason):
    outcome = composer.compose(protocol.Request(
        composite=deployment(**ON_GPU_A, delivery=policy),
        required={composer.FLEET_CLUSTERS_KEY: FLEET, **cache_of(source, row)}))
    assert outcome.status["placements"][0] | {"commit": ""} == {
        "replica": 0, "cluster": "gpu-a", "delivery": delivery, "reason": reason, "commit": ""}


def test_a_waiting_replica_carries_its_clusters_hydration():
    spec = replica("s3-flat", cache_row("gpu-a", "Hydrating", bytesDone=1024))
    assert (spec["hydration"]["phase"], spec["hydration"]["bytesDone"]) == ("Hydrating", 1024)
    assert "model" not in spec and "cache" not in spec


def test_outside_the_caches_targets_an_s3_replica_waits_saying_how_to_place_it():
    required = cache_of("s3-flat", cache_row("gpu-a", "Ready"))
    outcome = composer.compose(protocol.Request(
        composite=deployment(placement={"clusterNames": ["gpu-b"]}),
        required={composer.FLEET_CLUSTERS_KEY: FLEET, **required}))
    spec = next(r for r, _ in outcome.desired.values())["spec"]
    assert (spec["delivery"], spec["hydration"]["reason"]) == ("Wait", "NotACacheTarget")
    assert "spec.placement" in spec["hydration"]["message"]
    assert outcome.status["placements"][0]["reason"] == "NotACacheTarget"


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_every_replica_it_composes_is_valid_against_the_model_replica_xrd(source):
    for row in (cache_row("gpu-a", "Ready"), cache_row("gpu-a", "Hydrating")):
        outcome = composer.compose(protocol.Request(
            composite=deployment(**ON_GPU_A),
            required={composer.FLEET_CLUSTERS_KEY: FLEET, **cache_of(source, row)}))
        for composed, _ in outcome.desired.values():
            xrd.assert_valid(composed)
