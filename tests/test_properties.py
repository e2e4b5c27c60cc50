"""Property tests: no request crashes, stalls, answers "internal error" or is nondeterministic.

Realistic requests for every kind, at several points of their lifecycle, are mutated by
tests.support.mutate (wrong types, huge and non-finite numbers, 100 KB strings, unicode,
deleted keys, at any depth) and sent through the real server, in process and a share of
them over gRPC on loopback. For every one:

- no exception escapes `server.run`, and no fatal result says "internal error";
- the request is answered: its tag echoed, and a composition or a fatal result saying why;
- the call stays within a budget of Python calls linear in the request's values (as does
  every kind at 1,000 clusters or replicas): a count, which load does not change as it
  changes CPU seconds (bench/ times the calls); a call past 20 s of CPU is stopped and fails;
- the same request twice gives byte-identical responses;
- every composed resource has a valid Kubernetes name for its kind, and valid labels;
- every message is at most kit.MESSAGE_LIMIT (1 KiB) characters: input is quoted cut short.

A clean fatal result naming the field is the right answer to a bad spec, so it passes.
`make test` runs a few examples per property (tests/conftest.py); `make test-slow` many,
and also sweeps every single-node mutation of every realistic request.
"""

from __future__ import annotations

import contextlib
import copy
import cProfile
import datetime
import functools
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetcache import exitcodes, shapes
from fleetcache.apis import xrds
from fleetcache.devtools import render
from fleetcache.functions import naming, read, server
from fleetcache.functions.composers import model_cache, model_deployment
from fleetcache.functions.k8s import hydration_objects, objects
from fleetcache.messages import MESSAGE_LIMIT, shown  # MESSAGE_LIMIT: 1 KiB, a few values quoted at SHOWN_LIMIT each
from tests.support import builders
from tests.support.cases import FLEET, Case
from tests.support.deployments import deployment
from tests.support.fleet import COMMIT, DIGEST, GIB, fleet_cluster, grant_admitting, model_cache_xr, observed_object
from tests.support.k8s import metadata_problems
from tests.support.mutate import Mutated, mutated_request, single_mutations

NOW = datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC)
KINDS = sorted(server.COMPOSER_MODULES)
# Python calls (builtins included, counted by cProfile) a request may take: a base, ~4,000 to
# ~33,000 measured, and per value in it, 5 to 19 measured at 1,000 clusters, replicas or Jobs.
WORK_BASE_CALLS = 40_000
WORK_CALLS_PER_VALUE = 40
STALL_SECONDS = 20.0  # CPU seconds after which a call is stopped rather than waited for

SCALE = 1_000


# --- realistic requests of every kind, as Crossplane would send them ------------------------


def request_of(composite: dict, observed: dict, required: dict) -> fnv1.RunFunctionRequest:
    return render.build_request(composite, observed, fnv1.State(), None, None, required,
                                tag="property")


def observed_after(rsp: fnv1.RunFunctionResponse, states: dict, data: dict) -> dict:
    """The response's desired resources as Crossplane observes them next round: an Object
    with `states[key]` as its remote object's status (and `data[key]` its data), anything
    else with `states[key]` as its own status."""
    observed = {}
    for key in sorted(rsp.desired.resources):
        desired = server.plain(resource.struct_to_dict(rsp.desired.resources[key].resource))
        if desired.get("kind") == "Object":
            observed[key] = observed_object(desired, remote_status=builders.by_key(states, key),
                                            data=builders.by_key(data, key))
        else:
            observed[key] = {**desired, **({"status": states[key]} if key in states else {})}
    return observed


def settle(case_id: str, composite: dict, pool: list[dict], *, rounds: int,
           states: dict | None = None, data: dict | None = None) -> Case:
    """The request Crossplane sends at reconcile number `rounds`: each reconcile before it
    answers what the server requires from `pool` (as render does), merges the status it
    returns into the composite, and observes what it composed in `states`."""
    observed: dict = {}
    required: dict = {}  # each reconcile starts from the last one's answers, as they rarely change
    for _ in range(rounds - 1):
        for _ in range(render.MAX_REQUIREMENT_ROUNDS):
            rsp = server.run(request_of(composite, observed, required), NOW)
            wanted = render.answer_requirements(rsp.requirements, pool)
            if wanted == required:
                break
            required = wanted
        composite = render.merge_status(composite, rsp)
        observed = observed_after(rsp, states or {}, data or {})
    return Case(case_id, composite, observed, required)


HF_SECRET = {"apiVersion": "v1", "kind": "Secret",
             "metadata": {"name": "hf-token", "namespace": "ml"}, "data": {"HF_TOKEN": "aGY="}}
RESOLVED_RECORD = {"phase": "Resolved", "commit": COMMIT, "bytes": str(3 * GIB), "files": "5",
                   "manifestDigest": DIGEST, "reason": "", "message": ""}
HYDRATION_STATES = {  # a ModelCacheHydration's status in each phase
    "Ready": {"phase": "Ready", "progress": {"bytesDone": 3 * GIB, "bytesTotal": 3 * GIB},
              "reason": "Hydrated", "message": "", "servingCommit": COMMIT},
    "Hydrating": {"phase": "Hydrating", "progress": {"bytesDone": GIB, "bytesTotal": 3 * GIB},
                  "reason": "Hydrating", "message": "33%"},
    "Failed": {"phase": "Failed", "progress": {"bytesDone": 0, "bytesTotal": 3 * GIB},
               "reason": "DigestMismatch", "message": "bad bytes"},
}
AVAILABLE = {"availableReplicas": 1, "conditions": [
    {"type": "Available", "status": "True"},
    {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}


def _fleet_cluster_seeds() -> list[Case]:
    tuned = builders.fleet_cluster_xr(
        kubeconfigSecretRef={"namespace": "crossplane-system", "name": "east",
                             "key": "kubeconfig"},
        cache={"storageClassName": "fast-rwx", "accessMode": "ReadWriteMany",
               "capacity": "500Gi"},
        agent={"image": "registry.example.com/fleetcache/fleetcache-agent:v0.1.0"})
    adopting = builders.fleet_cluster_xr(providerConfigRef={"name": "existing"})
    return [settle("fleet-cluster-provider-config-observed", tuned, [], rounds=2),
            settle("fleet-cluster-adopting", adopting, [], rounds=1)]


def _model_cache_seeds() -> list[Case]:
    private = model_cache_xr(source={"huggingFace": {"repo": "org/private",
                                                     "tokenSecretRef": {"name": "hf-token"}},
                                     "allowPatterns": ["*.safetensors"]},
                             storage={"size": "20Gi", "storageClassName": "fast"})
    failed_record = {**RESOLVED_RECORD, "phase": "Failed", "reason": "RepoNotFound",
                     "message": "404 for org/private at revision main"}
    pool = FLEET + [HF_SECRET, grant_admitting(private)]
    return [
        settle("model-cache-resolving", private, pool, rounds=2,
               states={"resolve-job-": builders.job_running()},
               data={"resolve-configmap-": {"phase": "Resolving"}}),
        settle("model-cache-resolve-failed", private, pool, rounds=2,
               states={"resolve-job-": builders.job_failed_exit(exitcodes.PERMANENT_CODES[0])},
               data={"resolve-configmap-": failed_record}),
        hydrating_model_cache(),
    ]


def hydrating_model_cache(fleet: list[dict] = FLEET, **spec: Any) -> Case:
    """A ModelCache resolved and hydrating on `fleet`: Ready, Hydrating, Failed, Ready..."""
    phases = list(HYDRATION_STATES.values())
    states = {model_cache.hydration_key(cluster["metadata"]["name"]): phases[index % 3]
              for index, cluster in enumerate(fleet)}
    xr = model_cache_xr(**spec)
    return settle("model-cache-ready-hydrating-failed", xr, fleet + [grant_admitting(xr)],
                  rounds=4, states={"resolve-job-": builders.job_complete(), **states},
                  data={"resolve-configmap-": RESOLVED_RECORD})


def _hydration_seeds() -> list[Case]:
    job = hydration_objects.job_prefix(COMMIT, DIGEST)
    bound = {"volume": builders.pvc("Bound")}
    record = {"phase": "Hydrating", "bytesDone": str(GIB), "bytesTotal": str(3 * GIB),
              "filesDone": "2", "filesTotal": "5", "commit": COMMIT,
              "reason": "RateLimited", "message": "429 from the Hub"}
    cluster = fleet_cluster(builders.CLUSTER, cache={"storageClassName": "fast",
                                                     "capacity": "1Ti"})
    pool = [cluster, HF_SECRET]
    tuned = builders.hydration_xr(token=True, job={"backoffLimit": 2},
                                  agent={"concurrency": 8, "bandwidth": "100Mi"})
    serving_earlier = builders.with_status(builders.hydration_xr(),
                                           servingRepo="Qwen/Qwen3-0.6B",
                                           servingCommit="0" * 39 + "1",
                                           servingManifestDigest="cd" * 32)
    return [
        settle("hydration-running-serving-earlier", serving_earlier, pool, rounds=3,
               states={job: builders.job_running(), **bound}, data={"progress": record}),
        settle("hydration-failed-with-token", tuned, pool, rounds=3,
               states={job: builders.job_failed_exit(exitcodes.PERMANENT_CODES[-1]), **bound},
               data={"progress": record}),
        settle("hydration-complete", builders.hydration_xr(), pool, rounds=3,
               states={job: builders.job_complete(), **bound}),
    ]


def cache_pool(cache: Case, fleet: list[dict]) -> list[dict]:
    """What a ModelDeployment may require: the clusters, the ModelCache with the status its
    composer wrote, and the ModelCacheHydrations it composed, in their observed phases."""
    hydrations = [h for h in cache.observed.values() if h.get("kind") == "ModelCacheHydration"]
    return fleet + [cache.composite] + hydrations


POLICIES = (("Source", "Source"), ("Wait", "Fail"))  # whileHydrating, onHydrationFailure


def _deployments(cache: Case | None = None, fleet: list[dict] = FLEET, replicas: int = 3,
                 policies: tuple[tuple[str, str], ...] = POLICIES) -> list[Case]:
    """A deployment of `cache` (else hydrating_model_cache()) under each delivery policy,
    its replicas observed, every other one Ready."""
    pool = cache_pool(cache or hydrating_model_cache(), fleet)
    states = {model_deployment.replica_key(index): {"conditions": [
        {"type": "Ready", "status": "True" if index % 2 else "False"}]}
        for index in range(replicas)}
    cases = []
    for while_hydrating, on_failure in policies:
        xr = deployment(replicas=replicas, maxReplicasPerCluster=1,
                        delivery={"whileHydrating": while_hydrating,
                                  "onHydrationFailure": on_failure, "switchToCache": "OnReady"})
        cases.append(settle(f"model-deployment-{while_hydrating.lower()}-{on_failure.lower()}",
                            xr, pool, rounds=2, states=states))
    return cases


def _deployment_seeds() -> list[Case]:
    source = deployment(replicas=2, modelCacheRef=None,
                        model={"huggingFace": {"repo": "Qwen/Qwen3-0.6B", "revision": "main"}},
                        placement={"clusterNames": ["gpu-east-1", "gpu-west-1"]})
    return _deployments() + [settle("model-deployment-from-source", source, FLEET, rounds=2)]


def replicas_as_written(deployments: list[Case] | None = None) -> dict[str, tuple[dict, dict]]:
    """ModelReplicas as ModelDeployment writes them, with the deployment that wrote each, by
    delivery: Cache, Source, Wait, Fail."""
    written: dict[str, tuple[dict, dict]] = {}
    for case in deployments or _deployments():
        for replica in case.observed.values():
            replica = {k: v for k, v in replica.items() if k != "status"}
            written.setdefault(str(read.get_path(replica, "spec.delivery")),
                               (replica, case.composite))
    return written


def _replica_seeds() -> list[Case]:
    return [settle(f"model-replica-{delivery.lower()}", replica, FLEET + [owner], rounds=2,
                   states={"deployment": AVAILABLE})
            for delivery, (replica, owner) in sorted(replicas_as_written().items())]


def grant_pool(fleet: list[dict], caches: int) -> tuple[dict, list[dict]]:
    """A 100Gi grant over the gpu=h100 clusters, and `caches` ModelCaches naming it (by
    names or by selector, every fifth outside the grant, every seventh unresolved) with a
    hydration each, among `fleet`."""
    names = [c["metadata"]["name"] for c in fleet]
    grant = {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
             "metadata": {"name": "team-a", "namespace": "ml"},
             "spec": {"clusters": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}},
                      "quota": {"bytes": "100Gi"}, "allowPinned": False}}
    pool = list(fleet) + [fleet_cluster("gpu-lab-1", labels={"gpu": "a10"})]
    for index in range(caches):
        name = f"cache-{index:04d}"
        placement = {"clusterSelector": {"matchLabels": {"gpu": "h100"}}} if index % 2 else \
            {"clusterNames": names[index % len(names):][:2]
             + (["gpu-lab-1"] if index % 5 == 4 else [])}
        cache = {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
                 "metadata": {"name": name, "namespace": "ml",
                              "creationTimestamp": f"2026-12-01T00:{index % 60:02}:00Z"},
                 "spec": {"grantRef": {"name": "team-a"},
                          "source": {"huggingFace": {"repo": f"org/m{index % 9}"}},
                          "placement": placement, "retention": {"pinned": index % 11 == 3}}}
        if index % 7:
            cache["status"] = {"resolved": {"commit": COMMIT, "bytes": (index % 9 + 1) * GIB,
                                            "manifestDigest": f"{index % 9:02d}" * 32}}
        pool.append(cache)
        pool.append({"apiVersion": naming.API_VERSION, "kind": "ModelCacheHydration",
                     "metadata": {"name": f"{name}-{names[0]}", "namespace": "ml"},
                     "spec": {"modelCacheName": name, "clusterName": names[0],
                              "manifestDigest": f"{index % 9:02d}" * 32,
                              "bytes": (index % 9 + 1) * GIB}})
    return grant, pool


def _grant_seeds() -> list[Case]:
    grant, pool = grant_pool(FLEET, 6)
    return [settle("model-cache-grant-first-decision", grant, pool, rounds=2),
            settle("model-cache-grant-deciding-again", grant, pool, rounds=3)]


SEED_BUILDERS = {"FleetCluster": _fleet_cluster_seeds, "ModelCache": _model_cache_seeds,
                 "ModelCacheGrant": _grant_seeds,
                 "ModelCacheHydration": _hydration_seeds, "ModelDeployment": _deployment_seeds,
                 "ModelReplica": _replica_seeds}


@functools.cache
def seeds(kind: str) -> list[Case]:
    """A kind's realistic requests, at several points of its lifecycle."""
    return SEED_BUILDERS[kind]()


def hostile_requests(kind: str) -> st.SearchStrategy[Mutated]:
    return st.sampled_from(seeds(kind)).flatmap(
        lambda case: mutated_request(case.composite, case.observed, case.required,
                                     origin=case.id))


# --- calling the server --------------------------------------------------------------------


class Stalled(BaseException):
    """Raised into a call that ran STALL_SECONDS of CPU: a BaseException, so the server's
    catch-all cannot turn it into a result."""


@contextlib.contextmanager
def stall_guard() -> Iterator[None]:
    def stop(*_: Any) -> None:
        raise Stalled(f"the call ran {STALL_SECONDS:.0f} s of CPU and was stopped")

    previous = signal.signal(signal.SIGPROF, stop)
    signal.setitimer(signal.ITIMER_PROF, STALL_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def guarded_run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """The in-process server's response; a stall fails the test instead of hanging it."""
    with stall_guard():
        return server.run(req, NOW)


def respond(mutated: Mutated) -> fnv1.RunFunctionResponse:
    return guarded_run(request_of(mutated.composite, mutated.observed, mutated.required))


def value_count(value: Any) -> int:
    """The values in a document, maps and lists included."""
    if isinstance(value, dict):
        return 1 + sum(value_count(inner) for inner in value.values())
    if isinstance(value, list):
        return 1 + sum(value_count(item) for item in value)
    return 1


def counted_run(composite: dict, observed: dict,
                required: dict) -> tuple[fnv1.RunFunctionResponse, int, int]:
    """The response to a request of these documents, the Python calls it took, and its budget:
    linear in the request's values, so work that grows faster than the input exceeds it."""
    profile = cProfile.Profile()
    with stall_guard():
        profile.enable()
        try:
            rsp = server.run(request_of(composite, observed, required), NOW)
        finally:
            profile.disable()
    calls = sum(entry.callcount for entry in profile.getstats())
    budget = WORK_BASE_CALLS + WORK_CALLS_PER_VALUE * value_count([composite, observed, required])
    return rsp, calls, budget


def serialized(rsp: fnv1.RunFunctionResponse) -> bytes:
    return rsp.SerializeToString(deterministic=True)


# --- what every response must satisfy --------------------------------------------------------


def answered(rsp: fnv1.RunFunctionResponse) -> bool:
    """The response answers its request: the tag echoed, and a composition or a fatal result
    saying why."""
    fatal = any(r.severity == fnv1.SEVERITY_FATAL and r.message for r in rsp.results)
    composed = bool(rsp.desired.composite.resource or rsp.desired.resources)
    return rsp.meta.tag == "property" and (fatal or composed)


def internal_errors(rsp: fnv1.RunFunctionResponse) -> list[str]:
    return [r.message[:400] for r in rsp.results
            if r.severity == fnv1.SEVERITY_FATAL and "internal error" in r.message]


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) of every map inside `value`, at any depth."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key, inner
            yield from _walk(inner)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def messages(rsp: fnv1.RunFunctionResponse) -> list[str]:
    """Every message the response carries: results, conditions, and the composite's status."""
    status = resource.struct_to_dict(rsp.desired.composite.resource).get("status")
    return ([r.message for r in rsp.results] + [c.message for c in rsp.conditions]
            + [v for k, v in _walk(status) if k == "message" and isinstance(v, str)])


def long_messages(rsp: fnv1.RunFunctionResponse) -> list[str]:
    return [f"{len(m)} characters: {m[:300]}..." for m in messages(rsp) if len(m) > MESSAGE_LIMIT]


def label_value_ok(value: Any) -> bool:
    """At most 63 characters shaped like validation.LABEL_VALUE (as metadata labels are)."""
    return isinstance(value, str) and len(value) <= 63 and bool(
        shapes.LABEL_VALUE.fullmatch(value))


def _manifest_problems(manifest: Any, where: str) -> list[str]:
    """What the API server would refuse in one composed manifest's names and labels."""
    meta = manifest.get("metadata") if isinstance(manifest, dict) else None
    if not isinstance(meta, dict):
        return [f"{where}: metadata {shown(meta, 80)} is not an object"]
    labels = [meta.get("labels"), read.get_path(manifest, "spec.template.metadata.labels")]
    for field, value in (("name", meta.get("name")), ("namespace", meta.get("namespace", ""))):
        if not isinstance(value, str):
            return [f"{where}: metadata.{field} {shown(value, 80)} is not a string"]
    for found in labels:
        if found is not None and (not isinstance(found, dict) or not all(
                isinstance(v, str) for v in found.values())):
            return [f"{where}: labels {shown(found, 80)} are not a map of strings"]
    problems = [f"{where}: {p[:300]}" for p in metadata_problems(manifest)]
    name = meta["name"]
    if manifest.get("apiVersion") == naming.API_VERSION and (
            len(name) > xrds.CROSSPLANE_NAME_MAX
            or not shapes.DNS_LABEL.fullmatch(name)):
        # A composed XR's name becomes the crossplane.io/composite label of what it composes.
        problems.append(f"{where}: composite name {name[:100]!r} is not a label value "
                        f"(<= {xrds.CROSSPLANE_NAME_MAX} characters)")
    for key, value in _walk(manifest.get("spec")):
        if key == "matchLabels" and isinstance(value, dict):
            problems += [f"{where}: matchLabels {k}={str(v)[:100]!r} is not a label value"
                         for k, v in value.items() if not label_value_ok(v)]
    return problems


def name_problems(rsp: fnv1.RunFunctionResponse) -> list[str]:
    """Invalid names or labels in any composed resource or the manifest it carries."""
    problems = []
    for key in sorted(rsp.desired.resources):
        composed = resource.struct_to_dict(rsp.desired.resources[key].resource)
        problems += _manifest_problems(composed, key)
        if composed.get("kind") == "Object" and composed.get("apiVersion") == \
                objects.OBJECT_API_VERSION:
            problems += _manifest_problems(read.get_path(composed, "spec.forProvider.manifest"),
                                           f"{key} (remote manifest)")
    return problems


# --- the properties, for every kind ----------------------------------------------------------

kinds = pytest.mark.parametrize("kind", KINDS)


@kinds
@given(data=st.data())
def test_no_exception_escapes_the_server_and_every_request_is_answered(kind, data):
    assert answered(respond(data.draw(hostile_requests(kind), label="request")))


@kinds
@given(data=st.data())
def test_no_request_ends_in_an_internal_error(kind, data):
    found = internal_errors(respond(data.draw(hostile_requests(kind), label="request")))
    assert found == []


@kinds
@given(data=st.data())
def test_every_call_stays_within_its_work_budget(kind, data):
    mutated = data.draw(hostile_requests(kind), label="request")
    _, calls, budget = counted_run(mutated.composite, mutated.observed, mutated.required)
    assert calls <= budget


@kinds
@given(data=st.data())
def test_the_same_request_twice_gives_byte_identical_responses(kind, data):
    mutated = data.draw(hostile_requests(kind), label="request")
    first, second = serialized(respond(mutated)), serialized(respond(mutated))
    assert first == second


@kinds
@given(data=st.data())
def test_every_composed_name_and_label_is_valid_for_its_kind(kind, data):
    found = name_problems(respond(data.draw(hostile_requests(kind), label="request")))
    assert found == []


@kinds
@given(data=st.data())
def test_every_message_stays_within_the_message_limit(kind, data):
    found = long_messages(respond(data.draw(hostile_requests(kind), label="request")))
    assert found == []


@pytest.fixture(scope="module")
def grpc_stub():
    runner = server.FunctionRunner(now=lambda: NOW)
    with render.InProcessServer(None, runner) as srv, render.channel_to(srv.address) as channel:
        yield grpcv1.FunctionRunnerServiceStub(channel)


# The server's servicer on the tests' clock (NOW), served by the SDK as fleetcache-function serves it.
SERVE_AT_NOW = (
    "import datetime, sys; from crossplane.function import runtime; from fleetcache.functions import server; "
    "runtime.serve(server.FunctionRunner(lambda: datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC)), "
    "sys.argv[1], creds=None, insecure=True, "
    "options=[('grpc.max_receive_message_length', server.MAX_REQUEST_MIB * server.MiB)])")


@pytest.fixture(scope="module")
def other_process_stub():
    """The function server in a process of its own, with another string-hash seed, so a
    composer whose output follows set or hash order answers differently there; on the tests'
    clock, so a composer that writes the time (a retention latch) answers the same."""
    assert NOW == datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC), "SERVE_AT_NOW names NOW's date"
    ours = os.environ.get("PYTHONHASHSEED", "random")
    env = {**os.environ, "PYTHONHASHSEED": "1" if ours == "random" else str(int(ours) + 1)}
    address = f"127.0.0.1:{render.free_port()}"
    process = subprocess.Popen([sys.executable, "-c", SERVE_AT_NOW, address], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        render.wait_until_serving(address, process)
        with render.channel_to(address) as channel:
            yield grpcv1.FunctionRunnerServiceStub(channel)
    finally:
        process.terminate()
        process.wait(10)


SHARE = max(2, settings().max_examples // 4)  # of the examples, sent over gRPC as well


@kinds
@settings(max_examples=SHARE)
@given(data=st.data())
def test_over_grpc_the_server_answers_as_it_does_in_process(kind, data, grpc_stub):
    mutated = data.draw(hostile_requests(kind), label="request")
    req = request_of(mutated.composite, mutated.observed, mutated.required)
    answered, in_process = grpc_stub.RunFunction(req, timeout=60), server.run(req, NOW)
    assert serialized(answered) == serialized(in_process)


@kinds
@settings(max_examples=SHARE)
@given(data=st.data())
def test_another_process_with_another_hash_seed_answers_the_same(kind, data,
                                                                  other_process_stub):
    mutated = data.draw(hostile_requests(kind), label="request")
    req = request_of(mutated.composite, mutated.observed, mutated.required)
    answered, in_process = other_process_stub.RunFunction(req, timeout=60), server.run(req, NOW)
    assert serialized(answered) == serialized(in_process)  # composers read no clock


# --- the checks themselves catch what they look for ----------------------------------------


def test_the_internal_error_check_catches_one():
    rsp = fnv1.RunFunctionResponse()
    result = rsp.results.add(severity=fnv1.SEVERITY_FATAL)
    result.message = "ModelCache qwen: internal error while composing (KeyError: 'x')"
    assert internal_errors(rsp) == [result.message]


def test_the_name_check_catches_bad_names_namespaces_and_labels():
    rsp = fnv1.RunFunctionResponse()
    resource.update(rsp.desired.resources["replica"], {
        "apiVersion": naming.API_VERSION, "kind": "ModelReplica",
        "metadata": {"name": "r" * 64, "namespace": "ml"}})
    resource.update(rsp.desired.resources["object"], {
        "apiVersion": objects.OBJECT_API_VERSION, "kind": "Object",
        "metadata": {"name": "o", "namespace": "ml", "labels": {"a": "not a label value"}},
        "spec": {"forProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap",
                                              "metadata": {"name": "c", "namespace": "[]"}}}}})
    found = name_problems(rsp)
    assert [p.split(":")[0] for p in found] == ["object", "object (remote manifest)", "replica"]


def test_the_message_check_catches_a_long_status_message():
    rsp = fnv1.RunFunctionResponse()
    resource.update(rsp.desired.composite, {"status": {"clusters": [
        {"name": "a", "message": "x" * (MESSAGE_LIMIT + 1)}]}})
    assert len(long_messages(rsp)) == 1


# --- the unmutated requests: every property holds, and nothing is refused ---------------------


@kinds
def test_every_realistic_request_composes_cleanly(kind):
    for case in seeds(kind):
        rsp, calls, budget = counted_run(case.composite, case.observed, case.required)
        fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
        assert (fatal, name_problems(rsp), long_messages(rsp)) == ([], [], []), case.id
        assert rsp.desired.resources or rsp.desired.composite.resource, case.id
        assert calls <= budget, f"{case.id}: {calls:,} Python calls, over its budget of {budget:,}"


# --- every single mutation, systematically (make test-slow) ---------------------------------


def violations(rsp: fnv1.RunFunctionResponse, calls: int, budget: int) -> list[str]:
    """Every property one response breaks, in words (but determinism: it takes two calls)."""
    found = [f"internal error: {message[:200]}" for message in internal_errors(rsp)]
    if not answered(rsp):
        found.append("no composition and no fatal result saying why")
    if calls > budget:
        found.append(f"{calls} Python calls, over its budget of {budget}")
    return found + name_problems(rsp) + long_messages(rsp)


def _kind_of_problem(problem: str) -> str:
    """A problem with its values and numbers blanked, so one cause is listed once."""
    return re.sub(r"\d+", "N", re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", problem))[:160]


@pytest.mark.slow
@kinds
def test_every_single_mutation_of_every_realistic_request_keeps_every_property(kind):
    broken: dict[str, list[str]] = {}
    for case in seeds(kind):
        doc = {"composite": case.composite, "observed": case.observed,
               "required": case.required}
        for change, mutated in single_mutations(doc):
            try:
                problems = violations(*counted_run(mutated["composite"], mutated["observed"],
                                                   mutated["required"]))
            except Exception as err:  # noqa: BLE001 - escaping the server is the finding
                problems = [f"{type(err).__name__} escaped server.run: {str(err)[:200]}"]
            for problem in problems:
                broken.setdefault(_kind_of_problem(problem), []).append(f"{case.id}: {change}")
    if broken:
        pytest.fail("\n".join(f"{problem}\n    e.g. {min(where, key=len)} ({len(where)} in all)"
                               for problem, where in sorted(broken.items())), pytrace=False)


# --- every kind at scale ---------------------------------------------------------------------


def _fleet(count: int) -> list[dict]:
    return [fleet_cluster(f"gpu-{index:04d}") for index in range(count)]


def _fleet_cluster_at_scale() -> Case:
    """A FleetCluster labelled 1,000 ways."""
    xr = builders.fleet_cluster_xr()
    xr["metadata"]["labels"] = {f"fleetcache.dev/l{index:04d}": "x" for index in range(SCALE)}
    return settle("fleet-cluster-1000-labels", xr, [], rounds=2)


@functools.cache
def _model_cache_at_scale() -> Case:
    """A ModelCache over 1,000 clusters, every hydration observed in some phase."""
    case = hydrating_model_cache(_fleet(SCALE), rollout={"maxConcurrent": SCALE})
    return Case("model-cache-1000-clusters", case.composite, case.observed, case.required)


def _hydration_at_scale() -> Case:
    """A ModelCacheHydration carrying 1,000 observed Jobs of earlier commits."""
    case = seeds("ModelCacheHydration")[0]
    observed = dict(case.observed)
    prefix = hydration_objects.job_prefix(COMMIT, DIGEST)
    job = next(job for key, job in observed.items() if key.startswith(prefix))
    for index in range(SCALE):
        earlier = f"{index:010x}{COMMIT[10:]}"
        observed[hydration_objects.job_key(earlier, DIGEST, "0abc12")] = copy.deepcopy(job)
    return Case("hydration-1000-observed-jobs", case.composite, observed, case.required)


@functools.cache
def _deployment_at_scale() -> Case:
    """1,000 replicas over 1,000 clusters, all observed, from a cache on all of them."""
    case, = _deployments(_model_cache_at_scale(), _fleet(SCALE), replicas=SCALE,
                         policies=POLICIES[:1])
    return Case("model-deployment-1000-replicas", case.composite, case.observed, case.required)


def _replica_at_scale() -> Case:
    """One replica of the 1,000, reading its deployment's status of all 1,000."""
    owner = _deployment_at_scale()
    replica, _ = replicas_as_written([owner])["Cache"]
    return settle("model-replica-of-1000", replica, _fleet(SCALE) + [owner.composite],
                  rounds=2, states={"deployment": AVAILABLE})


def _grant_at_scale() -> Case:
    """A grant deciding again over 1,000 caches on 1,000 clusters, its 500 rows published."""
    grant, pool = grant_pool(_fleet(SCALE), SCALE)
    return settle("model-cache-grant-1000-caches", grant, pool, rounds=2)


SCALE_CASES = {"FleetCluster": _fleet_cluster_at_scale, "ModelCache": _model_cache_at_scale,
               "ModelCacheGrant": _grant_at_scale,
               "ModelCacheHydration": _hydration_at_scale,
               "ModelDeployment": _deployment_at_scale, "ModelReplica": _replica_at_scale}


@kinds
def test_a_thousand_clusters_or_replicas_compose_within_their_work_budget(kind):
    case = SCALE_CASES[kind]()
    rsp, calls, budget = counted_run(case.composite, case.observed, case.required)
    assert [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL] == []
    assert calls <= budget, f"{case.id}: {calls:,} Python calls, over its budget of {budget:,}"
