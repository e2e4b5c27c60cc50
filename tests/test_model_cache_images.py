"""Engine images on a ModelCache (spec.images, DESIGN §8): each is pinned to one digest for the
fleet (functions/decisions/image_pins.py) by one resolve-images Job, latched in status.images,
handed to every hydration with its digest, and summed back into the IMAGES column; the grant
refuses images in a pool it does not grant. design/engine-images.md."""

from __future__ import annotations

import copy
import json

from fleetcache.functions import protocol
from fleetcache.functions.composers import model_cache
from fleetcache.functions.decisions import image_pins
from fleetcache.functions.views import grant as grant_view
from tests.support.builders import composed_key, observe
from tests.support.fleet import fleet_cluster, grant_admitting, hydrations, model_cache_xr, with_resolved

FLEET = [fleet_cluster("gpu-east-1"), fleet_cluster("gpu-west-1")]
TAGGED = "docker.io/vllm/vllm-openai:v0.11.0"
PINNED = "registry.example.com/tools/probe@sha256:" + "c" * 64
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
VLLM = {"image": TAGGED, "command": ["vllm", "serve", "--help=all"]}


def cache(*images: dict, status: dict | None = None) -> dict:
    xr = with_resolved(model_cache_xr(images=[dict(i) for i in images],
                                      placement={"clusterNames": ["gpu-east-1", "gpu-west-1"]}))
    xr["status"].update(status or {})
    return xr


def compose(xr: dict, observed: dict | None = None) -> protocol.Outcome:
    required = {"fleet-clusters": FLEET, "model-cache-grant": [grant_admitting(xr)]}
    return model_cache.compose(protocol.Request(composite=xr, observed=observed or {}, required=required))


def resolve_args(outcome: protocol.Outcome) -> list[str]:
    job = outcome.desired[composed_key(outcome, "image-resolve-job")][0]["spec"]["forProvider"]["manifest"]
    return job["spec"]["template"]["spec"]["containers"][0]["args"]


def resolved_record(outcome: protocol.Outcome, images: list[dict]) -> dict:
    """What the resolve-images Job's record reads once the agent wrote it."""
    key = composed_key(outcome, "image-resolve-configmap")
    return observe(outcome, data={key: {"phase": "Resolved", "images": json.dumps(images)}})


def test_an_image_by_tag_is_resolved_by_one_job_on_the_first_ready_target():
    outcome = compose(cache(VLLM))
    args = resolve_args(outcome)
    assert args[:3] == ["resolve-images", "--image", TAGGED]
    assert outcome.status["imagesSummary"] == "resolving"
    assert outcome.status["images"] == [{"image": TAGGED}]


def test_hydrations_get_no_image_until_it_is_pinned():
    assert all("images" not in h["spec"] for h in hydrations(compose(cache(VLLM))).values())


def test_the_record_pins_the_digest_and_every_hydration_pulls_it():
    first = compose(cache(VLLM))
    outcome = compose(cache(VLLM), resolved_record(first, [{"image": TAGGED, "digest": DIGEST_A}]))
    for h in hydrations(outcome).values():
        assert h["spec"]["images"] == [{"image": TAGGED, "digest": DIGEST_A, "pullPolicy": "IfNotPresent",
                                        "command": ["vllm", "serve", "--help=all"]}]
    assert outcome.status["images"][0]["digest"] == DIGEST_A


def test_once_every_image_is_pinned_the_resolve_step_goes():
    first = compose(cache(VLLM))
    outcome = compose(cache(VLLM), resolved_record(first, [{"image": TAGGED, "digest": DIGEST_A}]))
    assert not [k for k in outcome.desired if k.startswith(model_cache.IMAGE_RESOLVE_STEP)]


def test_a_latched_digest_stands_while_the_image_stays():
    latched = {"images": [{"image": TAGGED, "digest": DIGEST_A}]}
    outcome = compose(cache(VLLM, status=latched))
    assert not [k for k in outcome.desired if k.startswith(model_cache.IMAGE_RESOLVE_STEP)]
    assert {h["spec"]["images"][0]["digest"] for h in hydrations(outcome).values()} == {DIGEST_A}


def test_an_image_by_digest_pins_itself_and_resolves_nothing():
    outcome = compose(cache({"image": PINNED, "command": ["probe"]}))
    assert not [k for k in outcome.desired if k.startswith(model_cache.IMAGE_RESOLVE_STEP)]
    assert outcome.status["images"][0]["digest"] == "sha256:" + "c" * 64


def test_a_new_image_resolves_only_itself_and_keeps_the_others_pins():
    latched = {"images": [{"image": TAGGED, "digest": DIGEST_A}]}
    other = {"image": "docker.io/lmsysorg/sglang:v0.5", "command": ["python3", "--version"]}
    outcome = compose(cache(VLLM, other, status=latched))
    assert resolve_args(outcome)[:3] == ["resolve-images", "--image", other["image"]]
    assert "--image" not in resolve_args(outcome)[3:]
    assert [i["image"] for i in next(iter(hydrations(outcome).values()))["spec"]["images"]] == [TAGGED]


def test_an_image_that_leaves_spec_images_leaves_status_and_the_hydrations():
    latched = {"images": [{"image": TAGGED, "digest": DIGEST_A}]}
    outcome = compose(cache(status=latched))
    assert "images" not in outcome.status
    assert all("images" not in h["spec"] for h in hydrations(outcome).values())


def test_a_failed_resolve_says_why_in_a_warning():
    first = compose(cache(VLLM))
    key = composed_key(first, "image-resolve-configmap")
    observed = observe(first, data={key: {"phase": "Failed", "reason": "OciNotFound",
                                          "message": "docker.io/vllm/vllm-openai:v0.11.0 not found"}})
    outcome = compose(cache(VLLM), observed)
    assert any("resolving spec.images on gpu-east-1 failed" in w for w in outcome.warnings)


def test_a_failed_resolve_shows_its_reason_in_the_images_column():
    first = compose(cache(VLLM))
    key = composed_key(first, "image-resolve-configmap")
    observed = observe(first, data={key: {"phase": "Failed", "reason": "AuthFailed", "message": "401"}})
    assert compose(cache(VLLM), observed).status["imagesSummary"] == "resolve failed (AuthFailed)"


def test_the_images_column_sums_the_nodes_holding_every_image_over_the_hydrations():
    latched = {"images": [{"image": TAGGED, "digest": DIGEST_A}]}
    first = compose(cache(VLLM, status=latched))
    observed = copy.deepcopy({k: v[0] for k, v in first.desired.items()})
    for resource in observed.values():
        if resource.get("kind") == "ModelCacheHydration":
            resource["status"] = {"images": {"desired": 4, "ready": 3, "failed": 1, "images": [
                {"image": TAGGED, "digest": DIGEST_A, "readyNodes": 3}]}}
    outcome = compose(cache(VLLM, status=latched), observed)
    assert outcome.status["imagesSummary"] == "1 image 6/8 (2 failed)"
    assert outcome.status["images"] == [{"image": TAGGED, "digest": DIGEST_A, "readyNodes": 6, "desiredNodes": 8}]


def test_pins_ignore_a_garbage_record():
    assert image_pins.pins_of([VLLM], None, {"phase": "Resolved", "images": "not json"}).unresolved == (TAGGED,)


def test_a_volume_cache_with_images_fills_its_pool_so_the_grant_checks_it():
    xr = model_cache_xr(images=[VLLM], storage={"nodePool": "gpu-large"})
    assert grant_view.node_pool(xr) == "gpu-large"
    assert grant_view.node_pool(model_cache_xr(storage={"nodePool": "gpu-large"})) == ""



# --- private images: spec.images[].pullSecretRef -------------------------------------------

PRIVATE = {**VLLM, "pullSecretRef": {"name": "regcred"}}


def resolve_pod(outcome: protocol.Outcome) -> dict:
    job = outcome.desired[composed_key(outcome, "image-resolve-job")][0]["spec"]["forProvider"]["manifest"]
    return job["spec"]["template"]["spec"]


def test_a_private_image_is_resolved_with_a_copy_of_its_pull_secret_mounted():
    outcome = compose(cache(PRIVATE))
    copy_of = outcome.desired[composed_key(outcome, "image-resolve-pull-0")][0]
    manifest = copy_of["spec"]["forProvider"]["manifest"]
    assert [(r["patchesFrom"]["name"], r["patchesFrom"]["fieldPath"]) for r in copy_of["spec"]["references"]] == \
        [("regcred", "data[.dockerconfigjson]")]
    assert "data" not in manifest
    pod = resolve_pod(outcome)
    mounted = {v["secret"]["secretName"]: v["name"] for v in pod["volumes"] if "secret" in v}
    assert manifest["metadata"]["name"] in mounted
    args = pod["containers"][0]["args"]
    path = args[args.index("--registry-config") + 1]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == mounted[manifest["metadata"]["name"]])
    assert path.startswith(mount["mountPath"] + "/")


def test_a_pull_secret_added_after_a_failed_resolve_is_a_new_job():
    """A Job's pod is immutable: the secret's mount needs a Job of its own."""
    assert composed_key(compose(cache(VLLM)), "image-resolve-job") != \
        composed_key(compose(cache(PRIVATE)), "image-resolve-job")


def test_the_hydrations_get_the_pull_secret_with_the_pinned_image():
    first = compose(cache(PRIVATE))
    outcome = compose(cache(PRIVATE), resolved_record(first, [{"image": TAGGED, "digest": DIGEST_A}]))
    assert all(h["spec"]["images"][0]["pullSecretRef"] == {"name": "regcred", "key": ".dockerconfigjson"}
               for h in hydrations(outcome).values())


def test_the_pull_secret_never_changes_a_pinned_digest_and_its_copy_goes_with_the_resolve_step():
    pinned = {"images": [{"image": TAGGED, "digest": DIGEST_A}]}
    outcome = compose(cache(PRIVATE, status=pinned))
    assert all(h["spec"]["images"][0]["digest"] == DIGEST_A for h in hydrations(outcome).values())
    assert not any(k.startswith("image-resolve-") for k in outcome.desired)
