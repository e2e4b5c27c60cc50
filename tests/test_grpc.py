"""The composers through the real gRPC server on loopback: insecure, mTLS, and as a process.

Each case is a request the table tests also cover; through gRPC it must give exactly the
response the server gives in process, byte for byte.
"""

from __future__ import annotations

import datetime

import grpc
import pytest
from click.testing import CliRunner
from crossplane.function import runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache import messages
from fleetcache.devtools import render
from fleetcache.functions import protocol, server
from fleetcache.functions.composers import model_replica
from tests.support.cases import CASES
from tests.support.deployments import CLUSTER, REPLICA_ENGINE, deployment, replica_xr
from tests.support.fleet import COMMIT, fleet_cluster, observed_object
from tests.support.tls import make_pki

FIXED_NOW = datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC)
REPLICA_REQUIRED = {model_replica.FLEET_CLUSTER_KEY: [fleet_cluster(CLUSTER)],
                    model_replica.DEPLOYMENT_KEY: [deployment(engine=REPLICA_ENGINE)]}


def fixed_clock_server(credentials=None) -> render.InProcessServer:
    """The in-process server with the clock pinned, so responses compare byte for byte."""
    return render.InProcessServer(credentials, server.FunctionRunner(now=lambda: FIXED_NOW))


def request_of(case) -> fnv1.RunFunctionRequest:
    return render.build_request(case.composite, case.observed, fnv1.State(), None, None,
                                case.required, tag=case.id)


def serialized(rsp: fnv1.RunFunctionResponse) -> bytes:
    return rsp.SerializeToString(deterministic=True)


@pytest.fixture(scope="module")
def pki():
    return make_pki()


@pytest.fixture(scope="module")
def insecure_stub():
    with fixed_clock_server() as srv, render.channel_to(srv.address) as channel:
        yield grpcv1.FunctionRunnerServiceStub(channel)


@pytest.fixture(scope="module")
def mtls_server(pki, tmp_path_factory):
    certs = tmp_path_factory.mktemp("tls")
    (certs / "tls.crt").write_bytes(pki.server.cert)
    (certs / "tls.key").write_bytes(pki.server.key)
    (certs / "ca.crt").write_bytes(pki.ca)
    with fixed_clock_server(runtime.load_credentials(str(certs))) as srv:
        yield srv


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_case_answers_something_so_a_transport_difference_would_show(case):
    rsp = server.run(request_of(case), FIXED_NOW)
    assert (rsp.desired.resources or rsp.desired.composite.resource
            or rsp.requirements.resources or rsp.results), case.id


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_insecure_grpc_gives_the_in_process_response(case, insecure_stub):
    req = request_of(case)
    assert serialized(insecure_stub.RunFunction(req, timeout=60)) == serialized(
        server.run(req, FIXED_NOW))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_mtls_grpc_gives_the_in_process_response(case, pki, mtls_server):
    tls = render.TLSFiles(ca=pki.ca, cert=pki.client.cert, key=pki.client.key)
    with render.channel_to(mtls_server.address, tls) as channel:
        req = request_of(case)
        rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=60)
    assert serialized(rsp) == serialized(server.run(req, FIXED_NOW))


def test_mtls_refuses_a_client_certificate_from_another_ca(pki, mtls_server):
    tls = render.TLSFiles(ca=pki.ca, cert=pki.stranger.cert, key=pki.stranger.key)
    with render.channel_to(mtls_server.address, tls) as channel:
        with pytest.raises(grpc.RpcError):
            grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request_of(CASES[0]),
                                                                  timeout=10)


def test_the_same_request_twice_gives_byte_identical_responses(insecure_stub):
    for case in CASES:
        req = request_of(case)
        first = insecure_stub.RunFunction(req, timeout=60)
        assert serialized(insecure_stub.RunFunction(req, timeout=60)) == serialized(first)


def test_the_fleetcache_function_process_serves_the_same_responses():
    with render.function_process() as address, render.channel_to(address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        for case in CASES:
            req = request_of(case)
            rsp = stub.RunFunction(req, timeout=60)
            expected = server.run(req, FIXED_NOW)
            assert [r.message for r in rsp.results] == [r.message for r in expected.results]
            assert serialized(rsp.desired) == serialized(expected.desired)


def test_an_unknown_kind_is_a_fatal_result_naming_it(insecure_stub):
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update({"apiVersion": "example.org/v1", "kind": "Bucket",
                                            "metadata": {"name": "b"}})
    rsp = insecure_stub.RunFunction(req, timeout=10)
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]
    assert "'Bucket'" in rsp.results[0].message


def test_fleetcache_function_takes_the_sdks_standard_options():
    help_text = CliRunner().invoke(server.main, ["--help"]).output
    for flag in ("--insecure", "--tls-certs-dir", "--address", "--debug"):
        assert flag in help_text


# --- limits and startup -------------------------------------------------------------------


def test_fleetcache_function_defaults_to_the_message_limits_crossplane_uses(monkeypatch):
    served = {}
    monkeypatch.setattr(server.sdkcli, "run", lambda runner, **kwargs: served.update(kwargs))
    assert CliRunner().invoke(server.main, ["--insecure"]).exit_code == 0
    assert (served["max_recv_message_size"], served["max_send_message_size"]) == (64, 4)


def test_the_fleetcache_function_process_accepts_a_request_over_the_sdks_4_mib_default():
    composite = {"apiVersion": "fleetcache.dev/v1alpha1", "kind": "FleetCluster",
                 "metadata": {"name": "big", "annotations": {"note": "x" * (6 * server.MiB)}},
                 "spec": {"providerConfigRef": {"name": "existing"}}}
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(composite)
    with render.function_process() as address, render.channel_to(address) as channel:
        rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=60)
    assert not rsp.results
    assert rsp.desired.composite.resource["status"]["providerConfigName"] == "existing"


def test_a_response_over_crossplanes_limit_is_a_fatal_result_naming_size_and_fix(monkeypatch):
    monkeypatch.setattr(server, "MAX_RESPONSE_BYTES", 1000)
    rsp = server.run(request_of(next(c for c in CASES if c.id == "model-cache-three-phases")),
                     FIXED_NOW)
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]
    assert "4 MiB Crossplane accepts" in rsp.results[0].message
    assert "spec.placement" in rsp.results[0].message
    assert not rsp.desired.resources


def test_fleetcache_function_without_tls_or_insecure_is_a_usage_error_not_a_traceback():
    result = CliRunner().invoke(server.main, [])
    assert result.exit_code == 2
    assert "--tls-certs-dir" in result.output and "--insecure" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_fleetcache_function_names_the_tls_files_a_directory_lacks(tmp_path):
    (tmp_path / "tls.crt").write_text("x")
    result = CliRunner().invoke(server.main, ["--tls-certs-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "lacks tls.key, ca.crt" in result.output


# --- Normal results and the response TTL ----------------------------------------------------


def test_a_replica_that_starts_serving_a_commit_gives_a_normal_result_through_grpc(insecure_stub):
    """Crossplane records a Normal result as a Normal event on the composite
    (composite/composition_functions.go: Severity_SEVERITY_NORMAL -> event.Normal)."""
    xr = replica_xr("Cache")
    first = model_replica.compose(protocol.Request(composite=xr, required=REPLICA_REQUIRED))
    engine = observed_object(first.desired[model_replica.ENGINE_KEY][0], remote_status={
        "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1, "observedGeneration": 1})
    req = render.build_request(xr, {model_replica.ENGINE_KEY: engine}, fnv1.State(), None, None,
                               REPLICA_REQUIRED, tag="serving")
    rsp = insecure_stub.RunFunction(req, timeout=60)
    assert [(r.severity, r.message) for r in rsp.results] == [
        (fnv1.SEVERITY_NORMAL, f"Deployment {xr['metadata']['name']} on cluster {CLUSTER} serves commit {COMMIT}")]


def answering(outcome: protocol.Outcome):
    """A composer for every kind that returns `outcome`."""
    return lambda kind: (lambda request: outcome)


@pytest.mark.parametrize("requeue_after, ttl", [
    (None, 60), (90.0, 60), (12.3, 13), (0.0, 1), (-30.0, 1), (float("nan"), 60)])
def test_the_response_ttl_is_the_requeue_asked_for_when_sooner_than_the_default(
        requeue_after, ttl, insecure_stub, monkeypatch):
    """Crossplane requeues a composite after the shortest TTL its pipeline returned
    (composite/reconciler.go, v1.20 on); a TTL of 0 would mean none, so never below 1 s."""
    monkeypatch.setattr(server, "composer_for", answering(protocol.Outcome(requeue_after=requeue_after)))
    rsp = insecure_stub.RunFunction(request_of(CASES[0]), timeout=60)
    assert rsp.meta.ttl.ToTimedelta() == datetime.timedelta(seconds=ttl)


def test_notices_and_warnings_become_normal_and_warning_results_in_order(insecure_stub, monkeypatch):
    outcome = protocol.Outcome(warnings=["halted"], notices=["wave early started", "x" * 5000])
    monkeypatch.setattr(server, "composer_for", answering(outcome))
    rsp = insecure_stub.RunFunction(request_of(CASES[0]), timeout=60)
    assert [r.severity for r in rsp.results] == \
        [fnv1.SEVERITY_WARNING, fnv1.SEVERITY_NORMAL, fnv1.SEVERITY_NORMAL]
    assert rsp.results[1].message == "wave early started"
    assert len(rsp.results[2].message) == messages.MESSAGE_LIMIT
