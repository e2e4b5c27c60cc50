"""compose-fleet-cluster: table tests of compose() on plain requests."""

from __future__ import annotations

import json

import pytest

from fleetcache.functions import kit
from fleetcache.functions.fleet_cluster import PROVIDER_CONFIG_KEY, compose
from tests.support.builders import fleet_cluster_xr
from tests.support.xrd import assert_valid

SECRET_REF = {"namespace": "crossplane-system", "name": "gpu-east-1-kubeconfig",
              "key": "kubeconfig"}


def request(xr: dict | None = None, observed: dict | None = None) -> kit.Request:
    return kit.Request(composite=fleet_cluster_xr() if xr is None else xr,
                       observed=observed or {})


def provider_config(outcome: kit.Outcome) -> dict:
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
    assert json.dumps(kit.canonical(first.desired)) == json.dumps(kit.canonical(second.desired))
    assert first.status == second.status


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [
    {},
    {"kubeconfigSecretRef": SECRET_REF, "providerConfigRef": {"name": "existing"}},
], ids=["neither", "both"])
def test_exactly_one_of_the_two_refs_names_both_fields(spec):
    with pytest.raises(kit.InputError) as err:
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
    ({"kubeconfigSecretRef": SECRET_REF, "agent": "image"}, "spec.agent"),
    ({"kubeconfigSecretRef": SECRET_REF, "agent": {"image": "has space:v1"}},
     "spec.agent.image"),
    ({"kubeconfigSecretRef": SECRET_REF, "agent": {"image": 3}}, "spec.agent.image"),
])
def test_bad_spec_is_an_input_error_naming_the_field(spec, named):
    with pytest.raises(kit.InputError) as err:
        compose(request(fleet_cluster_xr(**spec)))
    assert named in str(err.value)


@pytest.mark.parametrize("xr, message", [
    ({"apiVersion": kit.API_VERSION, "kind": "FleetCluster", "metadata": {"name": "a"}},
     "spec is required"),
    ({"apiVersion": kit.API_VERSION, "kind": "FleetCluster", "metadata": {"name": "a"},
      "spec": ["kubeconfigSecretRef"]}, "spec: list must be an object"),
], ids=["missing-spec", "spec-is-a-list"])
def test_missing_or_mistyped_spec_is_an_input_error(xr, message):
    with pytest.raises(kit.InputError, match=message):
        compose(request(xr))


@pytest.mark.parametrize("name", ["x" * 300, "gpü-øst-1", "", "UPPER"])
def test_a_name_that_cannot_name_a_provider_config_is_an_input_error(name):
    with pytest.raises(kit.InputError, match="metadata.name"):
        compose(request(fleet_cluster_xr(name)))


def test_a_253_character_name_still_composes_with_a_valid_label():
    name = ".".join(["a" * 63] * 4)[:253]
    manifest = provider_config(compose(request(fleet_cluster_xr(
        name, kubeconfigSecretRef=SECRET_REF))))
    assert manifest["metadata"]["name"] == name
    label = manifest["metadata"]["labels"][kit.LABEL_CLUSTER]
    assert len(label) <= 63


def test_an_empty_composite_is_an_input_error():
    with pytest.raises(kit.InputError):
        compose(kit.Request(composite={}))
