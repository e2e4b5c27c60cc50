"""Per-region fleet mirrors end to end (round-four contract §A): four clusters in two regions
(the topology.kubernetes.io/region label on their FleetClusters), a mirror bucket per region.
The Hub serves the model once per region (at most 2 x 1.05 x its size), each region's first
cluster by name publishes to its own bucket and the other reads it, every cluster's bytes
re-verify to the resolved manifest digest; a publisher that fails hands over to the next
cluster of its own region while the other region is untouched.

Real function server over gRPC, real agents against the test hub and moto's S3 server on
loopback (fleetcache.demo_sources' S3Store), fleetcache.simulation for Crossplane and the
clusters.
"""

from __future__ import annotations

import time

import pytest

from fleetcache.devtools.demo import sources as act
from fleetcache.devtools.demo.stage import Stage
from fleetcache.functions import naming
from tests.support import xrd
from tests.support.mirror_fleet import DEADLINE, add_repo, mirror_fleet

REGIONS = {"gpu-a": "eu-west-1", "gpu-b": "us-east-1", "gpu-c": "eu-west-1",
           "gpu-d": "us-east-1"}
CLUSTERS = tuple(sorted(REGIONS))
BUCKETS = {"eu-west-1": "mirror-eu", "us-east-1": "mirror-us"}


def fleet_cluster(name: str) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "FleetCluster",
            "metadata": {"name": name,
                         "labels": {"topology.kubernetes.io/region": REGIONS[name]}},
            "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                             "name": f"{name}-kubeconfig"}}}


def regional_cache(name: str, repo: str, hub_endpoint: str, mirror_endpoint: str) -> dict:
    """A Hub ModelCache with a mirror per region and no default mirror."""
    regions = [{"region": region, "s3": {"bucket": bucket, "endpoint": mirror_endpoint,
                                         "credentialsSecretRef": {"name": "s3-keys"}}}
               for region, bucket in sorted(BUCKETS.items())]
    return act.cache(name, {"huggingFace": {"repo": repo, "endpoint": hub_endpoint}},
                     CLUSTERS, distribution={"mirror": {"regions": regions}})


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Four clusters in two regions, a hub, a corrupting proxy in front of it, and an S3
    server with a mirror bucket per region."""
    with mirror_fleet(tmp_path_factory.mktemp("regions"),
                      [fleet_cluster(name) for name in CLUSTERS],
                      list(BUCKETS.values())) as played:
        yield played


def settle(stage: Stage, name: str) -> dict:
    stage.deadline = time.monotonic() + DEADLINE
    assert act.settle(stage, name, CLUSTERS) == ""
    return act.status_of(stage.control, name)


def groups(status: dict) -> dict[str, tuple[str, str, bool, int]]:
    return {g["region"]: (g["bucket"], g["publisher"], g["published"], g["clusters"])
            for g in status["mirror"]["groups"]}


def test_each_region_reads_the_origin_once_and_its_readers_read_their_regions_mirror(fleet):
    stage, hub, proxy, s3 = fleet
    size = add_repo((hub, proxy), "fleetcache-test/regional", seed=41)
    before = hub.bytes_sent()
    stage.control.apply(regional_cache("regional", "fleetcache-test/regional", hub.endpoint,
                                       s3.endpoint))
    status = settle(stage, "regional")
    origin = hub.bytes_sent() - before

    assert 2 * size <= origin <= 2 * 1.05 * size
    assert groups(status) == {"eu-west-1": ("mirror-eu", "gpu-a", True, 2),
                              "us-east-1": ("mirror-us", "gpu-b", True, 2)}
    assert status["mirror"]["published"] is True
    assert {r["name"]: r["bytesFrom"] for r in status["clusters"]} == \
        {"gpu-a": "Origin", "gpu-b": "Origin", "gpu-c": "Mirror", "gpu-d": "Mirror"}
    assert all(s3.stored_bytes(bucket) >= size for bucket in BUCKETS.values())
    digests = act.reverified_digests(stage.clusters, "regional", "fleetcache-test/regional",
                                     status["resolved"]["commit"])
    assert digests == {c: status["resolved"]["manifestDigest"] for c in CLUSTERS}


def test_a_failed_publisher_hands_over_within_its_region_only(fleet):
    stage, hub, proxy, s3 = fleet
    add_repo((hub, proxy), "fleetcache-test/regional-handover", seed=42)
    stage.clusters["gpu-a"].endpoint_override = proxy.endpoint  # corrupts every LFS byte
    try:
        stage.control.apply(regional_cache("handover", "fleetcache-test/regional-handover",
                                           hub.endpoint, s3.endpoint))
        status = settle(stage, "handover")
    finally:
        stage.clusters["gpu-a"].endpoint_override = None
    assert groups(status) == {"eu-west-1": ("mirror-eu", "gpu-c", True, 2),
                              "us-east-1": ("mirror-us", "gpu-b", True, 2)}
    assert act.phases(stage.control, "handover", CLUSTERS) == \
        {"gpu-a": "Failed", "gpu-b": "Ready", "gpu-c": "Ready", "gpu-d": "Ready"}
    rows = {r["name"]: r for r in status["clusters"]}
    assert rows["gpu-a"]["reason"] == "DigestMismatch"
    assert {c: rows[c].get("bytesFrom") for c in ("gpu-b", "gpu-c", "gpu-d")} == \
        {"gpu-b": "Origin", "gpu-c": "Origin", "gpu-d": "Mirror"}
    digests = act.reverified_digests({c: stage.clusters[c] for c in CLUSTERS[1:]}, "handover",
                                     "fleetcache-test/regional-handover",
                                     status["resolved"]["commit"])
    assert set(digests.values()) == {status["resolved"]["manifestDigest"]}


def test_the_regional_cache_is_valid_against_its_xrd():
    xrd.assert_valid(regional_cache("regional", "fleetcache-test/regional",
                                    "http://127.0.0.1:1", "http://127.0.0.1:2"))
