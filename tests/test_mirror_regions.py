"""Per-region fleet mirrors and credentials Secrets checked before fan-out (issue 12, round-four
contract §A and §B): which mirror a cluster reads (its FleetCluster's region label), one
publisher per mirror, readers waiting only for their own mirror, hand-over within a mirror,
status.mirror.groups, CredentialsSecretMissing, and the XRD's rules for the new fields."""

from __future__ import annotations

import pytest

from fleetcache.apis import xrds
from fleetcache.functions import naming, protocol
from fleetcache.functions.composers import model_cache
from fleetcache.functions.decisions import mirror
from tests.support.builders import with_status
from tests.support.fleet import COMMIT, fleet_cluster, grant_admitting, hydrations, model_cache_xr, with_resolved
from tests.support.xrd import xrd_for

REGION = mirror.DEFAULT_REGION_LABEL
EU, US, DEFAULT = ({"bucket": "mirror-eu"}, {"bucket": "mirror-us"}, {"bucket": "mirror-all"})
REGIONAL = {"regions": [{"region": "eu-west-1", "s3": EU}, {"region": "us-east-1", "s3": US}]}
WITH_DEFAULT = {**REGIONAL, "s3": DEFAULT}


def cluster(name: str, region: str | None = None, *, ready: bool = True,
            phase: str | None = None, role: str | None = None,
            bucket: str | None = None) -> mirror.Candidate:
    """A target; with a phase, its hydration of COMMIT as composed for `bucket`."""
    labels = {REGION: region} if region else {}
    hydration = None
    if phase:
        hydration = {"spec": {"mirror": {"s3": {"bucket": bucket}, "role": role or "Reader"}},
                     "status": {"phase": phase}}
    return mirror.Candidate(name, labels, ready, hydration)


def decide(spec: dict, *candidates: mirror.Candidate, latched: dict | None = None
           ) -> mirror.Mirror:
    found = mirror.decide(spec, COMMIT, list(candidates), latched)
    assert found is not None
    return found


def by_region(fleet: mirror.Mirror) -> dict[str, dict]:
    return {g["region"]: g for g in fleet.as_status()["groups"]}


# --- mirror.decide ------------------------------------------------------------------------


@pytest.mark.parametrize("labels, bucket", [
    ({REGION: "eu-west-1"}, "mirror-eu"),
    ({REGION: "us-east-1"}, "mirror-us"),
    ({REGION: "ap-south-1"}, "mirror-all"),  # no entry for its region: the default mirror
    ({}, "mirror-all"),  # no region label: the default mirror
    ({"region": "eu-west-1"}, "mirror-all"),  # another label key is not the region
])
def test_a_cluster_reads_the_mirror_of_its_region_label_else_the_default(labels, bucket):
    assert mirror.location_for(WITH_DEFAULT, labels).bucket == bucket


def test_the_region_label_key_is_configurable():
    spec = {**REGIONAL, "regionLabel": "example.com/zone"}
    assert mirror.location_for(spec, {"example.com/zone": "us-east-1"}).bucket == "mirror-us"
    assert mirror.location_for(spec, {REGION: "us-east-1"}) is None


def test_without_a_default_mirror_a_cluster_of_no_listed_region_reads_the_origin():
    fleet = decide(REGIONAL, cluster("gpu-a", "ap-south-1"), cluster("gpu-b", "eu-west-1"))
    assert fleet.group_of("gpu-a") is None
    assert fleet.for_hydration("gpu-a", None) is None
    assert not fleet.waits("gpu-a")


def test_no_mirror_spec_decides_nothing():
    assert mirror.decide(None, COMMIT, [cluster("gpu-a")], None) is None


def test_each_mirror_has_its_own_publisher_the_first_ready_cluster_of_its_group_by_name():
    fleet = decide(REGIONAL, cluster("gpu-a", "us-east-1", ready=False),
                   cluster("gpu-b", "eu-west-1"), cluster("gpu-c", "us-east-1"),
                   cluster("gpu-d", "eu-west-1"), cluster("gpu-e", "us-east-1"))
    assert {r: g["publisher"] for r, g in by_region(fleet).items()} == \
        {"eu-west-1": "gpu-b", "us-east-1": "gpu-c"}
    roles = {n: fleet.for_hydration(n, None)["role"] for n in ("gpu-b", "gpu-c", "gpu-d")}
    assert roles == {"gpu-b": "Publisher", "gpu-c": "Publisher", "gpu-d": "Reader"}


def test_a_hydration_gets_its_groups_bucket_and_the_shared_on_missing():
    fleet = decide({**REGIONAL, "onMissing": "Fail"}, cluster("gpu-a", "eu-west-1"))
    assert fleet.for_hydration("gpu-a", None) == {"s3": EU, "onMissing": "Fail",
                                                  "role": "Publisher"}


def test_a_failed_publisher_hands_over_within_its_group_only():
    fleet = decide(REGIONAL,
                   cluster("gpu-a", "eu-west-1", phase="Failed", role="Publisher",
                           bucket="mirror-eu"),
                   cluster("gpu-b", "us-east-1"), cluster("gpu-c", "eu-west-1"))
    assert {r: g["publisher"] for r, g in by_region(fleet).items()} == \
        {"eu-west-1": "gpu-c", "us-east-1": "gpu-b"}


def test_readers_wait_only_for_their_own_groups_publisher():
    fleet = decide(REGIONAL,
                   cluster("gpu-a", "eu-west-1", phase="Ready", role="Publisher",
                           bucket="mirror-eu"),
                   cluster("gpu-b", "us-east-1", phase="Hydrating", role="Publisher",
                           bucket="mirror-us"),
                   cluster("gpu-c", "eu-west-1"), cluster("gpu-d", "us-east-1"))
    assert (fleet.waits("gpu-c"), fleet.waits("gpu-d")) == (False, True)
    assert "gpu-b" in fleet.waiting_message("gpu-d")
    assert "us-east-1" in fleet.waiting_message("gpu-d")


def test_published_is_true_only_when_every_groups_mirror_holds_the_commit():
    fleet = decide(REGIONAL,
                   cluster("gpu-a", "eu-west-1", phase="Ready", role="Publisher",
                           bucket="mirror-eu"),
                   cluster("gpu-b", "us-east-1"))
    assert {r: g["published"] for r, g in by_region(fleet).items()} == \
        {"eu-west-1": True, "us-east-1": False}
    assert fleet.as_status()["published"] is False


def test_a_publisher_ready_for_another_regions_bucket_publishes_nothing_here():
    fleet = decide(REGIONAL, cluster("gpu-a", "us-east-1", phase="Ready", role="Publisher",
                                     bucket="mirror-eu"))
    assert by_region(fleet)["us-east-1"]["published"] is False


def test_published_is_latched_per_group_for_the_commit():
    latched = {"commit": COMMIT, "published": False, "publisher": "gpu-a", "groups": [
        {"region": "eu-west-1", "bucket": "mirror-eu", "publisher": "gpu-a", "published": True},
        {"region": "us-east-1", "bucket": "mirror-us", "publisher": "gpu-b",
         "published": False}]}
    fleet = decide(REGIONAL, cluster("gpu-a", "eu-west-1", phase="Failed", role="Publisher",
                                     bucket="mirror-eu"),
                   cluster("gpu-b", "us-east-1"), cluster("gpu-c", "eu-west-1"),
                   latched=latched)
    assert {r: g["published"] for r, g in by_region(fleet).items()} == \
        {"eu-west-1": True, "us-east-1": False}
    assert not fleet.waits("gpu-c")


@pytest.mark.parametrize("latched", [
    {"commit": "0" * 40, "groups": [{"region": "eu-west-1", "bucket": "mirror-eu",
                                     "published": True}]},  # another commit
    {"commit": COMMIT, "groups": [{"region": "eu-west-1", "bucket": "old-eu",
                                   "published": True}]},  # the region's bucket changed since
])
def test_a_latch_of_another_commit_or_bucket_publishes_nothing(latched):
    fleet = decide(REGIONAL, cluster("gpu-a", "eu-west-1"), latched=latched)
    assert by_region(fleet)["eu-west-1"]["published"] is False


def test_status_lists_the_used_mirrors_default_first_with_their_cluster_counts():
    fleet = decide(WITH_DEFAULT, cluster("gpu-a", "us-east-1"), cluster("gpu-b"),
                   cluster("gpu-c", "us-east-1"))
    assert fleet.as_status() == {
        "publisher": "gpu-b", "published": False, "commit": COMMIT, "groups": [
            {"region": "", "bucket": "mirror-all", "publisher": "gpu-b", "published": False,
             "clusters": 1},
            {"region": "us-east-1", "bucket": "mirror-us", "publisher": "gpu-a",
             "published": False, "clusters": 2}]}


def test_without_a_default_mirror_the_first_region_names_the_publisher():
    fleet = decide(REGIONAL, cluster("gpu-a", "us-east-1"), cluster("gpu-b", "eu-west-1"))
    assert fleet.as_status()["publisher"] == "gpu-b"


# --- compose-model-cache ------------------------------------------------------------------


NAMES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
REGIONS = {"gpu-a": "eu-west-1", "gpu-b": "us-east-1", "gpu-c": "eu-west-1",
           "gpu-d": "us-east-1"}


def in_region(name: str) -> dict:
    """The FleetCluster labelled with its region."""
    resource = fleet_cluster(name)
    return {**resource, "metadata": {**resource["metadata"], "labels": {REGION: REGIONS[name]}}}


FLEET = [in_region(n) for n in NAMES]
KEYED = {"regions": [{"region": "eu-west-1", "s3": {**EU, "credentialsSecretRef":
                                                     {"name": "eu-keys"}}},
                     {"region": "us-east-1", "s3": {**US, "credentialsSecretRef":
                                                     {"name": "us-keys"}}}]}


def secret(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "ml"},
            "data": data or {"AWS_ACCESS_KEY_ID": "QUtJQQ==", "AWS_SECRET_ACCESS_KEY": "c2VjcmV0"}}


def cache(spec: dict = KEYED) -> dict:
    return with_resolved(model_cache_xr(placement={"clusterNames": NAMES},
                                        distribution={"mirror": spec}))


def compose(xr: dict, observed: dict | None = None, **secrets: list) -> protocol.Outcome:
    required = {"fleet-clusters": FLEET, "model-cache-grant": [grant_admitting(xr)],
                "mirror-secret-eu-keys": [secret("eu-keys")],
                "mirror-secret-us-keys": [secret("us-keys")]}
    required.update({f"mirror-secret-{k.replace('_', '-')}": v for k, v in secrets.items()})
    return model_cache.compose(protocol.Request(composite=xr, observed=observed or {},
                                           required=required))


def rows(outcome: protocol.Outcome) -> dict[str, dict]:
    return {r["name"]: r for r in outcome.status["clusters"]}


def condition(outcome: protocol.Outcome, kind: str) -> protocol.Condition:
    return next(c for c in outcome.conditions if c.type == kind)


def test_the_first_cluster_of_each_region_is_composed_and_publishes_to_its_bucket():
    composed = hydrations(compose(cache()))
    assert {n: (h["spec"]["mirror"]["role"], h["spec"]["mirror"]["s3"]["bucket"])
            for n, h in composed.items()} == \
        {"gpu-a": ("Publisher", "mirror-eu"), "gpu-b": ("Publisher", "mirror-us")}


def test_status_mirror_groups_name_each_regions_publisher_and_cluster_count():
    groups = compose(cache()).status["mirror"]["groups"]
    assert groups == [
        {"region": "eu-west-1", "bucket": "mirror-eu", "publisher": "gpu-a",
         "published": False, "clusters": 2},
        {"region": "us-east-1", "bucket": "mirror-us", "publisher": "gpu-b",
         "published": False, "clusters": 2}]


def test_a_region_whose_publisher_is_ready_fans_out_while_the_other_still_waits():
    first = compose(cache())
    observed = {f"hydration-{n}": with_status(h, phase="Ready" if n == "gpu-a" else "Hydrating")
                for n, h in hydrations(first).items()}
    outcome = compose(cache(), observed)
    assert set(hydrations(outcome)) == {"gpu-a", "gpu-b", "gpu-c"}
    assert hydrations(outcome)["gpu-c"]["spec"]["mirror"]["role"] == "Reader"
    waiting = rows(outcome)["gpu-d"]
    assert waiting["reason"] == "WaitingForMirror"
    assert "gpu-b" in waiting["message"] and "us-east-1" in waiting["message"]


def test_a_cluster_of_no_listed_region_reads_the_origin_at_once():
    fleet = [*FLEET, fleet_cluster("gpu-e")]
    xr = with_resolved(model_cache_xr(placement={"clusterNames": [*NAMES, "gpu-e"]},
                                      distribution={"mirror": KEYED}))
    outcome = model_cache.compose(protocol.Request(composite=xr, required={
        "fleet-clusters": fleet, "model-cache-grant": [grant_admitting(xr)],
        "mirror-secret-eu-keys": [secret("eu-keys")],
        "mirror-secret-us-keys": [secret("us-keys")]}))
    assert "mirror" not in hydrations(outcome)["gpu-e"]["spec"]


def test_every_mirrors_credentials_secret_is_required_by_name():
    requirements = compose(cache()).requirements
    assert {k: r.match_name for k, r in requirements.items() if k.startswith("mirror-")} == \
        {"mirror-secret-eu-keys": "eu-keys", "mirror-secret-us-keys": "us-keys"}


def test_a_missing_regional_secret_holds_only_that_regions_clusters():
    outcome = compose(cache(), us_keys=[])
    assert set(hydrations(outcome)) == {"gpu-a"}
    for name in ("gpu-b", "gpu-d"):
        row = rows(outcome)[name]
        assert (row["phase"], row["reason"]) == ("Pending", "CredentialsSecretMissing")
        assert "spec.distribution.mirror.regions[1].s3.credentialsSecretRef" in row["message"]
        assert "us-keys" in row["message"]


def test_a_missing_secret_is_reported_on_progressing_and_the_cache_is_not_ready():
    outcome = compose(cache(), us_keys=[])
    progressing = condition(outcome, "Progressing")
    assert (progressing.status, progressing.reason) == ("False", "CredentialsSecretMissing")
    assert "Secret ml/us-keys named by spec.distribution.mirror.regions[1].s3" \
        ".credentialsSecretRef does not exist" in progressing.message
    assert outcome.composite_ready is False


def test_a_secret_lacking_a_named_key_is_missing_too():
    outcome = compose(cache(), eu_keys=[secret("eu-keys", AWS_ACCESS_KEY_ID="QUtJQQ==")])
    assert "gpu-a" not in hydrations(outcome)
    assert "has no key 'AWS_SECRET_ACCESS_KEY'" in rows(outcome)["gpu-a"]["message"]


def test_a_held_clusters_hydration_is_kept_as_it_was():
    first = compose(cache())
    observed = {f"hydration-{n}": with_status(h, phase="Hydrating")
                for n, h in hydrations(first).items()}
    outcome = compose(cache(), observed, us_keys=[])
    assert hydrations(outcome)["gpu-b"]["spec"] == observed["hydration-gpu-b"]["spec"]


def test_the_default_mirrors_missing_secret_names_its_field():
    spec = {"s3": {**DEFAULT, "credentialsSecretRef": {"name": "all-keys"}}}
    outcome = compose(cache(spec))
    assert hydrations(outcome) == {}
    assert "spec.distribution.mirror.s3.credentialsSecretRef" in \
        condition(outcome, "Progressing").message


def test_an_s3_sources_missing_secret_stops_the_resolve_with_credentials_secret_missing():
    xr = model_cache_xr(placement={"clusterNames": NAMES}, source={"s3": {
        "bucket": "weights", "credentialsSecretRef": {"name": "s3-keys"}}})
    outcome = model_cache.compose(protocol.Request(composite=xr, required={
        "fleet-clusters": FLEET, "model-cache-grant": [grant_admitting(xr)],
        "token-secret": []}))
    resolved = condition(outcome, "Resolved")
    assert (resolved.status, resolved.reason) == ("False", "CredentialsSecretMissing")
    assert "spec.source.s3.credentialsSecretRef" in resolved.message
    assert not any(k.startswith("resolve-") for k in outcome.desired)


def test_a_hub_sources_missing_token_stays_token_secret_missing():
    xr = model_cache_xr(placement={"clusterNames": NAMES}, source={"huggingFace": {
        "repo": "Qwen/Qwen3-0.6B", "tokenSecretRef": {"name": "hf"}}})
    outcome = model_cache.compose(protocol.Request(composite=xr, required={
        "fleet-clusters": FLEET, "model-cache-grant": [grant_admitting(xr)],
        "token-secret": []}))
    assert condition(outcome, "Resolved").reason == "TokenSecretMissing"


# --- the XRD's rules ----------------------------------------------------------------------


def xr_with(mirror_spec: dict) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": "qwen", "namespace": "default"},
            "spec": {"grantRef": {"name": "team-a"},
                     "source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}},
                     "placement": {"clusterNames": ["gpu-a"]},
                     "distribution": {"mirror": mirror_spec}}}


NEEDS_ONE = "spec.distribution.mirror needs s3 (the default mirror), oci, or at least one regions[] " \
            "entry"
UNIQUE = "spec.distribution.mirror.regions[].region values must be unique"


@pytest.mark.parametrize("mirror_spec, rejected", [
    ({"s3": DEFAULT}, []),
    ({"regions": [{"region": "eu-west-1", "s3": EU}]}, []),
    (WITH_DEFAULT, []),
    ({"s3": DEFAULT, "regions": []}, []),
    ({"regions": []}, [NEEDS_ONE]),
    ({"onMissing": "Fail"}, [NEEDS_ONE]),
    ({"regions": [{"region": "eu-west-1", "s3": EU}, {"region": "eu-west-1", "s3": US}]},
     [UNIQUE]),
])
def test_the_mirror_rules(mirror_spec, rejected):
    xr = xr_with(mirror_spec)
    assert xrd_for(xr).cel_messages(xr, None) == rejected


@pytest.mark.parametrize("mirror_spec", [
    {"regions": [{"region": "eu-west-1"}]},  # no s3
    {"regions": [{"s3": EU}]},  # no region
    {"regions": [{"region": "", "s3": EU}]},
    {"regions": [{"region": "eu west", "s3": EU}]},  # not a label value
    {"regions": [{"region": "eu-west-1", "s3": {"bucket": "Not_A_Bucket"}}]},
    {"s3": DEFAULT, "regionLabel": "not a label key"},
    {"regions": [{"region": f"r{i}", "s3": EU} for i in range(33)]},  # more than 32
])
def test_malformed_regions_are_rejected_by_the_schema(mirror_spec):
    xr = xr_with(mirror_spec)
    assert [v.message for v in xrd_for(xr).violations(xr, None)]


def test_the_region_label_defaults_to_the_well_known_topology_label():
    defaulted = xrds.with_defaults(xr_with({"s3": DEFAULT}))
    assert defaulted["spec"]["distribution"]["mirror"]["regionLabel"] == \
        "topology.kubernetes.io/region"
