"""The fleet mirror in the composers (issue 12 item 3, contract §D): one publisher by name,
readers composed only once the mirror holds the resolved commit, a failed publisher hands
over, roles and credentials in the hydration, and where each cluster's bytes came from."""

from __future__ import annotations

import json

from fleetcache.functions import protocol
from fleetcache.functions.composers import model_cache, model_cache_hydration
from fleetcache.functions.decisions import sources
from fleetcache.functions.k8s import hydration_objects
from tests.support.builders import hydration_request, hydration_xr, job_running, observe, with_status
from tests.support.fleet import (
    COMMIT,
    DIGEST,
    GIB,
    fleet_cluster,
    grant_admitting,
    hydrations,
    model_cache_xr,
    with_resolved,
)

NAMES = ["gpu-a", "gpu-b", "gpu-c"]
FLEET = [fleet_cluster(n) for n in NAMES]
MIRROR = {"s3": {"bucket": "fleet-mirror", "endpoint": "https://minio.example.com",
                 "credentialsSecretRef": {"name": "mirror-keys"}}, "onMissing": "Fail"}
MIRROR_KEYS = {"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "mirror-keys", "namespace": "ml"},
               "data": {"AWS_ACCESS_KEY_ID": "QUtJQQ==", "AWS_SECRET_ACCESS_KEY": "c2VjcmV0"}}


def cache() -> dict:
    return with_resolved(model_cache_xr(placement={"clusterNames": NAMES},
                                        distribution={"mirror": MIRROR}))


def compose(xr: dict, observed: dict | None = None) -> protocol.Outcome:
    return model_cache.compose(protocol.Request(
        composite=xr, observed=observed or {},
        required={"fleet-clusters": FLEET, "model-cache-grant": [grant_admitting(xr)],
                  "mirror-secret-mirror-keys": [MIRROR_KEYS]}))


def observed_as(outcome: protocol.Outcome, **phases: str) -> dict:
    """Each composed hydration observed in the phase given for its cluster."""
    return {f"hydration-{c}": with_status(h, phase=phases.get(c, "Hydrating"),
                                          progress={"bytesDone": 0, "bytesTotal": 3 * GIB})
            for c, h in hydrations(outcome).items()}


def rows(outcome: protocol.Outcome) -> dict[str, dict]:
    return {r["name"]: r for r in outcome.status["clusters"]}


def test_only_the_first_cluster_by_name_is_composed_and_publishes():
    outcome = compose(cache())
    assert list(hydrations(outcome)) == ["gpu-a"]
    mirror = hydrations(outcome)["gpu-a"]["spec"]["mirror"]
    assert (mirror["role"], mirror["onMissing"], mirror["s3"]["bucket"]) == \
        ("Publisher", "Fail", "fleet-mirror")
    assert outcome.status["mirror"] == {
        "publisher": "gpu-a", "published": False, "commit": COMMIT,
        "groups": [{"region": "", "bucket": "fleet-mirror", "publisher": "gpu-a",
                    "published": False, "clusters": 3}]}


def test_the_others_wait_for_the_mirror_naming_the_publisher():
    outcome = compose(cache())
    for name in ("gpu-b", "gpu-c"):
        row = rows(outcome)[name]
        assert (row["phase"], row["reason"]) == ("Pending", "WaitingForMirror")
        assert "waiting for gpu-a to publish" in row["message"]


def test_once_the_publisher_is_ready_the_mirror_is_published_and_readers_are_composed():
    first = compose(cache())
    outcome = compose(cache(), observed_as(first, **{"gpu-a": "Ready"}))
    assert outcome.status["mirror"]["published"] is True
    roles = {c: h["spec"]["mirror"]["role"] for c, h in hydrations(outcome).items()}
    assert roles == {"gpu-a": "Publisher", "gpu-b": "Reader", "gpu-c": "Reader"}


def test_published_is_latched_for_the_commit():
    xr = with_status(cache(), resolved=cache()["status"]["resolved"],
                     mirror={"publisher": "gpu-a", "published": True, "commit": COMMIT})
    assert set(hydrations(compose(xr))) == set(NAMES)


def test_a_latch_for_another_commit_publishes_nothing():
    xr = with_status(cache(), resolved=cache()["status"]["resolved"],
                     mirror={"publisher": "gpu-a", "published": True, "commit": "0" * 40})
    assert list(hydrations(compose(xr))) == ["gpu-a"]


def test_a_failed_publisher_hands_over_to_the_next_name():
    first = compose(cache())
    outcome = compose(cache(), observed_as(first, **{"gpu-a": "Failed"}))
    assert outcome.status["mirror"]["publisher"] == "gpu-b"
    composed = hydrations(outcome)
    assert composed["gpu-b"]["spec"]["mirror"]["role"] == "Publisher"
    assert composed["gpu-a"]["spec"]["mirror"]["role"] == "Publisher"  # kept as it ran
    assert rows(outcome)["gpu-c"]["reason"] == "WaitingForMirror"


def test_with_every_hydration_failed_nobody_publishes():
    xr = with_status(cache(), resolved=cache()["status"]["resolved"],
                     mirror={"publisher": "gpu-a", "published": True, "commit": COMMIT})
    observed = {f"hydration-{n}": with_status(h, phase="Failed")
                for n, h in hydrations(compose(xr)).items()}
    status = compose(cache(), observed).status["mirror"]
    assert (status["publisher"], status["published"]) == ("", False)


def test_a_cluster_that_is_not_ready_is_never_chosen_to_publish():
    fleet = [fleet_cluster("gpu-a", ready=False), *FLEET[1:]]
    outcome = model_cache.compose(protocol.Request(
        composite=cache(), observed={},
        required={"fleet-clusters": fleet, "model-cache-grant": [grant_admitting(cache())]}))
    assert outcome.status["mirror"]["publisher"] == "gpu-b"


def test_an_existing_volume_ignores_the_mirror():
    xr = model_cache_xr(source={"volume": {"claimName": "weights"}},
                        placement={"clusterNames": NAMES}, distribution={"mirror": MIRROR})
    assert model_cache.read_spec(xr["spec"]).mirror is None


def test_rows_carry_where_each_clusters_bytes_came_from():
    first = compose(cache(), observed_as(compose(cache()), **{"gpu-a": "Ready"}))
    observed = {k: with_status(v, **v["status"], bytesFrom="Mirror" if "gpu-a" not in k
                               else "Origin")
                for k, v in observed_as(first, **{n: "Ready" for n in NAMES}).items()}
    outcome = compose(cache(), observed)
    assert {n: r["bytesFrom"] for n, r in rows(outcome).items()} == \
        {"gpu-a": "Origin", "gpu-b": "Mirror", "gpu-c": "Mirror"}


# --- the hydration's side -----------------------------------------------------------------


def mirrored(role: str) -> dict:
    return hydration_xr(mirror={**MIRROR, "role": role})


def job_args(outcome: protocol.Outcome) -> list[str]:
    key = next(k for k in outcome.desired if k.startswith(hydration_objects.JOB_PREFIX))
    return outcome.desired[key][0]["spec"]["forProvider"]["manifest"]["spec"]["template"][
        "spec"]["containers"][0]["args"]


def settled(xr: dict, data: dict | None = None) -> protocol.Outcome:
    first = model_cache_hydration.compose(hydration_request(xr))
    observed = observe(first, states={"volume": {"phase": "Bound"}}, data=data)
    return model_cache_hydration.compose(hydration_request(xr, observed=observed))


def test_a_reader_fetch_names_the_mirror_its_role_and_policy():
    args = job_args(settled(mirrored("Reader")))
    tail = args[args.index("--mirror-bucket"):]
    assert tail == ["--mirror-bucket", "fleet-mirror", "--mirror-prefix", "fleetcache",
                    "--mirror-region", "us-east-1", "--mirror-endpoint",
                    "https://minio.example.com", "--mirror-credentials-dir",
                    sources.MIRROR_CREDENTIALS_MOUNT_PATH, "--mirror-role", "reader",
                    "--mirror-on-missing", "fail"]


def test_a_hub_fetch_through_the_mirror_pins_the_commit_and_the_resolved_manifest_digest():
    args = job_args(settled(mirrored("Reader")))
    assert args[args.index("--revision") + 1] == COMMIT
    assert args[args.index("--manifest-digest") + 1] == DIGEST  # the reader plans from the mirror's manifest


def test_the_publisher_fetch_says_publisher():
    args = job_args(settled(mirrored("Publisher")))
    assert args[args.index("--mirror-role") + 1] == "publisher"


def test_mirror_credentials_are_copied_and_mounted_like_the_token():
    outcome = settled(mirrored("Reader"))
    secret = outcome.desired["mirror-secret"][0]
    assert [r["patchesFrom"]["name"] for r in secret["spec"]["references"]] == \
        ["mirror-keys", "mirror-keys"]
    key = next(k for k in outcome.desired if k.startswith(hydration_objects.JOB_PREFIX))
    pod = outcome.desired[key][0]["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]
    assert sources.MIRROR_CREDENTIALS_MOUNT_PATH in {
        m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}


def test_the_hydration_reports_the_agents_bytes_from_record():
    record = {"phase": "Hydrating", "commit": COMMIT, "bytesFrom": "Mirror",
              "originBytes": "0", "mirrorBytes": str(3 * GIB)}
    xr = mirrored("Reader")
    first = settled(xr)
    key = next(k for k in first.desired if k.startswith(hydration_objects.JOB_PREFIX))
    observed = observe(first, states={"volume": {"phase": "Bound"}, key: job_running()},
                       data={"progress": record})
    status = model_cache_hydration.compose(hydration_request(xr, observed=observed)).status
    assert (status["bytesFrom"], status["originBytes"], status["mirrorBytes"]) == \
        ("Mirror", 0, 3 * GIB)
    assert "mirror-keys" not in json.dumps(status)
