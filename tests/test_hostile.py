"""Hostile input to every composer: a fatal result or a clear status, never an exception.

Anything the server had to catch as an unexpected exception says "internal error"; no
input may produce that.
"""

from __future__ import annotations

import datetime

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from fleetcache.functions import server
from tests.support.fleet import fleet_cluster

NOW = datetime.datetime(2026, 12, 2, tzinfo=datetime.timezone.utc)
KINDS = sorted(server.COMPOSER_MODULES)
LONG = "x" * 300
UNICODE = "модель-🚀-模型"

HOSTILE_SPECS = {
    "no-spec": None,
    "spec-is-a-string": "oops",
    "spec-is-a-list": [1, 2],
    "empty-spec": {},
    "wrong-types": {"source": 7, "placement": "all", "replicas": "many", "clusterName": 9,
                    "rollout": {"maxConcurrent": "x"}, "storage": [], "kubeconfigSecretRef": 1},
    "nested-nulls": {"source": {"huggingFace": None}, "placement": {"clusterNames": None},
                     "engine": None, "delivery": None},
    "unicode-everywhere": {"source": {"huggingFace": {"repo": f"{UNICODE}/{UNICODE}"}},
                           "placement": {"clusterNames": [UNICODE]}, "clusterName": UNICODE,
                           "modelCacheName": UNICODE,
                           "kubeconfigSecretRef": {"name": UNICODE, "namespace": UNICODE}},
    "huge-numbers": {"replicas": 10**30, "rollout": {"maxConcurrent": 10**30},
                     "minReady": -(10**30), "bytes": 10**40},
}


def request(kind: str, name: str, spec, required: dict | None = None) -> fnv1.RunFunctionRequest:
    composite = {"apiVersion": "fleetcache.dev/v1alpha1", "kind": kind,
                 "metadata": {"name": name, "namespace": "ml"}}
    if spec is not None:
        composite["spec"] = spec
    req = fnv1.RunFunctionRequest()
    resource.update(req.observed.composite, composite)
    for key, items in (required or {}).items():
        for item in items:
            req.required_resources[key].items.add().resource.CopyFrom(
                resource.dict_to_struct(item))
    return req


def never_internal_error(rsp: fnv1.RunFunctionResponse) -> None:
    messages = [r.message for r in rsp.results]
    assert not any("internal error" in m for m in messages), messages


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", sorted(HOSTILE_SPECS))
def test_hostile_spec_never_raises(kind, case):
    never_internal_error(server.run(request(kind, "h", HOSTILE_SPECS[case]), NOW))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", [LONG, UNICODE, LONG + UNICODE])
def test_hostile_names_never_raise(kind, name):
    never_internal_error(server.run(request(kind, name, HOSTILE_SPECS["empty-spec"]), NOW))


@pytest.mark.parametrize("kind", KINDS)
def test_bad_spec_names_the_field_in_a_fatal_result(kind):
    rsp = server.run(request(kind, "h", HOSTILE_SPECS["wrong-types"]), NOW)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert fatal and "spec" in fatal[0], fatal


def test_hostile_fleet_clusters_never_raise():
    odd = [{"apiVersion": "fleetcache.dev/v1alpha1", "kind": "FleetCluster",
            "metadata": {"name": LONG, "labels": {"gpu": UNICODE}}, "status": "broken"},
           {"apiVersion": "fleetcache.dev/v1alpha1", "kind": "FleetCluster", "metadata": {}},
           fleet_cluster(UNICODE)]
    spec = {"source": {"huggingFace": {"repo": "org/model"}},
            "placement": {"clusterSelector": {}}}
    rsp = server.run(request("ModelCache", "h", spec, {"fleet-clusters": odd}), NOW)
    never_internal_error(rsp)
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
