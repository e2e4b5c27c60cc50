"""`make demo`: the fleet converges, the injected fault fails one cluster with its remedy,
and that cluster's replica falls back to the source."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetcache import demo
from tests.support import xrd

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo_output() -> str:
    lines: list[str] = []
    assert demo.run(ROOT, fast=True, out=lines.append) == 0, "\n".join(lines)
    return "\n".join(lines)


def test_the_demo_converges_and_says_so(demo_output):
    assert "demo OK" in demo_output


def test_the_demo_prints_a_live_hydration_table_per_round(demo_output):
    assert demo_output.count("CLUSTER     PHASE") >= 2
    assert "Hydrating" in demo_output


def test_the_broken_mirror_fails_its_cluster_with_digest_mismatch_and_the_remedy(demo_output):
    assert "gpu-west-2  Failed" in demo_output
    assert "Degraded=True HydrationFailed: hydration failed on gpu-west-2 (DigestMismatch)" \
        in demo_output
    assert "Check the mirror or proxy" in demo_output


def test_replicas_switch_to_the_cache_except_on_the_failed_cluster(demo_output):
    final = demo_output[demo_output.rindex("REPLICA  CLUSTER"):]
    assert "gpu-west-2  Source    Ready" in final
    assert final.count("Cache     Ready") == demo.REPLICAS - 1


def test_every_ready_cluster_verifies_the_same_bytes(demo_output):
    verified = [line for line in demo_output.splitlines() if "files re-hashed" in line]
    assert len(verified) == 4
    assert len({line.rsplit(" ", 1)[-1] for line in verified}) == 1


def test_every_demo_composite_is_valid_against_its_xrd():
    for resource in [*demo.fleet_clusters(), demo.model_cache("http://127.0.0.1:1"),
                     demo.model_deployment()]:
        xrd.assert_valid(resource)
