"""Hostile input to every composer: a fatal result or a clear status, never an exception.

Anything the server had to catch as an unexpected exception says "internal error"; no
input may produce that.
"""

from __future__ import annotations

import datetime
import time

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from fleetcache.apis import specs
from fleetcache.functions import read, server
from fleetcache.functions.k8s import agent_job, objects, selectors
from fleetcache.functions.views.fleet_cluster import FleetClusterView
from fleetcache.messages import MESSAGE_LIMIT, SHOWN_LIMIT
from tests.support.fleet import GRANT, fleet_cluster, grant, grant_row, resolved_status

NOW = datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC)
GRANTED = {"model-cache-grant": [grant(namespace="ml")]}  # a grant that decided nothing yet
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
    spec = {"grantRef": {"name": GRANT}, "source": {"huggingFace": {"repo": "org/model"}},
            "placement": {"clusterSelector": {}}}
    rsp = server.run(request("ModelCache", "h", spec, {"fleet-clusters": odd, **GRANTED}), NOW)
    never_internal_error(rsp)
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


# --- the composite itself -----------------------------------------------------------------


def raw_request(composite: dict) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    resource.update(req.observed.composite, composite)
    return req


@pytest.mark.parametrize("composite", [
    {"kind": ["ModelCache"], "metadata": {"name": "h"}},
    {"kind": {"a": 1}, "metadata": {"name": "h"}},
    {"kind": "ModelCache", "metadata": "h"},
    {"kind": "ModelCache", "metadata": ["h"]},
    {"kind": "ModelCache", "metadata": {"name": ["h"]}},
    {"kind": 7},
    {},
], ids=["kind-list", "kind-object", "metadata-string", "metadata-list", "name-list",
        "kind-number", "empty"])
def test_a_composite_with_a_bad_kind_or_metadata_is_a_fatal_result(composite):
    rsp = server.run(raw_request(composite), NOW)
    never_internal_error(rsp)
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]


def test_an_unknown_kind_is_quoted_at_most_200_characters():
    rsp = server.run(raw_request({"kind": "K" * 100_000, "metadata": {"name": "h"}}), NOW)
    assert len(rsp.results[0].message) < 400


def test_a_fatal_result_never_echoes_a_huge_value_whole():
    selector = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": "v" * 100_000}]}
    spec = {"grantRef": {"name": GRANT}, "source": {"huggingFace": {"repo": "org/model"}},
            "placement": {"clusterSelector": selector}}
    rsp = server.run(request("ModelCache", "h", spec, {"fleet-clusters": [fleet_cluster("a")]}),
                     NOW)
    never_internal_error(rsp)
    assert "matchExpressions[0].values" in rsp.results[0].message
    assert len(rsp.results[0].message) <= MESSAGE_LIMIT


def test_a_composer_bug_is_a_bounded_internal_error_not_an_exception(monkeypatch):
    def broken(_request):
        raise RuntimeError("x" * 100_000)
    monkeypatch.setattr(server, "composer_for", lambda kind: broken)
    rsp = server.run(request("ModelCache", "h", {}), NOW)
    assert "internal error" in rsp.results[0].message
    assert len(rsp.results[0].message) <= MESSAGE_LIMIT


# --- readers ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["Infinity", "NaN", "-inf", "1" * 400, "1e999999999", "1e30", [1],
                                   {"a": 1}, None, True, "twelve", float("inf")])
def test_a_value_that_is_not_a_finite_number_reads_as_the_default(value):
    assert read.as_int(value, 7) == 7


@pytest.mark.parametrize("conditions", ["Ready", 7, {"type": "Ready"}, [None, "x", 3]])
def test_conditions_that_are_not_a_list_of_objects_read_as_absent(conditions):
    assert read.condition_of({"status": {"conditions": conditions}}, "Ready") == {}


@pytest.mark.parametrize("job", [
    {"status": "running"},
    {"status": ["a"]},
    {"status": {"conditions": "Failed"}},
    {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": ["x"],
                                "message": {"a": 1}}]}},
], ids=["status-string", "status-list", "conditions-string", "condition-fields-mistyped"])
def test_a_malformed_job_status_reads_as_not_started(job):
    state = agent_job.JobState.of(job)
    assert not state.started and not state.complete and state.exit_code is None


def test_a_five_thousand_digit_exit_code_is_no_exit_code():
    message = f"Container agent failed with exit code {'9' * 5000} matching FailJob rule"
    job = {"status": {"conditions": [{"type": "Failed", "status": "True",
                                      "reason": "PodFailurePolicy", "message": message}]}}
    state = agent_job.JobState.of(job)
    assert state.failed and state.exit_code is None
    assert len(state.failure_message) <= SHOWN_LIMIT


def test_a_hostile_agent_record_never_becomes_a_condition_reason():
    state = agent_job.JobState.of({"status": {"conditions": [{"type": "Failed", "status": "True"}]}})
    reason, message = agent_job.failure_reason(state, {"reason": "no such reason " * 1000,
                                                 "message": "m" * 100_000})
    assert reason == "BackoffLimitExceeded"
    assert len(message) < MESSAGE_LIMIT


def test_an_agent_record_that_is_not_an_object_reads_as_absent():
    state = agent_job.JobState.of({"status": {"conditions": [{"type": "Failed", "status": "True"}]}})
    assert agent_job.failure_reason(state, ["reason"])[0] == "BackoffLimitExceeded"


@pytest.mark.parametrize("values", ["h100", 7, {"a": "b"}, ["h100", 3]],
                         ids=["string", "number", "object", "mixed"])
def test_selector_values_that_are_not_a_list_of_strings_name_the_field(values):
    selector = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": values}]}
    with pytest.raises(specs.InputError, match=r"sel\.matchExpressions\[0\]\.values"):
        selectors.selector_matches(selector, {"gpu": "h100"}, "sel")


@pytest.mark.parametrize("metadata", ["m", ["m"], 7])
def test_an_observed_resource_whose_metadata_is_not_an_object_strips_to_no_metadata(metadata):
    assert objects.strip_observed({"kind": "X", "metadata": metadata})["metadata"] == {}


# --- cost -------------------------------------------------------------------------------------


def hostile_fleet_request(n: int, *, latched: bool) -> fnv1.RunFunctionRequest:
    """A ModelCache over n clusters where every observed and required value is hostile:
    5,000-digit numbers, 10 kB messages and reasons, unknown phases, 10 kB label values;
    its status.resolved matches the spec (`latched`: hydrations are composed) or not."""
    spec = {"grantRef": {"name": GRANT}, "source": {"huggingFace": {"repo": "org/model"}},
            "placement": {"clusterSelector": {"matchExpressions": [
                {"key": "gpu", "operator": "In", "values": ["h100"]}]}},
            "rollout": {"maxConcurrent": n}}
    digest = resolved_status({"spec": spec})["sourceDigest"] if latched else "x" * 10_000
    fleet = []
    for i in range(n):
        cluster = fleet_cluster(f"gpu-{i:05d}")
        cluster["metadata"]["labels"]["note"] = "n" * 10_000
        cluster["spec"]["cache"] = {"capacity": "9" * 5000}
        fleet.append(cluster)
    admitting = grant(grant_row({"metadata": {"name": "h"}, "spec": spec}, manifest=""),
                      namespace="ml")  # the latched status.resolved names no manifest
    req = request("ModelCache", "h", spec, {"fleet-clusters": fleet,
                                            "model-cache-grant": [admitting]})
    resource.update(req.observed.composite, {"status": {"resolved": {
        "commit": "4f1c2b0d9e8a7c6b5a493827161504f3e2d1c0b9", "bytes": "9" * 5000,
        "files": "Infinity", "sourceDigest": digest}}})
    for i in range(n):
        resource.update(req.observed.resources[f"hydration-gpu-{i:05d}"], {
            "apiVersion": "fleetcache.dev/v1alpha1", "kind": "ModelCacheHydration",
            "metadata": {"name": f"h-{i}"},
            "spec": {"commit": 7},
            "status": {"phase": ("Ready", "Exploded", ["x"])[i % 3], "reason": "R" * 10_000,
                       "message": "m" * 10_000, "servingCommit": "s" * 10_000,
                       "progress": {"bytesDone": "9" * 5000, "bytesTotal": "NaN"}}})
    return req


@pytest.mark.parametrize("latched", [True, False], ids=["hydrating", "resolving"])
def test_a_hostile_thousand_cluster_request_costs_under_a_second_of_cpu(latched):
    req = hostile_fleet_request(1000, latched=latched)
    start = time.process_time()
    rsp = server.run(req, NOW)
    assert time.process_time() - start < 1.0
    never_internal_error(rsp)
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


@pytest.mark.parametrize("field, value", [
    ("status.providerConfigName", ["a"]), ("status.providerConfigName", "Not A Name"),
    ("status.providerConfigName", "p" * 300),
], ids=["list", "not-a-name", "too-long"])
def test_a_fleet_cluster_with_a_malformed_provider_config_name_is_not_ready(field, value):
    cluster = fleet_cluster("gpu-1")
    cluster["status"]["providerConfigName"] = value
    view = FleetClusterView.of(cluster)
    assert (view.ready, view.provider_config) == (False, "")


@pytest.mark.parametrize("cache, agent", [
    ({"accessMode": "ReadOnlyMany", "storageClassName": ["fast"], "capacity": "Infinity"},
     {"image": "has spaces in it"}),
    ({"accessMode": ["ReadWriteOnce"], "storageClassName": "Bad_Class", "capacity": "9" * 5000},
     {"image": {"name": "x"}}),
], ids=["wrong-values", "wrong-types"])
def test_a_fleet_cluster_with_malformed_cache_or_agent_fields_reads_the_defaults(cache, agent):
    cluster = fleet_cluster("gpu-1", cache=cache)
    cluster["spec"]["agent"] = agent
    view = FleetClusterView.of(cluster)
    assert (view.access_mode, view.storage_class, view.capacity, view.agent_image) == \
        ("ReadWriteMany", None, None, agent_job.DEFAULT_AGENT_IMAGE)
    assert view.ready


def test_a_fleet_cluster_without_a_valid_name_is_never_targeted():
    unnamed = fleet_cluster("gpu-1")
    unnamed["metadata"]["name"] = ["gpu-1"]
    spec = {"grantRef": {"name": GRANT}, "source": {"huggingFace": {"repo": "org/model"}},
            "placement": {"clusterSelector": {}}}
    rsp = server.run(request("ModelCache", "h", spec, {"fleet-clusters": [unnamed], **GRANTED}),
                     NOW)
    never_internal_error(rsp)
    status = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    assert status["desiredClusters"] == 0


@pytest.mark.parametrize("number", [float("inf"), float("-inf"), float("nan")])
def test_a_number_that_is_nan_or_infinite_in_the_request_reads_as_absent(number):
    spec = {"source": {"huggingFace": {"repo": "org/model"}}, "placement": {"clusterNames": ["a"]},
            "rollout": {"maxConcurrent": 1}}
    req = request("ModelCache", "h", spec, {"fleet-clusters": [fleet_cluster("a")]})
    req.observed.composite.resource["spec"]["rollout"].fields["maxConcurrent"].number_value = \
        number
    req.observed.composite.resource.fields["extra"].number_value = number
    assert server.to_request(req, NOW).composite["extra"] is None
    never_internal_error(server.run(req, NOW))


def test_whole_numbers_in_the_request_read_as_ints_and_others_as_floats():
    req = request("FleetCluster", "h", {"a": 3.0, "b": 2.5, "c": [1.0, True, None, "x"]})
    assert server.to_request(req, NOW).spec == {"a": 3, "b": 2.5, "c": [1, True, None, "x"]}


BAD_IDENTITIES = {
    "no-metadata": None,
    "no-name": {"namespace": "ml"},
    "bad-name": {"name": "Chat_0", "namespace": "ml"},
    "unicode-name": {"name": "modèle-🚀", "namespace": "ml"},
    "no-namespace": {"name": "chat"},
    "bad-namespace": {"name": "chat", "namespace": "Not OK"},
    "long-namespace": {"name": "chat", "namespace": "a" * 64},
}
NAMESPACE_CASES = {"no-namespace", "bad-namespace", "long-namespace"}


@pytest.mark.parametrize("kind, case", [
    (kind, case) for kind in KINDS for case in sorted(BAD_IDENTITIES)
    if not (kind == "FleetCluster" and case in NAMESPACE_CASES)])  # cluster-scoped
def test_a_composite_without_a_valid_name_or_namespace_is_refused_naming_the_field(kind, case):
    req = request(kind, "chat", {})
    composite = resource.struct_to_dict(req.observed.composite.resource)
    if BAD_IDENTITIES[case] is None:
        del composite["metadata"]
    else:
        composite["metadata"] = BAD_IDENTITIES[case]
    req.observed.composite.resource.Clear()
    resource.update(req.observed.composite, composite)
    rsp = server.run(req, NOW)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert fatal and "metadata." in fatal[0], fatal
    assert not rsp.desired.resources
