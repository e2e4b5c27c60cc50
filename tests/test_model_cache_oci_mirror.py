"""The OCI fleet mirror on the function side (spec.distribution.mirror.oci): its XRD rules, who
publishes and who reads, the fetch flags, the push Secret on the publisher alone, and the
artifact each status reports (functions/decisions/mirror.py, functions/views/)."""

from __future__ import annotations

import pytest

from fleetcache import reasons
from fleetcache.functions import naming
from fleetcache.functions.decisions import mirror
from fleetcache.functions.views.hydration import artifact_of
from fleetcache.functions.views.model_cache import read_resolved
from tests.support.xrd import xrd_for

REPOSITORY = "registry.example.com/fleet-models"
OCI = {"repository": REPOSITORY, "pushSecretRef": {"name": "regpush", "key": ".dockerconfigjson"},
       "plainHTTP": False}
S3 = {"bucket": "mirror-all", "prefix": "fleetcache"}
COMMIT = "a" * 40
DIGEST = "sha256:" + "b" * 64
ARTIFACT = f"{REPOSITORY}/qwen/qwen3-0.6b@{DIGEST}"


def xr_with(mirror_spec: dict) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": "qwen", "namespace": "default"},
            "spec": {"grantRef": {"name": "team-a"},
                     "source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}},
                     "placement": {"clusterNames": ["gpu-a"]},
                     "distribution": {"mirror": mirror_spec}}}


COMBINED = "spec.distribution.mirror.oci cannot be combined with s3 or regions: give one kind of mirror"


@pytest.mark.parametrize("mirror_spec, rejected", [
    ({"oci": OCI}, []),
    ({"oci": {"repository": REPOSITORY}}, []),
    ({"oci": OCI, "s3": S3}, [COMBINED]),
    ({"oci": OCI, "regions": [{"region": "eu-west-1", "s3": S3}]}, [COMBINED]),
])
def test_the_oci_mirror_stands_alone(mirror_spec, rejected):
    xr = xr_with(mirror_spec)
    assert xrd_for(xr).cel_messages(xr, None) == rejected


@pytest.mark.parametrize("repository", ["fleet-models", "registry.example.com/Fleet", "registry.example.com/x:v1",
                                        "registry.example.com/x@sha256:" + "b" * 64])
def test_an_oci_mirror_repository_is_a_registry_host_and_a_repository_without_tag(repository):
    xr = xr_with({"oci": {"repository": repository}})
    assert [v.message for v in xrd_for(xr).violations(xr, None)]


@pytest.mark.parametrize("repo, name", [
    ("Qwen/Qwen3-0.6B", "qwen/qwen3-0.6b"),
    ("oci/registry_5000/models/tiny", "oci/registry_5000/models/tiny"),
    ("s3/models/llama/8b-instruct", "s3/models/llama/8b-instruct"),
    ("Org/name--with__runs..x", "org/name-with-runs-x"),
    ("Org/-edge-", "org/edge"),
])
def test_the_artifact_is_named_after_the_sources_repo_in_the_registry_grammar(repo, name):
    assert mirror.artifact_name(repo) == name


def fleet(*ready: bool, latched: dict | None = None) -> mirror.Mirror:
    candidates = [mirror.Candidate(f"gpu-{c}", ready=r) for c, r in zip("abc", ready, strict=False)]
    found = mirror.decide({"oci": OCI, "onMissing": "Origin"}, COMMIT, candidates, latched, "Qwen/Qwen3-0.6B")
    assert found is not None
    return found


def test_the_first_ready_cluster_publishes_to_the_oci_mirror_and_the_others_wait():
    decided = fleet(False, True, True)
    assert decided.publisher == "gpu-b"
    assert [decided.waits(c) for c in ("gpu-a", "gpu-b", "gpu-c")] == [True, False, True]


def test_the_publishers_hydration_names_the_artifact_repository_and_the_push_secret():
    assert fleet(True, True).for_hydration("gpu-a", None) == {
        "oci": {"repository": f"{REPOSITORY}/qwen/qwen3-0.6b", "plainHTTP": False,
                "pushSecretRef": {"name": "regpush", "key": ".dockerconfigjson"}},
        "onMissing": "Origin", "role": "Publisher"}


def test_a_readers_hydration_carries_no_push_secret():
    spec = fleet(True, True).for_hydration("gpu-b", None)
    assert spec is not None and spec["role"] == "Reader" and "pushSecretRef" not in spec["oci"]
    assert mirror.secret(spec) is None


def test_the_publishers_push_secret_is_mounted_as_the_agents_docker_config():
    spec = fleet(True).for_hydration("gpu-a", None)
    ref = mirror.secret(spec)
    assert ref is not None and ref.keys == ((".dockerconfigjson", "config.json"),)
    assert ref.field == "spec.distribution.mirror.oci.pushSecretRef"


def test_the_publishers_fetch_flags_push_to_the_artifact_repository_with_the_secret():
    assert mirror.args(fleet(True).for_hydration("gpu-a", None)) == [
        "--mirror-oci-repository", f"{REPOSITORY}/qwen/qwen3-0.6b",
        "--mirror-registry-config", "/var/run/secrets/fleetcache/mirror/config.json",
        "--mirror-role", "publisher", "--mirror-on-missing", "origin"]


def test_the_mirror_status_names_the_oci_repository():
    assert fleet(True).as_status()["groups"] == [
        {"region": "", "bucket": "", "repository": REPOSITORY, "publisher": "gpu-a", "published": False,
         "clusters": 1}]


def test_a_published_latch_of_the_oci_mirror_holds_readers_back_no_more():
    latched = {"commit": COMMIT, "groups": [{"region": "", "bucket": "", "repository": REPOSITORY,
                                             "published": True}]}
    assert fleet(False, True, latched=latched).published


def publisher_hydration(**status) -> dict:
    return {"spec": {"mirror": {"oci": {"repository": f"{REPOSITORY}/qwen/qwen3-0.6b"}, "role": "Publisher"}},
            "status": {"phase": "Ready", **status}}


def test_the_publishers_ready_hydration_publishes_the_oci_mirror():
    candidates = [mirror.Candidate("gpu-a", hydration=publisher_hydration())]
    decided = mirror.decide({"oci": OCI}, COMMIT, candidates, None, "Qwen/Qwen3-0.6B")
    assert decided is not None and decided.published


def test_a_publisher_that_mounts_an_image_volume_pushed_nothing_and_has_not_published():
    candidates = [mirror.Candidate("gpu-a", hydration=publisher_hydration(reason=reasons.ImageVolume))]
    decided = mirror.decide({"oci": OCI}, COMMIT, candidates, None, "Qwen/Qwen3-0.6B")
    assert decided is not None and not decided.published


def test_an_s3_latch_does_not_count_as_the_oci_mirror_published():
    latched = {"commit": COMMIT, "groups": [{"region": "", "bucket": "", "published": True}]}
    assert not fleet(True, True, latched=latched).published


def test_a_hydration_reports_the_artifact_of_its_agents_record():
    assert artifact_of({"artifact": ARTIFACT}, {}, COMMIT) == {"artifact": {"reference": ARTIFACT,
                                                                           "digest": DIGEST}}


def test_a_hydration_keeps_the_artifact_latched_for_its_commit_only():
    status = {"resolved": {"commit": "c" * 40}, "artifact": {"reference": ARTIFACT, "digest": DIGEST}}
    assert artifact_of({}, status, COMMIT) == {}
    assert artifact_of({}, {**status, "resolved": {"commit": COMMIT}}, COMMIT) == {"artifact": status["artifact"]}


@pytest.mark.parametrize("artifact", [{"reference": f"{REPOSITORY}/qwen:v1"}, {"reference": 7}, "x"])
def test_status_resolved_keeps_only_an_artifact_pinned_by_digest(artifact):
    assert "artifact" not in read_resolved({"commit": COMMIT, "artifact": artifact})


def test_status_resolved_keeps_the_artifact_and_its_digest():
    assert read_resolved({"commit": COMMIT, "artifact": {"reference": ARTIFACT}})["artifact"] == \
        {"reference": ARTIFACT, "digest": DIGEST}
