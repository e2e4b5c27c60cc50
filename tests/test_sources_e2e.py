"""Issue 12's "Done when", end to end: a ModelCache from S3, one from an existing volume, and
a Hub ModelCache through a fleet mirror converge on a five-cluster fleet with verified bytes;
with the mirror the Hub serves the model about once (≤ 1.05x its size, against about 5x
without, measured in the same test) and the readers make no Hub request at all (air-gapped
readers: they plan from the publisher's manifest); a publisher that fails hands over.

Real function server, real agents against the test hub and an S3 API server on loopback
(fleetcache.demo_sources, the demo's act), fleetcache.simulation for Crossplane and the
clusters.
"""

from __future__ import annotations

import time

import pytest

from fleetcache.devtools.demo import sources as act
from fleetcache.devtools.demo.stage import Stage
from fleetcache.devtools.testhub.server import TestHub
from fleetcache.functions import naming
from tests.support import xrd
from tests.support.mirror_fleet import DEADLINE, MODEL_BYTES, add_repo, mirror_fleet

CLUSTERS = ("gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e")


def fleet_cluster(name: str) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "FleetCluster", "metadata": {"name": name},
            "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                             "name": f"{name}-kubeconfig"}}}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Five clusters, a hub, a corrupting proxy in front of it, and an S3 server."""
    with mirror_fleet(tmp_path_factory.mktemp("sources"),
                      [fleet_cluster(name) for name in CLUSTERS],
                      [act.BUCKET, act.MIRROR_BUCKET]) as played:
        yield played


def settle(stage: Stage, name: str, clusters=CLUSTERS) -> None:
    stage.deadline = time.monotonic() + DEADLINE
    assert act.settle(stage, name, clusters) == ""


def test_an_s3_model_cache_converges_with_verified_bytes(fleet):
    stage, _, _, s3 = fleet
    stage.deadline = time.monotonic() + DEADLINE
    assert act.s3_act(stage, s3, list(CLUSTERS[:2]), MODEL_BYTES, lambda line: None) == []


def test_an_existing_volume_converges_and_a_changed_file_fails_naming_it(fleet):
    stage = fleet[0]
    stage.deadline = time.monotonic() + DEADLINE
    assert act.volume_act(stage, list(CLUSTERS[:3]), MODEL_BYTES, lambda line: None) == []
    assert not (stage.clusters["gpu-a"].volume_dir(act.NAMESPACE, naming.cache_volume_name(
        act.VOLUME_CACHE))).exists()  # nothing composed a volume of its own


def test_a_mirror_reads_the_origin_once_for_the_fleet_instead_of_once_per_cluster(fleet):
    stage, hub, proxy, s3 = fleet
    size = add_repo((hub, proxy), "fleetcache-test/direct", seed=31)
    before = hub.bytes_sent()
    stage.control.apply(act.mirror_cache("direct", "fleetcache-test/direct", hub.endpoint,
                                         CLUSTERS, None))
    settle(stage, "direct")
    without = hub.bytes_sent() - before

    assert add_repo((hub, proxy), "fleetcache-test/mirrored", seed=32) == size
    before = hub.bytes_sent()
    with TestHub() as readers_hub:  # the readers' Hub endpoint: any request of theirs lands here
        for reader in CLUSTERS[1:]:
            stage.clusters[reader].endpoint_override = readers_hub.endpoint
        try:
            stage.control.apply(act.mirror_cache("mirrored", "fleetcache-test/mirrored",
                                                 hub.endpoint, CLUSTERS, s3.endpoint))
            settle(stage, "mirrored")
        finally:
            for reader in CLUSTERS[1:]:
                stage.clusters[reader].endpoint_override = None
        assert readers_hub.requests() == []
    with_mirror = hub.bytes_sent() - before

    assert without >= 4.9 * size
    assert with_mirror <= 1.05 * size
    status = act.status_of(stage.control, "mirrored")
    assert status["mirror"] == {"publisher": "gpu-a", "published": True,
                                "commit": status["resolved"]["commit"],
                                "groups": [{"region": "", "bucket": act.MIRROR_BUCKET,
                                            "publisher": "gpu-a", "published": True,
                                            "clusters": len(CLUSTERS)}]}
    assert {r["name"]: r["bytesFrom"] for r in status["clusters"]} == \
        {c: "Origin" if c == "gpu-a" else "Mirror" for c in CLUSTERS}
    digests = act.reverified_digests(stage.clusters, "mirrored", "fleetcache-test/mirrored",
                                     status["resolved"]["commit"])
    assert set(digests.values()) == {status["resolved"]["manifestDigest"]}


def test_a_failed_publisher_hands_over_to_the_next_cluster(fleet):
    stage, hub, proxy, s3 = fleet
    add_repo((hub, proxy), "fleetcache-test/handover", seed=33)
    stage.clusters["gpu-a"].endpoint_override = proxy.endpoint  # corrupts every LFS byte
    try:
        stage.control.apply(act.mirror_cache("handover", "fleetcache-test/handover",
                                             hub.endpoint, CLUSTERS, s3.endpoint))
        settle(stage, "handover")
    finally:
        stage.clusters["gpu-a"].endpoint_override = None
    status = act.status_of(stage.control, "handover")
    assert (status["mirror"]["publisher"], status["mirror"]["published"]) == ("gpu-b", True)
    phases = act.phases(stage.control, "handover", CLUSTERS)
    assert phases == {"gpu-a": "Failed", **{c: "Ready" for c in CLUSTERS[1:]}}
    rows = {r["name"]: r for r in status["clusters"]}
    assert rows["gpu-a"]["reason"] == "DigestMismatch"
    assert {c: rows[c].get("bytesFrom") for c in CLUSTERS[2:]} == \
        {c: "Mirror" for c in CLUSTERS[2:]}


def test_every_manifest_of_the_demos_sources_act_is_valid_against_its_xrd():
    xrd.assert_valid(act.grant(CLUSTERS))
    xrd.assert_valid(act.s3_cache("http://127.0.0.1:1", CLUSTERS))
    xrd.assert_valid(act.volume_cache(CLUSTERS))
    xrd.assert_valid(act.mirror_cache(act.MIRROR_CACHE, act.MIRROR_REPO, "http://127.0.0.1:1",
                                      CLUSTERS, "http://127.0.0.1:2"))
