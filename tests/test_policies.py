"""package/policies/: the ValidatingAdmissionPolicy refusing ModelCaches at the API server.

Its CEL is evaluated with cel-python the way the API server evaluates it: once per
ModelCacheGrant of the namespace (`params`), with `object`, `oldObject` (null on create)
and the policy's `variables`; a refusal by any param refuses the request. The table is the
composer's: for each case, what the policy says and what compose-model-cache-grant decides
(the composer is authoritative and refuses more: selectors, the budget).
"""

from __future__ import annotations

import copy
from pathlib import Path

import celpy
import pytest

from fleetcache.apis import cel, documents
from fleetcache.functions import naming, protocol
from fleetcache.functions.composers.model_cache_grant import (
    FLEET_CLUSTERS_KEY,
    HYDRATIONS_KEY,
    MODEL_CACHES_KEY,
    compose,
)
from tests.support.fleet import fleet_cluster
from tests.support.k8s import assert_valid_k8s

ROOT = Path(__file__).resolve().parents[1]
DOCS = documents.load_documents(ROOT / "package/policies")
POLICY = next(d for d in DOCS if d["kind"] == "ValidatingAdmissionPolicy")
BINDINGS = {d["metadata"]["name"]: d for d in DOCS if d["kind"] == "ValidatingAdmissionPolicyBinding"}
FLEET = [fleet_cluster("gpu-east-1", labels={"tier": "serving"}),
         fleet_cluster("gpu-east-2", labels={"tier": "serving"}),
         fleet_cluster("gpu-lab-1", labels={"tier": "lab"})]
NAMES = {"clusterNames": ["gpu-east-1", "gpu-east-2"]}
SELECTOR = {"clusterSelector": {"matchLabels": {"tier": "serving"}}}


def grant(clusters: dict = NAMES, allow_pinned: bool = False, name: str = "team-a") -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"clusters": clusters, "quota": {"bytes": "10Ti"}, "allowPinned": allow_pinned}}


def model_cache(clusters: tuple[str, ...] = ("gpu-east-1",), *, pinned: bool = False,
                grant_name: str = "team-a") -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": "qwen", "namespace": "ml",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"grantRef": {"name": grant_name},
                     "source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}},
                     "placement": {"clusterNames": list(clusters)},
                     "retention": {"pinned": pinned}}}


def policy_refusals(obj: dict, params: dict, old: dict | None = None) -> list[str]:
    """The messages of the validations that fail for one param (the API server's order);
    `old` None is a create (oldObject is null)."""
    activation: dict = {"object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old),
                        "params": celpy.json_to_cel(params), "request": celpy.json_to_cel(
                            {"operation": "CREATE" if old is None else "UPDATE"})}
    variables: dict = {}
    for variable in POLICY["spec"]["variables"]:
        activation["variables"] = celpy.celtypes.MapType(variables)
        variables[celpy.celtypes.StringType(variable["name"])] = \
            cel.compile_rule(variable["expression"]).evaluate(activation)
    activation["variables"] = celpy.celtypes.MapType(variables)
    refused = []
    for rule in POLICY["spec"]["validations"]:
        verdict = cel.compile_rule(rule["expression"]).evaluate(activation)
        assert isinstance(verdict, celpy.celtypes.BoolType), verdict  # never an evaluation error
        if not verdict:
            refused.append(str(cel.compile_rule(rule["messageExpression"])
                               .evaluate(activation)))
    return refused


def composer_reason(obj: dict, params: dict) -> str | None:
    """What compose-model-cache-grant decides for `obj` (None: not a cache of this grant)."""
    outcome = compose(protocol.Request(composite=params, required={
        MODEL_CACHES_KEY: [obj], HYDRATIONS_KEY: [], FLEET_CLUSTERS_KEY: FLEET}))
    return next((row["reason"] for row in outcome.status["caches"]), None)


def pinned_before() -> dict:
    return model_cache(pinned=True)


# (case, ModelCache, grant, old ModelCache or None, policy refuses with, composer decides)
TABLE = [
    ("names inside the grant", model_cache(), grant(), None, None, "Admitted"),
    ("pinned without allowPinned", model_cache(pinned=True), grant(), None,
     "PinningNotAllowed", "PinningNotAllowed"),
    ("pinned with allowPinned", model_cache(pinned=True), grant(allow_pinned=True), None,
     None, "Admitted"),
    ("names outside the grant's names", model_cache(("gpu-east-1", "gpu-lab-1")), grant(), None,
     "OutsideGrant", "OutsideGrant"),
    ("names outside the grant's selector", model_cache(("gpu-lab-1",)), grant(SELECTOR), None,
     None, "OutsideGrant"),
    ("another grant's cache", model_cache(("gpu-lab-1",), pinned=True, grant_name="team-b"),
     grant(), None, None, None),
    ("an update that keeps an earlier pin", model_cache(pinned=True), grant(), pinned_before(),
     None, "PinningNotAllowed"),
    ("an update that turns pinning on", model_cache(pinned=True), grant(), model_cache(),
     "PinningNotAllowed", "PinningNotAllowed"),
    ("an update that keeps earlier names", model_cache(("gpu-lab-1",)), grant(),
     model_cache(("gpu-lab-1",)), None, "OutsideGrant"),
    ("an update that moves to names outside", model_cache(("gpu-lab-1",)), grant(),
     model_cache(), "OutsideGrant", "OutsideGrant"),
    ("an update from a selector to names outside", model_cache(("gpu-lab-1",)), grant(),
     {**model_cache(), "spec": {**model_cache()["spec"], "placement": {"clusterSelector": {}}}},
     "OutsideGrant", "OutsideGrant"),
]


@pytest.mark.parametrize("obj, params, old, refused, decided",
                         [row[1:] for row in TABLE], ids=[row[0] for row in TABLE])
def test_the_policy_refuses_what_it_can_and_the_composer_decides_the_rest(
        obj, params, old, refused, decided):
    messages = policy_refusals(obj, params, old)
    assert [m for m in messages if refused and f"({refused})" in m] == messages
    assert bool(messages) == bool(refused)
    assert composer_reason(obj, params) == decided


def test_a_refusal_names_the_grant_and_what_to_do():
    assert policy_refusals(model_cache(pinned=True), grant()) == [
        "spec.retention.pinned: ModelCacheGrant team-a does not set spec.allowPinned "
        "(PinningNotAllowed); set pinned to false or ask the platform team to allow pinning"]
    assert policy_refusals(model_cache(("gpu-lab-1", "gpu-lab-2", "gpu-east-1")), grant()) == [
        "spec.placement.clusterNames names 2 clusters outside ModelCacheGrant team-a: gpu-lab-1, gpu-lab-2 "
        "(OutsideGrant); name only clusters in its spec.clusters.clusterNames"]


def test_a_refusal_spells_out_three_names_and_counts_the_rest():
    outside = tuple(f"gpu-lab-{i}" for i in range(1, 6))
    assert policy_refusals(model_cache(outside), grant()) == [
        "spec.placement.clusterNames names 5 clusters outside ModelCacheGrant team-a: gpu-lab-1, gpu-lab-2, "
        "gpu-lab-3 and 2 more (OutsideGrant); name only clusters in its spec.clusters.clusterNames"]


def test_every_grant_of_the_namespace_is_a_param_and_only_the_named_one_speaks():
    cache = model_cache(pinned=True)
    assert policy_refusals(cache, grant(name="team-b")) == []
    assert policy_refusals(cache, grant(name="team-a")) != []


def test_a_namespace_without_any_grant_cannot_create_a_model_cache():
    create = BINDINGS["fleetcache-model-cache-grants-create"]["spec"]
    assert create["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Deny"}
    assert [r["operations"] for r in create["matchResources"]["resourceRules"]] == [["CREATE"]]


def test_updates_stay_possible_where_the_grants_are_gone():
    update = BINDINGS["fleetcache-model-cache-grants-update"]["spec"]
    assert update["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Allow"}
    assert [r["operations"] for r in update["matchResources"]["resourceRules"]] == [["UPDATE"]]


def test_the_policy_reads_grants_and_matches_model_caches_only():
    spec = POLICY["spec"]
    assert spec["paramKind"] == {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant"}
    assert [r["resources"] for r in spec["matchConstraints"]["resourceRules"]] == [["modelcaches"]]
    assert spec["failurePolicy"] == "Fail"
    assert {b["spec"]["policyName"] for b in BINDINGS.values()} == {POLICY["metadata"]["name"]}


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_the_manifests_are_valid_kubernetes_1_37_objects(doc):
    assert_valid_k8s(copy.deepcopy(doc))
