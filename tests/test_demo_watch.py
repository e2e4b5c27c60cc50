"""The demo's Watch: a composite's functions run again only when what they would see changed,
or once per poll interval, as Crossplane's watches and poll decide."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache.apis.documents import load_documents
from fleetcache.apis.xrds import admit, xrd_schemas
from fleetcache.devtools import demo
from fleetcache.devtools import render as rendering
from fleetcache.devtools.simulation import Clock, function_server

ROOT = Path(__file__).resolve().parents[1]
COMPOSITIONS = {d["spec"]["compositeTypeRef"]["kind"]: d
                for d in load_documents(ROOT / "compositions")
                if d.get("kind") == "Composition"}
SCHEMAS = xrd_schemas(load_documents(ROOT / "apis"))


@pytest.fixture(scope="module")
def stub():
    clock = Clock()
    with function_server(clock) as address, rendering.channel_to(address) as channel:
        yield grpcv1.FunctionRunnerServiceStub(channel), clock


def render(watch: demo.Watch, required: list[dict]) -> tuple[rendering.Rendered, bool]:
    """The demo's grant (its functions require the ModelCaches of its namespace)."""
    grant = admit(demo.model_cache_grant(), SCHEMAS)
    return watch(grant, COMPOSITIONS["ModelCacheGrant"], [], required)


def cache(namespace: str) -> dict:
    manifest = demo.model_cache("http://127.0.0.1:1")
    manifest["metadata"]["namespace"] = namespace
    return admit(manifest, SCHEMAS)


def test_an_unchanged_input_returns_the_last_render_without_running_the_functions(stub):
    watch = demo.Watch(*stub)
    first, ran = render(watch, [])
    again, ran_again = render(watch, [])
    assert (ran, ran_again) == (True, False)
    assert again == first


def test_a_change_in_what_its_requirements_match_runs_the_functions(stub):
    watch = demo.Watch(*stub)
    render(watch, [])
    rendered, ran = render(watch, [cache(demo.NAMESPACE)])
    assert ran and rendered.composite["status"]["cacheCount"] == 1


def test_a_change_in_what_it_does_not_require_does_not(stub):
    watch = demo.Watch(*stub)
    render(watch, [])
    assert render(watch, [cache("elsewhere")])[1] is False


def test_a_clock_skip_runs_the_functions(stub):
    watch = demo.Watch(*stub)
    render(watch, [])
    stub[1].advance(datetime.timedelta(hours=1))
    assert render(watch, [])[1] is True


def test_past_the_poll_interval_the_functions_run_again(stub, monkeypatch):
    watch = demo.Watch(*stub)
    render(watch, [])
    monkeypatch.setattr(demo, "POLL_SECONDS", 0.0)
    assert render(watch, [])[1] is True
