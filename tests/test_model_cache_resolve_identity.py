"""The resolve step's Objects as provider-kubernetes must see them: a composed key stands
for one remote object (one cluster, one kind, one namespace and name) for as long as it is
composed. provider-kubernetes only ever reads, writes and deletes the object an Object's
manifest names now, on the cluster its providerConfigRef names now, so a key re-pointed at
another cluster or name would leave the old remote object behind for ever
(design/model-cache.md, "Moving the resolve step")."""

from __future__ import annotations

import copy

import pytest

from fleetcache.functions import protocol
from fleetcache.functions.k8s.resolve_job import RESOLVE_PREFIX
from tests.support.fleet import COMMIT, condition, fleet_cluster, model_cache_xr, observed_object, with_resolved
from tests.test_model_cache import FLEET, compose

SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"},
          "data": {"HF_TOKEN": "eA=="}}
PRIVATE = {"huggingFace": {"repo": "org/private", "tokenSecretRef": {"name": "hf-token"}},
           "allowPatterns": ["*.safetensors"]}


def private_cache(**spec: object) -> dict:
    return model_cache_xr(source=copy.deepcopy(PRIVATE), **spec)


def resolve_objects(outcome: protocol.Outcome) -> dict[str, dict]:
    return {k: r for k, (r, _) in outcome.desired.items() if k.startswith(RESOLVE_PREFIX)}


def remote_identity(obj: dict) -> tuple[str, str, str, str]:
    """Which remote object an Object manages: its cluster, kind, namespace and name."""
    manifest = obj["spec"]["forProvider"]["manifest"]
    return (obj["spec"]["providerConfigRef"]["name"], manifest["kind"],
            manifest["metadata"].get("namespace", ""), manifest["metadata"]["name"])


def observed(outcome: protocol.Outcome) -> dict[str, dict]:
    return {k: observed_object(r) for k, r in resolve_objects(outcome).items()}


def kinds(objects: dict[str, dict]) -> dict[str, str]:
    return {k: o["spec"]["forProvider"]["manifest"]["kind"] for k, o in objects.items()}


def resolving(xr: dict, fleet: list[dict] | None = None) -> tuple[protocol.Outcome, protocol.Outcome]:
    """The resolve step composed, then composed again once Crossplane observed it."""
    first = compose(xr, fleet, secrets=[SECRET])
    return first, compose(xr, fleet, observed(first), secrets=[SECRET])


def moved(change: str) -> tuple[protocol.Outcome, protocol.Outcome]:
    """The resolve step before and after `change`, observed as first composed."""
    xr = private_cache()
    first = compose(xr, secrets=[SECRET])
    fleet = FLEET
    if change == "cluster left the placement":
        xr["spec"]["placement"] = {"clusterNames": ["gpu-east-2", "gpu-west-1"]}
    elif change == "cluster not ready":
        fleet = [fleet_cluster("gpu-east-1", ready=False), *FLEET[::2]]
    elif change == "source":
        xr["spec"]["source"]["huggingFace"]["revision"] = "v2"
    elif change == "job template":
        xr["spec"]["job"] = {"activeDeadlineSeconds": 600}
    return first, compose(xr, fleet, observed(first), secrets=[SECRET])


CHANGES = ["cluster left the placement", "cluster not ready", "source", "job template"]


@pytest.mark.parametrize("change", CHANGES)
def test_a_key_never_names_another_remote_object_than_it_did(change):
    before, after = moved(change)
    kept = resolve_objects(before).keys() & resolve_objects(after).keys()
    assert {k: remote_identity(resolve_objects(after)[k]) for k in kept} == \
        {k: remote_identity(resolve_objects(before)[k]) for k in kept}


@pytest.mark.parametrize("change", CHANGES)
def test_a_new_key_never_reuses_the_object_name_of_a_dropped_one(change):
    """Crossplane keeps an existing key's Object name; a new key under a dropped key's
    name would be the very Object Crossplane deletes."""
    before, after = moved(change)
    dropped = resolve_objects(before).keys() - resolve_objects(after).keys()
    added = resolve_objects(after).keys() - resolve_objects(before).keys()
    assert not {resolve_objects(before)[k]["metadata"]["name"] for k in dropped} & \
        {resolve_objects(after)[k]["metadata"]["name"] for k in added}


@pytest.mark.parametrize("change", ["cluster left the placement", "cluster not ready"])
def test_a_changed_resolving_cluster_composes_every_resolve_object_anew_and_drops_the_old(change):
    before, after = moved(change)
    assert not resolve_objects(before).keys() & resolve_objects(after).keys()
    assert sorted(kinds(resolve_objects(after)).values()) == sorted(
        kinds(resolve_objects(before)).values())
    assert {remote_identity(o)[0] for o in resolve_objects(after).values()} == {"gpu-east-2"}


def test_a_changed_source_composes_a_new_record_and_job_and_keeps_the_access_in_place():
    """The ServiceAccount, Role, RoleBinding, token and namespace keep their names, so
    they are updated where they are rather than deleted and created again under a Job."""
    before, after = moved("source")
    renewed = {kinds(resolve_objects(before))[k]
               for k in resolve_objects(before).keys() - resolve_objects(after).keys()}
    assert renewed == {"ConfigMap", "Job"}


def test_an_unchanged_spec_keeps_every_resolve_key_and_object_name_across_calls():
    first, again = resolving(private_cache())
    assert {k: o["metadata"]["name"] for k, o in resolve_objects(again).items()} == \
        {k: o["metadata"]["name"] for k, o in resolve_objects(first).items()}


def test_the_same_spec_on_the_same_cluster_composes_the_same_keys_in_any_fleet_order():
    one = resolve_objects(compose(private_cache(), FLEET, secrets=[SECRET]))
    other = resolve_objects(compose(private_cache(), FLEET[::-1], secrets=[SECRET]))
    assert one.keys() == other.keys()


def test_every_resolve_object_but_the_namespace_lets_the_provider_delete_its_remote_object():
    """Also once the Job is only observed (a resolve of nothing keeps its step composed).
    The namespace is shared with the hydrations and only ever created."""
    xr = private_cache()
    _, again = resolving(xr)
    record = next(k for k, kind in kinds(resolve_objects(again)).items() if kind == "ConfigMap")
    resolved_record = {"phase": "Resolved", "commit": COMMIT, "bytes": "0", "files": "0"}
    done = compose(xr, None, {**observed(again), record: observed_object(
        resolve_objects(again)[record], data=resolved_record)}, secrets=[SECRET])
    assert condition(done, "Resolved").reason == "InvalidSource"
    for outcome in (again, done):
        policies = {kinds(resolve_objects(outcome))[k]: o["spec"].get("managementPolicies", ["*"])
                    for k, o in resolve_objects(outcome).items()}
        assert policies.pop("Namespace") == ["Observe", "Create"]
        assert all("Delete" in p or p == ["*"] for p in policies.values()), policies


def test_a_latched_resolve_stays_resolved_when_its_resolving_cluster_leaves_the_placement():
    xr = with_resolved(private_cache(placement={"clusterNames": ["gpu-east-2", "gpu-west-1"]}))
    outcome = compose(xr, secrets=[SECRET])
    assert condition(outcome, "Resolved").status == "True"
    assert outcome.status["resolved"] == xr["status"]["resolved"]
    assert resolve_objects(outcome) == {}
