"""compose-fleet-cluster: table tests of compose() on plain requests."""

from __future__ import annotations

import json

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import json_format

from fleetcache import reasons
from fleetcache.apis import specs
from fleetcache.devtools import render
from fleetcache.functions import naming, protocol
from fleetcache.functions.composers.fleet_cluster import HYDRATIONS_KEY, PROVIDER_CONFIG_KEY, compose
from tests.support.builders import COMMIT, GIB, fleet_cluster_xr
from tests.support.xrd import assert_valid

SECRET_REF = {"namespace": "crossplane-system", "name": "gpu-east-1-kubeconfig",
              "key": "kubeconfig"}


def request(xr: dict | None = None, observed: dict | None = None,
            hydrations: list[dict] | None = None) -> protocol.Request:
    """hydrations: the ModelCacheHydrations Crossplane fetched (None: not fetched yet)."""
    required = {} if hydrations is None else {HYDRATIONS_KEY: hydrations}
    return protocol.Request(composite=fleet_cluster_xr() if xr is None else xr,
                       observed=observed or {}, required=required)


def with_capacity(capacity: str | None = "100Gi", status: dict | None = None, **cache) -> dict:
    """The default FleetCluster with a cache budget and watermarks (80/70 unless given)."""
    xr = fleet_cluster_xr(kubeconfigSecretRef=SECRET_REF, cache={
        "highWatermark": 80, "lowWatermark": 70, **cache,
        **({"capacity": capacity} if capacity else {})})
    return {**xr, "status": status} if status is not None else xr


def hydration(name: str, size_gib: int, *, namespace: str = "team-a", cluster: str = "gpu-east-1",
              created: str = "2026-01-01T00:00:00Z", **status) -> dict:
    """A ModelCacheHydration as Crossplane returns it for the cluster label."""
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheHydration",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created,
                         "labels": {naming.LABEL_CLUSTER: naming.label_value(cluster)}},
            "spec": {"clusterName": cluster, "storage": {"size": f"{size_gib}Gi"}},
            "status": status}


def ready_copy(name: str, used_gib: int, *, last_used: str = "2026-01-01T01:00:00Z",
               **status) -> dict:
    """A Ready, measured, unpinned copy no replica mounts or is placed on."""
    return hydration(name, used_gib, **{
        "phase": "Ready", "servingCommit": COMMIT, "usedBytes": used_gib * GIB,
        "pinned": False, "mountedBy": 0, "placedReplicas": 0, "lastUsedTime": last_used,
        **status})


def condition(outcome: protocol.Outcome, type_: str) -> protocol.Condition:
    return next(c for c in outcome.conditions if c.type == type_)


def provider_config(outcome: protocol.Outcome) -> dict:
    return outcome.desired[PROVIDER_CONFIG_KEY][0]


def test_composes_a_cluster_provider_config_named_after_the_fleet_cluster():
    manifest = provider_config(compose(request()))
    assert manifest["apiVersion"] == "kubernetes.m.crossplane.io/v1alpha1"
    assert manifest["kind"] == "ClusterProviderConfig"
    assert manifest["metadata"]["name"] == "gpu-east-1"
    assert "namespace" not in manifest["metadata"]
    assert manifest["spec"] == {"credentials": {"source": "Secret", "secretRef": SECRET_REF}}


def test_reports_the_provider_config_name_in_status():
    assert compose(request()).status == {"providerConfigName": "gpu-east-1"}


def test_kubeconfig_key_and_namespace_default_like_the_xrd():
    xr = fleet_cluster_xr(kubeconfigSecretRef={"name": "east"})
    assert provider_config(compose(request(xr)))["spec"]["credentials"]["secretRef"] == \
        {"namespace": "crossplane-system", "name": "east", "key": "kubeconfig"}


def test_not_ready_until_the_provider_config_is_observed():
    outcome = compose(request())
    assert outcome.desired[PROVIDER_CONFIG_KEY][1] is False
    assert outcome.composite_ready is False


def test_ready_once_the_provider_config_exists():
    first = compose(request())
    observed = {PROVIDER_CONFIG_KEY: provider_config(first)}
    outcome = compose(request(observed=observed))
    assert outcome.desired[PROVIDER_CONFIG_KEY][1] is True
    assert outcome.composite_ready is True


def test_adopts_a_named_provider_config_composing_nothing_and_ready_at_once():
    outcome = compose(request(fleet_cluster_xr(providerConfigRef={"name": "existing-cpc"})))
    assert outcome.desired == {}
    assert outcome.status == {"providerConfigName": "existing-cpc"}
    assert outcome.composite_ready is True


def test_adopting_after_composing_drops_the_composed_provider_config():
    observed = {PROVIDER_CONFIG_KEY: provider_config(compose(request()))}
    outcome = compose(request(fleet_cluster_xr(providerConfigRef={"name": "other"}), observed))
    assert PROVIDER_CONFIG_KEY not in outcome.desired


def test_cache_defaults_and_agent_image_are_accepted():
    xr = fleet_cluster_xr(kubeconfigSecretRef=SECRET_REF,
                          cache={"storageClassName": "fast-rwx", "accessMode": "ReadWriteOnce",
                                 "capacity": "2Ti"},
                          agent={"image": "registry.example.com/fleetcache/agent:v0.1.0"})
    assert compose(request(xr)).status == {"providerConfigName": "gpu-east-1"}


@pytest.mark.parametrize("spec", [{"kubeconfigSecretRef": SECRET_REF},
                                  {"providerConfigRef": {"name": "existing-cpc"}}],
                         ids=["composed", "adopted"])
def test_the_fleet_cluster_and_its_status_validate_against_the_xrd(spec):
    xr = fleet_cluster_xr(**spec)
    assert_valid(xr)
    assert_valid({**xr, "status": compose(request(xr)).status})


def test_same_request_gives_the_same_outcome():
    first, second = compose(request()), compose(request())
    assert json.dumps(naming.canonical(first.desired)) == json.dumps(naming.canonical(second.desired))
    assert first.status == second.status


# --- capacity -----------------------------------------------------------------------------


def test_the_hydrations_of_this_cluster_are_required_by_label_in_every_namespace():
    requirement = compose(request()).requirements[HYDRATIONS_KEY]
    assert requirement == protocol.Requirement(
        naming.API_VERSION, "ModelCacheHydration", namespace=None,
        match_labels=((naming.LABEL_CLUSTER, "gpu-east-1"),))


def test_status_cache_shows_capacity_usage_reservations_and_the_decisions():
    hydrations = [ready_copy("a", 30), hydration("b", 10, phase="Pending")]
    status = compose(request(with_capacity(), hydrations=hydrations)).status["cache"]
    assert status == {
        "capacityBytes": 100 * GIB, "capacityHuman": "100.0GiB",
        "usedBytes": 30 * GIB, "usedHuman": "30.0GiB (30%)", "usedPercent": 30,
        "reservedBytes": 10 * GIB, "admitted": ["team-a/b"], "waiting": [], "waitingCount": 0,
        "evicted": []}


def test_without_a_capacity_usage_is_shown_everything_is_admitted_and_capacity_is_not_low():
    hydrations = [ready_copy("a", 500), hydration("b", 900, phase="Pending")]
    outcome = compose(request(with_capacity(None), hydrations=hydrations))
    cache = outcome.status["cache"]
    assert (cache["capacityHuman"], cache["usedHuman"]) == ("unlimited", "500.0GiB")
    assert "capacityBytes" not in cache and "usedPercent" not in cache
    assert (cache["admitted"], cache["waiting"], cache["evicted"]) == (["team-a/b"], [], [])
    assert condition(outcome, "CapacityLow").status == "False"


def test_a_hydration_that_would_pass_the_high_watermark_waits_and_capacity_is_low():
    hydrations = [ready_copy("a", 60, mountedBy=1), hydration("big", 30, phase="Pending")]
    outcome = compose(request(with_capacity(), hydrations=hydrations))
    assert outcome.status["cache"]["waiting"] == ["team-a/big"]
    low = condition(outcome, "CapacityLow")
    assert (low.status, low.reason) == ("True", "CapacityLow")
    assert "1 hydration waiting for room (team-a/big)" in low.message
    assert "high watermark 80%: 80.0GiB" in low.message
    assert low.message.endswith(reasons.remedy("CapacityLow"))


def test_above_the_high_watermark_the_least_recently_used_copy_is_evicted():
    hydrations = [ready_copy("old", 45, last_used="2026-01-01T01:00:00Z"),
                  ready_copy("new", 45, last_used="2026-01-01T02:00:00Z")]
    outcome = compose(request(with_capacity(), hydrations=hydrations))
    assert outcome.status["cache"]["evicted"] == ["team-a/old"]
    assert outcome.status["cache"]["usedBytes"] == 45 * GIB
    assert condition(outcome, "CapacityLow").status == "False"


@pytest.mark.parametrize("high, low, evicted", [
    (75, 50, []),  # 70 used: at or below the high watermark nothing goes
    (60, 50, ["team-a/a"]),  # 70 -> 40
    (60, 35, ["team-a/a", "team-a/b"]),  # 70 -> 40 -> 20
])
def test_the_watermarks_come_from_the_spec(high, low, evicted):
    hydrations = [ready_copy("a", 30, last_used="2026-01-01T01:00:00Z"),
                  ready_copy("b", 20, last_used="2026-01-01T02:00:00Z"),
                  ready_copy("c", 20, last_used="2026-01-01T03:00:00Z")]
    outcome = compose(request(with_capacity(highWatermark=high, lowWatermark=low),
                              hydrations=hydrations))
    assert outcome.status["cache"]["evicted"] == evicted


def test_with_nothing_removable_capacity_is_low_and_says_why():
    outcome = compose(request(with_capacity(), hydrations=[ready_copy("a", 90, pinned=True)]))
    low = condition(outcome, "CapacityLow")
    assert low.status == "True"
    assert "no copy is removable" in low.message


def test_the_decisions_are_latched_through_the_fleet_clusters_own_status():
    hydrations = [ready_copy("a", 45), ready_copy("b", 45, last_used="2026-01-01T02:00:00Z"),
                  hydration("c", 5, phase="Pending")]
    first = compose(request(with_capacity(), hydrations=hydrations))
    # the evicted copy has not obeyed yet and the admitted one has not started: both hold
    again = compose(request(with_capacity(status=first.status), hydrations=hydrations))
    assert again.status["cache"] == first.status["cache"]
    assert first.status["cache"]["evicted"] == ["team-a/a"]
    assert first.status["cache"]["admitted"] == ["team-a/c"]


def test_nothing_is_decided_anew_while_the_hydrations_are_not_fetched():
    published = {"providerConfigName": "gpu-east-1",
                 "cache": {"capacityBytes": 100 * GIB, "evicted": ["team-a/a"]}}
    outcome = compose(request(with_capacity(status=published)))
    assert outcome.status["cache"] == published["cache"]
    assert [c.type for c in outcome.conditions] == []


def test_hydrations_of_another_cluster_are_not_counted():
    other = ready_copy("elsewhere", 90)
    other["spec"]["clusterName"] = "gpu-west-1"
    assert compose(request(with_capacity(), hydrations=[other])).status["cache"]["usedBytes"] \
        == 0


def on_existing_volume(hydration_: dict) -> dict:
    """The same copy with an existing-volume source: verified in place on the user's claim
    (its spec.storage.size still says what the resolved bytes would need)."""
    hydration_["spec"]["source"] = {"volume": {"claimName": "weights"}}
    return hydration_


def test_an_existing_volume_counts_no_bytes_though_its_claim_is_measured():
    outcome = compose(request(with_capacity(),
                              hydrations=[on_existing_volume(ready_copy("claim", 500,
                                                                        mountedBy=1))]))
    assert (outcome.status["cache"]["usedBytes"], outcome.status["cache"]["reservedBytes"]) \
        == (0, 0)
    assert condition(outcome, "CapacityLow").status == "False"


def test_an_existing_volume_is_never_evicted_however_long_unused():
    hydrations = [on_existing_volume(ready_copy("claim", 85, last_used="2026-01-01T00:00:00Z")),
                  ready_copy("a", 85, last_used="2026-01-01T05:00:00Z")]
    outcome = compose(request(with_capacity(), hydrations=hydrations))
    assert outcome.status["cache"]["evicted"] == ["team-a/a"]


def test_an_existing_volume_is_neither_admitted_nor_waiting():
    hydrations = [ready_copy("a", 79, mountedBy=1),
                  on_existing_volume(hydration("claim", 900, phase="Pending"))]
    cache = compose(request(with_capacity(), hydrations=hydrations)).status["cache"]
    assert (cache["admitted"], cache["waiting"], cache["waitingCount"]) == ([], [], 0)


def test_an_existing_volume_holds_no_later_copy_back():
    hydrations = [on_existing_volume(hydration("claim", 900, phase="Pending",
                                               created="2026-01-01T00:00:00Z")),
                  hydration("b", 10, phase="Pending", created="2026-01-01T01:00:00Z")]
    cache = compose(request(with_capacity(), hydrations=hydrations)).status["cache"]
    assert (cache["admitted"], cache["reservedBytes"]) == (["team-a/b"], 10 * GIB)


def test_an_existing_volume_once_listed_as_evicted_is_taken_off_the_list():
    published = {"cache": {"capacityBytes": 100 * GIB, "evicted": ["team-a/claim"]}}
    outcome = compose(request(with_capacity(status=published),
                              hydrations=[on_existing_volume(ready_copy("claim", 90))]))
    assert outcome.status["cache"]["evicted"] == []


@pytest.mark.parametrize("status", [
    {"pinned": "no"}, {"mountedBy": "0"}, {"mountedBy": -1}, {"mountedBy": True},
    {"placedReplicas": None}, {"usedBytes": "lots"}, {"phase": ["Ready"]},
], ids=["pinned-string", "mounted-string", "mounted-negative", "mounted-bool",
        "placed-null", "used-string", "phase-list"])
def test_a_malformed_hydration_status_reads_as_keep(status):
    hydrations = [ready_copy("odd", 85, **status)]
    assert compose(request(with_capacity(), hydrations=hydrations)).status["cache"][
        "evicted"] == []


@pytest.mark.parametrize("metadata", [{"name": ["a"], "namespace": "team-a"},
                                      {"name": "a", "namespace": None}, "nope"])
def test_a_hydration_without_a_readable_name_is_left_out(metadata):
    odd = hydration("a", 1, phase="Pending")
    odd["metadata"] = metadata
    cache = compose(request(with_capacity(), hydrations=[odd])).status["cache"]
    assert (cache["admitted"], cache["waiting"]) == ([], [])


@pytest.mark.parametrize("status, used, evicted", [
    ({"usedBytes": float("nan")}, 0, []),  # not measured: counts nothing, never evicted
    ({"usedBytes": 10**30}, 0, []),
    ({"mountedBy": 1e30}, 85 * GIB, []),  # unknown: read as mounted
    ({"lastUsedTime": 5}, 0, ["team-a/a"]),  # only the order is unknown: still evictable
    ({"lastUsedTime": "2026-99-99T00:00:00Z"}, 0, ["team-a/a"]),
])
def test_hostile_numbers_and_times_in_a_hydration_status_read_as_unknown(status, used, evicted):
    outcome = compose(request(with_capacity(), hydrations=[ready_copy("a", 85, **status)]))
    assert (outcome.status["cache"]["usedBytes"], outcome.status["cache"]["evicted"]) == \
        (used, evicted)
    assert_valid({**with_capacity(), "status": outcome.status})


def test_a_hydration_with_a_malformed_size_waits_instead_of_failing_the_cluster():
    odd = hydration("odd", 1, phase="Pending")
    odd["spec"]["storage"]["size"] = "huge"
    assert compose(request(with_capacity(), hydrations=[odd])).status["cache"]["waiting"] == \
        ["team-a/odd"]


def test_an_adopted_cluster_decides_capacity_too():
    xr = fleet_cluster_xr(providerConfigRef={"name": "existing-cpc"},
                          cache={"capacity": "100Gi"})
    outcome = compose(request(xr, hydrations=[ready_copy("a", 90)]))
    assert outcome.status["cache"]["evicted"] == ["team-a/a"]


def test_the_status_with_capacity_decisions_validates_against_the_xrd():
    hydrations = [ready_copy("a", 45), ready_copy("b", 45, mountedBy=1),
                  hydration("c", 50, phase="Pending")]
    xr = with_capacity()
    assert_valid({**xr, "status": compose(request(xr, hydrations=hydrations)).status})


def test_the_same_hydrations_in_any_order_give_the_same_status():
    hydrations = [ready_copy(f"r{i}", 9, last_used=f"2026-01-01T0{i % 4}:00:00Z")
                  for i in range(10)] + [hydration(f"n{i}", 5, phase="Pending")
                                         for i in range(4)]
    first = compose(request(with_capacity(), hydrations=hydrations))
    second = compose(request(with_capacity(), hydrations=hydrations[::-1]))
    assert first.status == second.status
    assert first.conditions == second.conditions


def test_through_grpc_an_existing_volume_counts_nothing_and_is_not_evicted():
    hydrations = [on_existing_volume(ready_copy("claim", 500, last_used="2026-01-01T00:00:00Z")),
                  ready_copy("a", 85)]
    xr = with_capacity()
    request = render.build_request(xr, {}, fnv1.State(), None, None,
                                   {HYDRATIONS_KEY: hydrations}, tag="existing-volume")
    with render.InProcessServer() as srv, render.channel_to(srv.address) as channel:
        rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request, timeout=30)
    cache = json_format.MessageToDict(rsp.desired.composite.resource)["status"]["cache"]
    assert (cache["usedBytes"], cache["evicted"]) == (0, ["team-a/a"])


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [
    {},
    {"kubeconfigSecretRef": SECRET_REF, "providerConfigRef": {"name": "existing"}},
], ids=["neither", "both"])
def test_exactly_one_of_the_two_refs_names_both_fields(spec):
    with pytest.raises(specs.InputError) as err:
        compose(request(fleet_cluster_xr(**spec) if spec else
                        {**fleet_cluster_xr(), "spec": {}}))
    assert "spec.kubeconfigSecretRef" in str(err.value)
    assert "spec.providerConfigRef" in str(err.value)


@pytest.mark.parametrize("spec,named", [
    ({"kubeconfigSecretRef": "gpu-east-1-kubeconfig"}, "spec.kubeconfigSecretRef"),
    ({"kubeconfigSecretRef": {"name": "k", "namespace": "Ops"}},
     "spec.kubeconfigSecretRef.namespace"),
    ({"kubeconfigSecretRef": {"namespace": "ops"}}, "spec.kubeconfigSecretRef.name"),
    ({"kubeconfigSecretRef": {**SECRET_REF, "key": 7}}, "spec.kubeconfigSecretRef.key"),
    ({"kubeconfigSecretRef": {**SECRET_REF, "name": "Kube Config"}},
     "spec.kubeconfigSecretRef.name"),
    ({"providerConfigRef": "existing"}, "spec.providerConfigRef"),
    ({"providerConfigRef": {}}, "spec.providerConfigRef.name"),
    ({"providerConfigRef": {"name": "x" * 300}}, "spec.providerConfigRef.name"),
    ({"kubeconfigSecretRef": SECRET_REF, "cache": "fast"}, "spec.cache"),
    ({"kubeconfigSecretRef": SECRET_REF, "cache": {"accessMode": "ReadWriteAlways"}},
     "spec.cache.accessMode"),
    ({"kubeconfigSecretRef": SECRET_REF, "cache": {"capacity": "two terabytes"}},
     "spec.cache.capacity"),
    ({"kubeconfigSecretRef": SECRET_REF, "cache": {"capacity": 0}}, "spec.cache.capacity"),
    ({"kubeconfigSecretRef": SECRET_REF, "cache": {"storageClassName": ["fast"]}},
     "spec.cache.storageClassName"),
    ({"kubeconfigSecretRef": SECRET_REF, "cache": {"highWatermark": 96}},
     "spec.cache.highWatermark"),
    ({"kubeconfigSecretRef": SECRET_REF, "cache": {"lowWatermark": 0}},
     "spec.cache.lowWatermark"),
    ({"kubeconfigSecretRef": SECRET_REF, "cache": {"highWatermark": 60, "lowWatermark": 60}},
     "spec.cache.lowWatermark must be below spec.cache.highWatermark"),
    ({"kubeconfigSecretRef": SECRET_REF, "agent": "image"}, "spec.agent"),
    ({"kubeconfigSecretRef": SECRET_REF, "agent": {"image": "has space:v1"}},
     "spec.agent.image"),
    ({"kubeconfigSecretRef": SECRET_REF, "agent": {"image": 3}}, "spec.agent.image"),
])
def test_bad_spec_is_an_input_error_naming_the_field(spec, named):
    with pytest.raises(specs.InputError) as err:
        compose(request(fleet_cluster_xr(**spec)))
    assert named in str(err.value)


@pytest.mark.parametrize("xr, message", [
    ({"apiVersion": naming.API_VERSION, "kind": "FleetCluster", "metadata": {"name": "a"}},
     "spec is required"),
    ({"apiVersion": naming.API_VERSION, "kind": "FleetCluster", "metadata": {"name": "a"},
      "spec": ["kubeconfigSecretRef"]}, "spec: list must be an object"),
], ids=["missing-spec", "spec-is-a-list"])
def test_missing_or_mistyped_spec_is_an_input_error(xr, message):
    with pytest.raises(specs.InputError, match=message):
        compose(request(xr))


@pytest.mark.parametrize("name", ["x" * 300, "gpü-øst-1", "", "UPPER"])
def test_a_name_that_cannot_name_a_provider_config_is_an_input_error(name):
    with pytest.raises(specs.InputError, match="metadata.name"):
        compose(request(fleet_cluster_xr(name)))


def test_a_253_character_name_still_composes_with_a_valid_label():
    name = ".".join(["a" * 63] * 4)[:253]
    manifest = provider_config(compose(request(fleet_cluster_xr(
        name, kubeconfigSecretRef=SECRET_REF))))
    assert manifest["metadata"]["name"] == name
    label = manifest["metadata"]["labels"][naming.LABEL_CLUSTER]
    assert len(label) <= 63


def test_an_empty_composite_is_an_input_error():
    with pytest.raises(specs.InputError):
        compose(protocol.Request(composite={}))
