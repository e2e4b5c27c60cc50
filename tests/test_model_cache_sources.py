"""S3 and existing-volume sources in the composers (issue 12 items 1-2, contract §A, §D):
how each source resolves, what the ModelCache latches, and what each hydration composes."""

from __future__ import annotations

import copy
import json

import pytest

from fleetcache import exitcodes
from fleetcache.apis import specs
from fleetcache.functions import naming, protocol
from fleetcache.functions.composers import model_cache, model_cache_hydration
from fleetcache.functions.decisions import sources
from fleetcache.functions.k8s import agent_job, hydration_objects, job_mounts
from tests.support.builders import (
    CLUSTER,
    composed_key,
    hydration_request,
    hydration_xr,
    job_complete,
    job_failed_exit,
    job_running,
    observe,
    with_status,
)
from tests.support.fleet import (
    GIB,
    condition,
    fleet_cluster,
    grant_admitting,
    hydrations,
    model_cache_xr,
    observed_object,
)
from tests.support.k8s import assert_valid_k8s, iter_remote_manifests, restricted_violations

FLEET = [fleet_cluster("gpu-east-1"), fleet_cluster("gpu-west-1")]
CREDENTIALS = {"name": "s3-keys"}
S3_SOURCE = {"s3": {"bucket": "models", "prefix": "llama/8b", "endpoint": "https://s3.example.com",
                    "credentialsSecretRef": CREDENTIALS}}
VOLUME_SOURCE = {"volume": {"claimName": "weights", "subPath": "llama-8b"}}
MANIFEST = [{"path": "config.json", "size": 100, "sha256": "1" * 64, "etag": '"e1"'},
            {"path": "model.safetensors", "size": 3 * GIB, "sha256": "2" * 64, "etag": '"e2"'}]
DIGEST = sources.digest_of_manifest(MANIFEST)
S3_COMMIT = "s3-" + "5" * 40
VOL_COMMIT = "vol-" + "6" * 40
SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-keys", "namespace": "ml"},
          "data": {"AWS_ACCESS_KEY_ID": "QUtJQQ==", "AWS_SECRET_ACCESS_KEY": "c2VjcmV0"}}


def cache(source: dict, **spec) -> dict:
    return model_cache_xr(source=source, placement={"clusterNames": ["gpu-east-1", "gpu-west-1"]},
                          **spec)


def compose(xr: dict, observed: dict | None = None, secrets: list | None = None) -> protocol.Outcome:
    required = {"fleet-clusters": FLEET, "model-cache-grant": [grant_admitting(xr, DIGEST)]}
    if secrets is not None:
        required["token-secret"] = secrets
    return model_cache.compose(protocol.Request(composite=xr, observed=observed or {},
                                           required=required))


def resolve_job(outcome: protocol.Outcome) -> dict:
    return outcome.desired[composed_key(outcome, "resolve-job")][0]["spec"]["forProvider"]["manifest"]


def args_of(job: dict) -> list[str]:
    return job["spec"]["template"]["spec"]["containers"][0]["args"]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def record(commit: str = S3_COMMIT, manifest: list | None = None, **overrides) -> dict:
    manifest = MANIFEST if manifest is None else manifest
    data = {"phase": "Resolved", "commit": commit, "files": str(len(manifest)),
            "bytes": str(sum(r["size"] for r in manifest)),
            "manifestDigest": sources.digest_of_manifest(manifest) if manifest else "0" * 64,
            "manifest": json.dumps(manifest)}
    data.update(overrides)
    return data


def resolved(xr: dict, data: dict) -> protocol.Outcome:
    """The cache composed again with its resolve record observed."""
    first = compose(xr, secrets=[SECRET])
    observed = {k: observed_object(r) for k, (r, _) in first.desired.items()}
    key = composed_key(first, "resolve-configmap-")
    observed[key] = observed_object(first.desired[key][0], data=data)
    return compose(xr, observed, secrets=[SECRET])


# --- the API ------------------------------------------------------------------------------


@pytest.mark.parametrize("source", [
    {},
    {"huggingFace": {"repo": "org/name"}, **S3_SOURCE},
    {**S3_SOURCE, **VOLUME_SOURCE},
])
def test_a_cache_sets_exactly_one_source(source):
    with pytest.raises(specs.InputError, match="exactly one of huggingFace, s3, oci or volume"):
        compose(cache(source))


def test_a_volume_manifest_is_a_hub_listing_or_a_file_not_both():
    source = {"volume": {"claimName": "weights", "manifest": {
        "huggingFace": {"repo": "org/name"}, "file": "m.json"}}}
    with pytest.raises(specs.InputError, match="at most one of huggingFace or file"):
        compose(cache(source))


@pytest.mark.parametrize("field, value", [
    ("bucket", "Not_A_Bucket"), ("prefix", "/leading"), ("prefix", "a/../b"),
    ("region", "US East"),
])
def test_a_malformed_s3_location_names_the_field(field, value):
    source = copy.deepcopy(S3_SOURCE)
    source["s3"][field] = value
    with pytest.raises(specs.InputError, match=f"spec.source.s3.{field}"):
        compose(cache(source))


# --- resolve ------------------------------------------------------------------------------


def test_an_s3_source_resolves_with_the_s3_flags_and_its_credentials_as_files():
    job = resolve_job(compose(cache(S3_SOURCE), secrets=[SECRET]))
    args = args_of(job)
    assert args[0] == "resolve" and "--revision" not in args and "--compare" not in args
    assert (flag(args, "--s3-bucket"), flag(args, "--s3-prefix"), flag(args, "--s3-region"),
            flag(args, "--s3-endpoint")) == ("models", "llama/8b", "us-east-1",
                                              "https://s3.example.com")
    assert flag(args, "--credentials-dir") == sources.CREDENTIALS_MOUNT_PATH
    pod = job["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts[sources.CREDENTIALS_MOUNT_PATH]["readOnly"] is True
    assert restricted_violations(pod) == []


def test_s3_credentials_are_copied_key_by_key_from_the_users_secret_never_inlined():
    outcome = compose(cache(S3_SOURCE), secrets=[SECRET])
    secret = outcome.desired[composed_key(outcome, "resolve-token-")][0]
    assert "data" not in secret["spec"]["forProvider"]["manifest"]
    assert [(r["patchesFrom"]["name"], r["patchesFrom"]["fieldPath"], r["toFieldPath"])
            for r in secret["spec"]["references"]] == [
        ("s3-keys", "data.AWS_ACCESS_KEY_ID", "data.AWS_ACCESS_KEY_ID"),
        ("s3-keys", "data.AWS_SECRET_ACCESS_KEY", "data.AWS_SECRET_ACCESS_KEY")]
    assert "c2VjcmV0" not in json.dumps(outcome.status)


def test_custom_credential_keys_are_read_from_the_users_secret_under_their_names():
    source = copy.deepcopy(S3_SOURCE)
    source["s3"]["credentialsSecretRef"] = {"name": "s3-keys", "accessKeyIdKey": "id",
                                            "secretAccessKeyKey": "key"}
    secret = {**SECRET, "data": {"id": "a", "key": "b"}}
    outcome = compose(cache(source), secrets=[secret])
    secret_object = outcome.desired[composed_key(outcome, "resolve-token-")][0]
    refs = secret_object["spec"]["references"]
    assert [r["patchesFrom"]["fieldPath"] for r in refs] == ["data.id", "data.key"]
    assert [r["toFieldPath"] for r in refs] == ["data.AWS_ACCESS_KEY_ID",
                                                "data.AWS_SECRET_ACCESS_KEY"]


def test_a_missing_credentials_secret_holds_the_resolve_naming_the_field():
    outcome = compose(cache(S3_SOURCE), secrets=[])
    resolved_condition = condition(outcome, "Resolved")
    assert resolved_condition.status == "False"
    assert "spec.source.s3.credentialsSecretRef" in resolved_condition.message
    assert not composed_key(outcome, "resolve-job")


def test_a_volume_with_a_manifest_file_resolves_it_from_the_claim_mounted_read_only():
    job = resolve_job(compose(cache(VOLUME_SOURCE)))
    args = args_of(job)
    assert flag(args, "--manifest-file") == \
        f"{job_mounts.SOURCE_MOUNT_PATH}/{sources.DEFAULT_MANIFEST_FILE}"
    pod = job["spec"]["template"]["spec"]
    claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"] == {"claimName": "weights", "readOnly": True}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == claim["name"])
    assert mount == {"name": claim["name"], "mountPath": job_mounts.SOURCE_MOUNT_PATH,
                     "readOnly": True}


def test_a_volume_checked_against_the_hub_resolves_the_hub_listing_without_the_claim():
    source = {"volume": {"claimName": "weights", "manifest": {
        "huggingFace": {"repo": "org/name", "revision": "v1"}}}}
    job = resolve_job(compose(cache(source)))
    args = args_of(job)
    assert (flag(args, "--repo"), flag(args, "--revision")) == ("org/name", "v1")
    assert not any("persistentVolumeClaim" in v for v in job["spec"]["template"]["spec"]["volumes"])


def test_the_resolve_step_is_valid_kubernetes():
    for xr in (cache(S3_SOURCE), cache(VOLUME_SOURCE)):
        for _, manifest in iter_remote_manifests(compose(xr, secrets=[SECRET])):
            assert_valid_k8s(manifest)


def test_the_pinned_manifest_is_latched_with_the_result_and_fanned_out():
    outcome = resolved(cache(S3_SOURCE), record())
    latched = outcome.status["resolved"]
    assert (latched["commit"], latched["manifestDigest"]) == (S3_COMMIT, DIGEST)
    assert latched["manifest"] == MANIFEST
    assert latched["repo"] == "s3/models/llama/8b"
    spec = hydrations(outcome)["gpu-east-1"]["spec"]
    assert (spec["commit"], spec["manifestDigest"]) == (S3_COMMIT, DIGEST)
    assert spec["source"]["s3"]["bucket"] == "models"


def test_a_manifest_over_2000_files_is_not_latched():
    many = [{"path": f"f{i:05d}", "size": 1, "sha256": "3" * 64} for i in range(2001)]
    outcome = resolved(cache(S3_SOURCE), record(manifest=many))
    resolved_condition = condition(outcome, "Resolved")
    assert (resolved_condition.status, resolved_condition.reason) == ("False", "InvalidSource")
    assert "more than 2000 files" in resolved_condition.message
    assert "narrow spec.source.allowPatterns" in resolved_condition.message
    assert hydrations(outcome) == {}


def test_a_manifest_that_does_not_hash_to_the_stated_digest_is_not_latched():
    outcome = resolved(cache(S3_SOURCE), record(manifestDigest="f" * 64))
    assert condition(outcome, "Resolved").reason == "InvalidSource"
    assert "does not hash to its manifestDigest" in condition(outcome, "Resolved").message
    assert hydrations(outcome) == {} and "resolved" not in outcome.status


def test_a_hub_source_latches_no_manifest():
    xr = model_cache_xr(placement={"clusterNames": ["gpu-east-1"]})
    first = compose(xr)
    observed = {k: observed_object(r) for k, (r, _) in first.desired.items()}
    hub_record = {"phase": "Resolved", "commit": "4f1c2b0d9e8a7c6b5a493827161504f3e2d1c0b9",
                  "bytes": "10", "files": "1", "manifestDigest": DIGEST}
    key = composed_key(first, "resolve-configmap-")
    observed[key] = observed_object(first.desired[key][0], data=hub_record)
    assert "manifest" not in compose(xr, observed).status["resolved"]


def test_a_changed_prefix_resolves_again_but_other_credentials_do_not():
    digest = model_cache.read_spec(cache(S3_SOURCE)["spec"]).source_digest
    moved = copy.deepcopy(S3_SOURCE)
    moved["s3"]["prefix"] = "llama/70b"
    rotated = copy.deepcopy(S3_SOURCE)
    rotated["s3"]["credentialsSecretRef"] = {"name": "other-keys"}
    assert model_cache.read_spec(cache(moved)["spec"]).source_digest != digest
    assert model_cache.read_spec(cache(rotated)["spec"]).source_digest == digest


# --- hydrations ---------------------------------------------------------------------------


def s3_hydration(source: dict | None = None) -> dict:
    return hydration_xr(source={**(source or S3_SOURCE), "allowPatterns": [],
                                "ignorePatterns": []},
                        commit=S3_COMMIT, manifestDigest=DIGEST)


def volume_hydration(manifest: dict | None = None) -> dict:
    source = copy.deepcopy(VOLUME_SOURCE)
    if manifest is not None:
        source["volume"]["manifest"] = manifest
    return hydration_xr(source={**source, "allowPatterns": [], "ignorePatterns": []},
                        commit=VOL_COMMIT, manifestDigest=DIGEST)


def model_cache_with(commit: str, manifest: list[dict]) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": "qwen", "namespace": "ml"},
            "status": {"resolved": {"commit": commit, "manifestDigest": DIGEST,
                                    "manifest": manifest}}}


def compose_hydration(xr: dict, observed: dict | None = None, caches: list | None = None,
                      commit: str = S3_COMMIT) -> protocol.Outcome:
    request = hydration_request(xr, observed=observed)
    request.required["model-cache"] = [model_cache_with(commit, MANIFEST)] if caches is None \
        else caches
    return model_cache_hydration.compose(request)


def settled(xr: dict, commit: str = S3_COMMIT, states: dict | None = None,
            data: dict | None = None) -> tuple[protocol.Outcome, dict]:
    """Composed twice: the second time with everything of the first observed."""
    first = compose_hydration(xr, commit=commit)
    observed = observe(first, states={"volume": {"phase": "Bound"}, **(states or {})},
                       data=data)
    return compose_hydration(xr, observed, commit=commit), observed


def job_of(outcome: protocol.Outcome) -> dict:
    key = next(k for k in outcome.desired if k.startswith(hydration_objects.JOB_PREFIX))
    return outcome.desired[key][0]["spec"]["forProvider"]["manifest"]


def test_an_s3_hydration_requires_its_model_cache_by_name():
    outcome = compose_hydration(s3_hydration())
    assert outcome.requirements["model-cache"] == protocol.Requirement(
        naming.API_VERSION, "ModelCache", match_name="qwen", namespace="ml")


MANIFEST_KEY = f"manifest-{S3_COMMIT[:10]}-{DIGEST[:6]}"


def test_the_manifest_configmap_carries_the_latched_manifest_named_for_its_content():
    outcome, _ = settled(s3_hydration())
    configmap = outcome.desired[MANIFEST_KEY][0]["spec"]["forProvider"]["manifest"]
    assert configmap["metadata"]["name"] == naming.child_name("qwen", "manifest",
                                                           f"{S3_COMMIT[:10]}-{DIGEST[:6]}")
    assert json.loads(configmap["data"]["manifest.json"]) == MANIFEST


def test_a_re_pinned_manifest_is_a_new_object_so_the_old_configmap_is_deleted():
    first, observed = settled(s3_hydration())
    new_commit = "c" * 40
    outcome = compose_hydration(hydration_xr(
        source={**S3_SOURCE, "allowPatterns": [], "ignorePatterns": []},
        commit=new_commit, manifestDigest=DIGEST), observed, commit=new_commit)
    new_key = f"manifest-{new_commit[:10]}-{DIGEST[:6]}"
    assert MANIFEST_KEY in first.desired
    assert new_key in outcome.desired and MANIFEST_KEY not in outcome.desired
    assert outcome.desired[new_key][0]["spec"]["forProvider"]["manifest"]["metadata"]["name"] == \
        naming.child_name("qwen", "manifest", f"{new_commit[:10]}-{DIGEST[:6]}")


def test_an_s3_fetch_pins_commit_digest_and_manifest_file():
    outcome, _ = settled(s3_hydration())
    job = job_of(outcome)
    args = args_of(job)
    assert args[0] == "fetch"
    assert (flag(args, "--commit"), flag(args, "--manifest-digest"),
            flag(args, "--manifest-file"), flag(args, "--s3-bucket"),
            flag(args, "--credentials-dir")) == (S3_COMMIT, DIGEST, job_mounts.MANIFEST_FILE,
                                                 "models", sources.CREDENTIALS_MOUNT_PATH)
    container = job["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {job_mounts.MANIFEST_MOUNT_PATH, sources.CREDENTIALS_MOUNT_PATH,
            agent_job.CACHE_MOUNT_PATH} <= mounts
    assert restricted_violations(job["spec"]["template"]["spec"]) == []


def test_a_flat_s3_layout_is_passed_to_the_fetch():
    source = copy.deepcopy(S3_SOURCE)
    source["s3"]["layout"] = "Flat"
    xr = s3_hydration(source)
    assert flag(args_of(job_of(settled(xr)[0])), "--layout") == "flat"


@pytest.mark.parametrize("caches, said", [
    (None, "waiting for Crossplane to fetch ModelCache qwen"),
    ([], "ModelCache qwen does not exist"),
    ([model_cache_with(S3_COMMIT, MANIFEST[:1])], "does not hash to spec.manifestDigest"),
    ([model_cache_with("s3-" + "9" * 40, MANIFEST)], "has not latched commit"),
])
def test_a_hydration_without_the_matching_manifest_waits_and_fetches_nothing(caches, said):
    request = hydration_request(s3_hydration())
    if caches is not None:
        request.required["model-cache"] = caches
    outcome = model_cache_hydration.compose(request)
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "AwaitingManifest")
    assert said in outcome.status["message"]
    assert not any(k.startswith(hydration_objects.JOB_PREFIX) for k in outcome.desired)


def test_an_existing_volume_is_verified_in_place_and_never_composed():
    outcome, _ = settled(volume_hydration(), commit=VOL_COMMIT)
    assert "volume" not in outcome.desired
    job = job_of(outcome)
    args = args_of(job)
    assert args[:6] == ["verify", "--dest", f"{job_mounts.SOURCE_MOUNT_PATH}/llama-8b",
                        "--layout", "flat", "--progress-configmap"]
    assert (flag(args, "--manifest-file"), flag(args, "--manifest-digest")) == \
        (job_mounts.MANIFEST_FILE, DIGEST)
    claims = [v["persistentVolumeClaim"] for v in job["spec"]["template"]["spec"]["volumes"]
              if "persistentVolumeClaim" in v]
    assert claims == [{"claimName": "weights", "readOnly": True}]


def test_an_existing_volume_checked_against_the_hub_verifies_the_pinned_commit():
    commit = "4f1c2b0d9e8a7c6b5a493827161504f3e2d1c0b9"
    xr = hydration_xr(source={"volume": {"claimName": "weights", "manifest": {"huggingFace": {
        "repo": "org/name"}}}, "allowPatterns": [], "ignorePatterns": []},
        commit=commit, manifestDigest=DIGEST)
    first = model_cache_hydration.compose(hydration_request(xr))
    outcome = model_cache_hydration.compose(hydration_request(xr, observed=observe(first)))
    args = args_of(job_of(outcome))
    assert (args[0], flag(args, "--repo"), flag(args, "--revision")) == \
        ("verify", "org/name", commit)
    assert "model-cache" not in outcome.requirements and "manifest" not in outcome.desired


def test_a_verified_volume_is_ready_served_from_the_users_claim_and_never_pruned():
    first, _ = settled(volume_hydration(), commit=VOL_COMMIT)
    job_key = next(k for k in first.desired if k.startswith(hydration_objects.JOB_PREFIX))
    observed = observe(first, states={job_key: job_complete()})
    request = hydration_request(volume_hydration(), observed=observed,
                                replicas=[])
    request.required["model-cache"] = [model_cache_with(VOL_COMMIT, MANIFEST)]
    outcome = model_cache_hydration.compose(request)
    status = outcome.status
    assert status["phase"] == "Ready"
    assert (status["volumeName"], status["bytesFrom"]) == ("weights", "Volume")
    assert not any(k.startswith(hydration_objects.PRUNE_PREFIX) for k in outcome.desired)
    assert not any(k.startswith(hydration_objects.JOB_PREFIX) for k in outcome.desired)


def full_cluster(evicted: tuple[str, ...] = ()) -> dict:
    """A FleetCluster with a capacity, above its high watermark, that admitted nothing."""
    cluster = fleet_cluster(CLUSTER, cache={"capacity": "100Gi", "highWatermark": 80,
                                            "lowWatermark": 70})
    cluster["status"]["cache"] = {"capacityBytes": 100 * GIB, "usedBytes": 95 * GIB,
                                  "admitted": [], "evicted": list(evicted)}
    return cluster


def on_full_cluster(observed: dict, evicted: tuple[str, ...] = ()) -> protocol.Outcome:
    xr = volume_hydration()
    request = hydration_request(xr, observed=observed, cluster=full_cluster(evicted), replicas=[])
    request.required["model-cache"] = [model_cache_with(VOL_COMMIT, MANIFEST)]
    return model_cache_hydration.compose(request)


def test_an_existing_volume_is_verified_at_once_on_a_full_cluster_that_never_admitted_it():
    outcome = on_full_cluster(observe(on_full_cluster({})))
    assert outcome.status["reason"] != "CapacityLow"
    assert any(k.startswith(hydration_objects.JOB_PREFIX) for k in outcome.desired)


def test_an_existing_volume_listed_as_evicted_keeps_serving_the_users_claim():
    first, _ = settled(volume_hydration(), commit=VOL_COMMIT)
    job_key = next(k for k in first.desired if k.startswith(hydration_objects.JOB_PREFIX))
    xr = volume_hydration()
    status = on_full_cluster(observe(first, states={job_key: job_complete()}),
                             evicted=(f"{xr['metadata']['namespace']}/{xr['metadata']['name']}",)
                             ).status
    assert (status["phase"], status["volumeName"]) == ("Ready", "weights")


def test_a_volume_that_does_not_match_fails_naming_the_files():
    first, _ = settled(volume_hydration(), commit=VOL_COMMIT)
    job_key = next(k for k in first.desired if k.startswith(hydration_objects.JOB_PREFIX))
    said = "2 of 2 files in /var/run/fleetcache/source/llama-8b do not match the manifest: " \
           "config.json (digest mismatch), model.safetensors (size 5, want 3221225472)"
    observed = observe(first, states={job_key: job_failed_exit(21)},
                       data={"progress": {"phase": "Failed", "reason": "SourceVolumeMismatch",
                                          "message": said}})
    outcome = compose_hydration(volume_hydration(), observed, commit=VOL_COMMIT)
    assert (outcome.status["phase"], outcome.status["reason"]) == \
        ("Failed", "SourceVolumeMismatch")
    assert "config.json (digest mismatch), model.safetensors" in outcome.status["message"]
    assert exitcodes.BY_CODE[21].remedy.split(".")[0] in outcome.status["message"]


def test_a_hydration_reports_origin_bytes_without_a_mirror():
    outcome, observed = settled(s3_hydration())
    job_key = next(k for k in outcome.desired if k.startswith(hydration_objects.JOB_PREFIX))
    observed = observe(outcome, states={"volume": {"phase": "Bound"}, job_key: job_running()})
    assert compose_hydration(s3_hydration(), observed).status["bytesFrom"] == "Origin"


def test_every_composed_object_of_an_s3_or_volume_hydration_is_valid_kubernetes():
    for xr, commit in ((s3_hydration(), S3_COMMIT), (volume_hydration(), VOL_COMMIT)):
        outcome, _ = settled(xr, commit=commit)
        for _, manifest in iter_remote_manifests(outcome):
            assert_valid_k8s(manifest)
        assert "c2VjcmV0" not in json.dumps(outcome.status)


def test_the_cluster_row_carries_where_its_bytes_came_from():
    xr = cache(S3_SOURCE)
    outcome = resolved(xr, record())
    observed = {k: observed_object(r) for k, (r, _) in outcome.desired.items()
                if k.startswith("resolve-")}
    for cluster, hydration in hydrations(outcome).items():
        observed[f"hydration-{cluster}"] = with_status(hydration, phase="Ready",
                                                       bytesFrom="Origin")
    xr = with_status(xr, resolved=outcome.status["resolved"])
    rows = {r["name"]: r for r in compose(xr, observed, secrets=[SECRET]).status["clusters"]}
    assert rows[CLUSTER]["bytesFrom"] == "Origin"


def test_a_latched_s3_result_without_its_manifest_resolves_again():
    xr = cache(S3_SOURCE)
    latched = resolved(xr, record()).status["resolved"]
    stripped = {k: v for k, v in latched.items() if k != "manifest"}
    assert not composed_key(compose(with_status(xr, resolved=latched), secrets=[SECRET]),
                            "resolve-job")
    again = compose(with_status(xr, resolved=stripped), secrets=[SECRET])
    assert composed_key(again, "resolve-job") and hydrations(again) == {}


def test_once_ready_the_credentials_and_the_manifest_configmap_are_no_longer_composed():
    first, _ = settled(s3_hydration())
    assert {"token-secret", MANIFEST_KEY} <= set(first.desired)
    job_key = next(k for k in first.desired if k.startswith(hydration_objects.JOB_PREFIX))
    observed = observe(first, states={"volume": {"phase": "Bound"}, job_key: job_complete()})
    request = hydration_request(s3_hydration(), observed=observed, replicas=[])
    request.required["model-cache"] = [model_cache_with(S3_COMMIT, MANIFEST)]
    outcome = model_cache_hydration.compose(request)
    assert outcome.status["phase"] == "Ready"
    assert not {"token-secret", MANIFEST_KEY, job_key} & set(outcome.desired)
