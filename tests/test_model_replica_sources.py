"""compose-model-replica of a cache whose files are flat (spec.cache.layout Flat: an
existing volume's subPath, an S3 prefix fetched flat; contract §D): the engine is given the
directory, mounted read-only from the claim named, with no HF_HUB_CACHE (the files are no
Hugging Face cache); and a replica waiting outside the cache's targets says why.
"""

from __future__ import annotations

import pytest

from fleetcache.apis import specs
from fleetcache.functions import protocol
from fleetcache.functions.composers import model_replica as composer
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.node_tier import warmer_names
from tests.support import xrd
from tests.support.deployments import CACHE, CLUSTER, REPLICA_ENGINE, deployment, replica_xr
from tests.support.fleet import fleet_cluster
from tests.support.k8s import assert_valid_k8s, restricted_violations

MOUNT = agent_job.CACHE_MOUNT_PATH
VOL_COMMIT = "vol-" + "3c" * 20


def flat_xr(snapshot: str = f"{MOUNT}/chat", claim: str = "preloaded", **cache) -> dict:
    xr = replica_xr("Cache")
    xr["spec"]["model"] = {"repo": "volume/preloaded/chat", "revision": "main",
                           "commit": VOL_COMMIT}
    xr["spec"]["cache"] = {"modelCacheName": CACHE, "volumeName": claim, "mountPath": MOUNT,
                           "snapshotPath": snapshot, "commit": VOL_COMMIT, "layout": "Flat",
                           **cache}
    return xr


def compose(xr: dict) -> protocol.Outcome:
    return composer.compose(protocol.Request(composite=xr, required={
        composer.FLEET_CLUSTER_KEY: [fleet_cluster(CLUSTER)],
        composer.DEPLOYMENT_KEY: [deployment(engine=REPLICA_ENGINE)]}))


def pod_spec(outcome: protocol.Outcome) -> dict:
    return outcome.desired["deployment"][0]["spec"]["forProvider"]["manifest"]["spec"][
        "template"]["spec"]


def env_of(outcome: protocol.Outcome) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod_spec(outcome)["containers"][0]["env"]}


@pytest.mark.parametrize("snapshot", [f"{MOUNT}/chat", MOUNT])
def test_a_flat_replica_is_told_the_directory_and_the_mounts_commit(snapshot):
    env = env_of(compose(flat_xr(snapshot)))
    assert (env["FLEETCACHE_MODEL"], env["FLEETCACHE_MODEL_REVISION"],
            env["FLEETCACHE_DELIVERY"]) == (snapshot, VOL_COMMIT, "cache")


def test_a_flat_replica_gets_no_hf_hub_cache_and_stays_offline():
    env = env_of(compose(flat_xr()))
    assert "HF_HUB_CACHE" not in env
    assert env["HF_HUB_OFFLINE"] == "1"


def test_a_flat_replica_mounts_the_named_claim_read_only():
    spec = pod_spec(compose(flat_xr(claim="preloaded")))
    volume = next(v for v in spec["volumes"] if "persistentVolumeClaim" in v)
    assert volume["persistentVolumeClaim"] == {"claimName": "preloaded", "readOnly": True}
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
    assert mount == {"name": volume["name"], "mountPath": MOUNT, "readOnly": True}


def test_a_flat_replicas_pod_passes_restricted_and_is_valid_kubernetes():
    outcome = compose(flat_xr())
    assert restricted_violations(pod_spec(outcome)) == []
    assert_valid_k8s(outcome.desired["deployment"][0]["spec"]["forProvider"]["manifest"])


def test_a_flat_replica_spec_is_valid_against_its_xrd():
    xrd.assert_valid(flat_xr())
    xrd.assert_valid(flat_xr(MOUNT))


@pytest.mark.parametrize("layout, snapshot, error", [
    ("HfCache", MOUNT, "spec.cache.snapshotPath must lie under spec.cache.mountPath"),
    ("Flat", "/elsewhere", "spec.cache.snapshotPath must lie under spec.cache.mountPath"),
    ("Flat", f"{MOUNT}x/chat", "spec.cache.snapshotPath must lie under spec.cache.mountPath"),
])
def test_a_model_directory_outside_the_mount_is_refused_naming_the_field(layout, snapshot, error):
    with pytest.raises(specs.InputError, match=error):
        compose(flat_xr(snapshot, layout=layout))


def test_a_node_replica_of_flat_files_is_refused():
    volume = warmer_names.VOLUME_MOUNT
    xr = flat_xr(f"{volume}/chat", mountPath=volume)
    xr["spec"]["delivery"] = "Node"
    xr["spec"]["nodeCache"] = {"claimName": "qwen-node", "labelKey": "", "commit": VOL_COMMIT,
                               "manifestDigest": "ab" * 32, "policy": "Prefer"}
    with pytest.raises(specs.InputError, match="spec.cache.layout must be HfCache on Node"):
        compose(xr)


def test_a_cache_replica_without_a_layout_keeps_the_hugging_face_cache_contract():
    env = env_of(compose(replica_xr("Cache")))
    assert env["HF_HUB_CACHE"] == f"{MOUNT}/hub"


def test_a_replica_waiting_outside_the_caches_targets_says_so():
    xr = replica_xr("Wait", hydration={
        "phase": "Pending", "reason": "NotACacheTarget",
        "message": "cluster gpu-east-1 is not a target of ModelCache ml/qwen: add it"})
    outcome = composer.compose(protocol.Request(composite=xr))
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Waiting", "NotACacheTarget")
    assert outcome.status["message"].endswith("add it")
    assert outcome.desired == {}
