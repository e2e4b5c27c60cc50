"""An OCI registry as a ModelCache's source, in the composers (issue 22 item 1, DESIGN §8
`spec.source.oci {reference, pullSecretRef, plainHTTP}`): what the API admits, how the
reference resolves and each hydration fetches its pinned manifest, and how the pull secret
travels (copied while a Job needs it, mounted as a file, never in a status)."""

from __future__ import annotations

import copy
import json

import pytest

from fleetcache import reasons
from fleetcache.apis import specs, xrds
from fleetcache.functions import protocol
from fleetcache.functions.composers import model_cache, model_cache_hydration
from fleetcache.functions.decisions import sources
from fleetcache.functions.k8s import agent_job, hydration_objects, job_mounts
from fleetcache.functions.views.model_cache import latched_result, read_manifest, read_resolved
from tests.support.builders import composed_key, hydration_request, hydration_xr, observe
from tests.support.fleet import condition, fleet_cluster, grant_admitting, model_cache_xr
from tests.support.k8s import assert_valid_k8s, iter_remote_manifests, restricted_violations

FLEET = [fleet_cluster("gpu-east-1"), fleet_cluster("gpu-west-1")]
REFERENCE = "registry.example.com:5000/models/qwen3:v1"
PULL_SECRET = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
               "metadata": {"name": "regcred", "namespace": "ml"},
               "data": {".dockerconfigjson": "eyJhdXRocyI6e319"}}
OCI_SOURCE = {"oci": {"reference": REFERENCE, "pullSecretRef": {"name": "regcred"}}}
MANIFEST = [{"path": "config.json", "size": 100, "sha256": "1" * 64},
            {"path": "model.safetensors", "size": 3 << 30, "sha256": "2" * 64}]
DIGEST = sources.digest_of_manifest(MANIFEST)
OCI_COMMIT = "oci-" + "7" * 40


def cache(source: dict) -> dict:
    return model_cache_xr(source=source, placement={"clusterNames": ["gpu-east-1", "gpu-west-1"]})


def compose(xr: dict, secrets: list | None = None) -> protocol.Outcome:
    required = {"fleet-clusters": FLEET, "model-cache-grant": [grant_admitting(xr, DIGEST)]}
    if secrets is not None:
        required["token-secret"] = secrets
    return model_cache.compose(protocol.Request(composite=xr, observed={}, required=required))


def resolve_job(outcome: protocol.Outcome) -> dict:
    return outcome.desired[composed_key(outcome, "resolve-job")][0]["spec"]["forProvider"]["manifest"]


def args_of(job: dict) -> list[str]:
    return job["spec"]["template"]["spec"]["containers"][0]["args"]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def oci_hydration(source: dict | None = None) -> dict:
    return hydration_xr(source={**(source or OCI_SOURCE), "allowPatterns": [], "ignorePatterns": []},
                        commit=OCI_COMMIT, manifestDigest=DIGEST)


def fetch_job(xr: dict) -> dict:
    """The hydration's fetch Job once its volume is Bound and its cache latched the manifest."""
    def composed(observed: dict | None = None) -> protocol.Outcome:
        request = hydration_request(xr, observed=observed)
        request.required["model-cache"] = [{
            "apiVersion": "fleetcache.dev/v1alpha1", "kind": "ModelCache",
            "metadata": {"name": "qwen", "namespace": "ml"},
            "status": {"resolved": {"commit": OCI_COMMIT, "manifestDigest": DIGEST, "manifest": MANIFEST}}}]
        return model_cache_hydration.compose(request)
    outcome = composed(observe(composed(), states={"volume": {"phase": "Bound"}}))
    key = next(k for k in outcome.desired if k.startswith(hydration_objects.JOB_PREFIX))
    return outcome.desired[key][0]["spec"]["forProvider"]["manifest"]


# --- the API ------------------------------------------------------------------------------


@pytest.mark.parametrize("reference", [
    "registry.example.com/models/qwen3:v1",
    "localhost:5000/qwen3@sha256:" + "a" * 64,
    "10.0.0.7:5000/team/qwen3:2025-12.1",
    "docker.io/library/qwen3:latest",
])
def test_a_reference_by_tag_or_digest_with_its_registry_host_is_admitted(reference):
    assert xrds.violations(cache({"oci": {"reference": reference}})) == []


@pytest.mark.parametrize("reference", [
    "registry.example.com/models/qwen3",  # no tag: "latest" is not assumed
    "Qwen/Qwen3:v1",  # no registry host: Docker Hub's shorthand
    "registry.example.com/Models/qwen3:v1",  # repositories are lowercase
    "registry.example.com/models/qwen3@sha256:abc",
    "oci://registry.example.com/models/qwen3:v1",
])
def test_a_reference_without_host_tag_or_digest_is_refused_naming_the_field(reference):
    with pytest.raises(specs.InputError, match="spec.source.oci.reference.*registry host first"):
        compose(cache({"oci": {"reference": reference}}))


def test_an_oci_source_is_one_source_among_the_others():
    with pytest.raises(specs.InputError, match="exactly one of huggingFace, s3, oci or volume"):
        compose(cache({**OCI_SOURCE, "s3": {"bucket": "models"}}))


# --- resolve ------------------------------------------------------------------------------


def test_an_oci_source_resolves_the_reference_with_its_pull_secret_as_a_file():
    job = resolve_job(compose(cache(OCI_SOURCE), secrets=[PULL_SECRET]))
    args = args_of(job)
    assert args[0] == "resolve" and "--revision" not in args and "--plain-http" not in args
    assert flag(args, "--oci-reference") == REFERENCE
    assert flag(args, "--registry-config") == f"{sources.REGISTRY_MOUNT_PATH}/{sources.REGISTRY_CONFIG_FILE}"
    pod = job["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts[sources.REGISTRY_MOUNT_PATH]["readOnly"] is True
    assert restricted_violations(pod) == []


def test_the_docker_config_is_copied_from_the_users_secret_under_its_key_never_inlined():
    outcome = compose(cache(OCI_SOURCE), secrets=[PULL_SECRET])
    secret = outcome.desired[composed_key(outcome, "resolve-token-")][0]
    assert "data" not in secret["spec"]["forProvider"]["manifest"]
    assert [(r["patchesFrom"]["name"], r["patchesFrom"]["fieldPath"], r["toFieldPath"])
            for r in secret["spec"]["references"]] == [
        ("regcred", "data[.dockerconfigjson]", f"data[{sources.REGISTRY_CONFIG_FILE}]")]
    assert "eyJhdXRocyI6e319" not in json.dumps(outcome.status)


def test_a_missing_pull_secret_holds_the_resolve_naming_the_field_and_the_remedy():
    outcome = compose(cache(OCI_SOURCE), secrets=[])
    resolved = condition(outcome, "Resolved")
    assert (resolved.status, resolved.reason) == ("False", reasons.CredentialsSecretMissing)
    assert "spec.source.oci.pullSecretRef" in resolved.message
    assert not composed_key(outcome, "resolve-job")


def test_an_anonymous_plain_http_registry_gets_no_secret_and_the_plain_http_flag():
    outcome = compose(cache({"oci": {"reference": REFERENCE, "plainHTTP": True}}))
    args = args_of(resolve_job(outcome))
    assert "--plain-http" in args and "--registry-config" not in args
    assert not composed_key(outcome, "resolve-token-")


def test_a_moved_reference_resolves_again_but_another_pull_secret_does_not():
    digest = model_cache.read_spec(cache(OCI_SOURCE)["spec"]).source_digest
    moved, rotated = copy.deepcopy(OCI_SOURCE), copy.deepcopy(OCI_SOURCE)
    moved["oci"]["reference"] = "registry.example.com:5000/models/qwen3:v2"
    rotated["oci"]["pullSecretRef"] = {"name": "other"}
    assert model_cache.read_spec(cache(moved)["spec"]).source_digest != digest
    assert model_cache.read_spec(cache(rotated)["spec"]).source_digest == digest


def test_the_resolve_step_of_an_oci_source_is_valid_kubernetes():
    for _, manifest in iter_remote_manifests(compose(cache(OCI_SOURCE), secrets=[PULL_SECRET])):
        assert_valid_k8s(manifest)


# --- hydration ----------------------------------------------------------------------------


def test_an_oci_fetch_pins_commit_digest_and_manifest_and_names_the_registry():
    job = fetch_job(oci_hydration())
    args = args_of(job)
    assert args[0] == "fetch"
    assert (flag(args, "--commit"), flag(args, "--manifest-digest"), flag(args, "--manifest-file"),
            flag(args, "--oci-reference")) == (OCI_COMMIT, DIGEST, job_mounts.MANIFEST_FILE, REFERENCE)
    mounts = {m["mountPath"] for m in job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert {job_mounts.MANIFEST_MOUNT_PATH, sources.REGISTRY_MOUNT_PATH, agent_job.CACHE_MOUNT_PATH} <= mounts
    assert restricted_violations(job["spec"]["template"]["spec"]) == []


def test_a_flat_oci_layout_is_passed_to_the_fetch():
    source = copy.deepcopy(OCI_SOURCE)
    source["oci"]["layout"] = "Flat"
    assert flag(args_of(fetch_job(oci_hydration(source))), "--layout") == "flat"


@pytest.mark.parametrize("reference, repo", [
    ("registry.example.com:5000/models/qwen3:v1", "oci/registry.example.com_5000/models/qwen3"),
    ("localhost/qwen3@sha256:" + "a" * 64, "oci/localhost/qwen3"),
])
def test_the_layout_names_an_oci_model_for_its_registry_and_repository(reference, repo):
    assert sources.Source.of({"oci": {"reference": reference}}).repo == repo


# --- the pinned manifest: each file's blob ------------------------------------------------


BLOB = "sha256:" + "3" * 64
MEMBER = {"path": "model.safetensors", "size": 3 << 30, "sha256": "2" * 64, "blob": BLOB,
          "offset": 1536, "blobSize": (3 << 30) + 4096}


def test_the_latched_manifest_keeps_where_each_oci_file_is():
    raw = {"path": "config.json", "size": 100, "sha256": "1" * 64, "blob": "sha256:" + "1" * 64}
    assert read_manifest([MEMBER, raw]) == [raw, MEMBER]


def test_where_an_oci_file_is_stays_outside_the_manifest_digest():
    assert sources.digest_of_manifest([MEMBER]) == sources.digest_of_manifest(
        [{k: MEMBER[k] for k in ("path", "size", "sha256")}])


@pytest.mark.parametrize("broken", [
    {"blob": "sha256:abc"},
    {"blob": "3" * 64},
    {"offset": -1},
    {"blobSize": "4096"},
    {"blob": None},
])
def test_a_malformed_oci_locator_makes_the_manifest_malformed(broken):
    assert read_manifest([{**MEMBER, **broken}]) is None


def test_a_range_without_its_blob_makes_the_manifest_malformed():
    assert read_manifest([{k: v for k, v in MEMBER.items() if k != "blob"}]) is None


PINNED = "registry.example.com:5000/models/qwen3@sha256:" + "7" * 64


def test_the_reference_pinned_by_digest_is_latched_for_what_mounts_the_artifact():
    resolved = read_resolved(latched_result({"commit": OCI_COMMIT, "reference": PINNED}, "oci/r", "v1", "d"))
    assert resolved is not None and resolved["reference"] == PINNED


@pytest.mark.parametrize("reference", [REFERENCE, "not a reference", 7])
def test_a_reference_not_pinned_by_digest_is_not_latched(reference):
    resolved = read_resolved(latched_result({"commit": OCI_COMMIT, "reference": reference}, "oci/r", "v1", "d"))
    assert resolved is not None and "reference" not in resolved
