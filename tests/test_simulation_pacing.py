"""When the simulated Crossplane reconciles a composite under realistic timing, as upstream's
composite controller does (design/simulation.md, "When a composite reconciles"): at once
when it or a resource it composed changed (realtime compositions); on v2.4 also when a
resource its functions required changed (crossplane#7572); otherwise when its response TTL
has passed (± 10 %), or after a failed reconcile the controller's backoff (1 s doubling, at
most 30 s). Without realistic timing every composite reconciles every round.

A stand-in grant and cache, run through the real render path on a compressed clock: the
cache requires the grant and copies its decision, and copies the phase of the ConfigMap it
composes."""

from __future__ import annotations

import datetime

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from fleetcache.devtools import render
from fleetcache.devtools.simulation import Clock, ControlPlane, Provider, RealisticTiming, step
from fleetcache.functions import read, server
from tests.support import fleet

SECONDS_PER_ROUND = 5.0
TTL = 60.0
GRANT = ("ModelCacheGrant", "ml", "team")
CACHE = ("ModelCache", "ml", "chat")
RECORD = ("ConfigMap", "ml", "chat-record")
COMPOSITION = {"spec": {"pipeline": [{"step": "compose", "functionRef": {"name": "f"}}]}}


class Functions:
    """The stand-in functions; `calls` holds the clock's seconds of each call, by kind."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.calls: dict[str, list[float]] = {"ModelCacheGrant": [], "ModelCache": []}

    def RunFunction(self, request: fnv1.RunFunctionRequest, timeout: float  # noqa: N802 - the stub's name
                    ) -> fnv1.RunFunctionResponse:
        del timeout
        xr = resource.struct_to_dict(request.observed.composite.resource)
        self.calls[xr["kind"]].append(self.clock.seconds())
        rsp = fnv1.RunFunctionResponse()
        rsp.meta.ttl.FromSeconds(int(TTL))
        spec = xr.get("spec", {})
        if spec.get("broken"):
            rsp.results.add(severity=fnv1.SEVERITY_FATAL, message="refused")
            return rsp
        if xr["kind"] == "ModelCacheGrant":
            resource.update(rsp.desired.composite, {"status": {"decision": spec["decision"]}})
            return rsp
        rsp.requirements.resources["grant"].CopyFrom(fnv1.ResourceSelector(
            api_version="fleetcache.dev/v1alpha1", kind="ModelCacheGrant", namespace="ml",
            match_name="team"))
        grants = [i.resource for i in request.required_resources["grant"].items]
        record = request.observed.resources["record"].resource if "record" in \
            request.observed.resources else None
        resource.update(rsp.desired.composite, {"status": {
            "admitted": grants[0]["status"]["decision"] if grants else "none",
            "record": record["data"]["phase"] if record else "none"}})
        resource.update(rsp.desired.resources["record"], {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "chat-record"},
            "data": {"phase": "Pending"}})
        return rsp


class Fleet:
    def __init__(self, crossplane: str | None, seconds_per_round: float = SECONDS_PER_ROUND):
        self.clock = Clock(seconds_per_round)
        self.functions = Functions(self.clock)
        timing = RealisticTiming(self.clock, crossplane=crossplane) if crossplane else None
        self.control = ControlPlane(
            lambda xr, _composition, observed, required: render.run_pipeline(
                self.functions, xr, COMPOSITION, observed, required),
            {"ModelCacheGrant": COMPOSITION, "ModelCache": COMPOSITION}, {},
            Provider({}, list, timing))
        self.control.apply({"apiVersion": "fleetcache.dev/v1alpha1", "kind": "ModelCacheGrant",
                            "metadata": {"name": "team", "namespace": "ml"},
                            "spec": {"decision": "first"}})
        self.control.apply({"apiVersion": "fleetcache.dev/v1alpha1", "kind": "ModelCache",
                            "metadata": {"name": "chat", "namespace": "ml"}, "spec": {}})
        self.rounds(int(200 / seconds_per_round))  # settled: only the TTL timers run

    def round(self) -> None:
        self.clock.tick()
        step(self.control, ())

    def rounds(self, count: int) -> None:
        for _ in range(count):
            self.round()

    def cache_says(self, field_name: str) -> str:
        return read.get_path(self.control.xrs[CACHE], f"status.{field_name}")

    def until_the_cache_says(self, field_name: str, value: str, seconds: float = 600) -> float:
        """Rounds until the cache's status says `value`; the clock's seconds it took."""
        started = self.clock.seconds()
        while self.cache_says(field_name) != value:
            assert self.clock.seconds() - started < seconds, f"the cache never said {value}"
            self.round()
        return self.clock.seconds() - started

    def edit(self, key: tuple[str, str, str], spec: dict) -> None:
        self.control.apply({**self.control.xrs[key], "spec": spec})

    def cache_calls_since(self, seconds: float) -> list[float]:
        return [t for t in self.functions.calls["ModelCache"] if t >= seconds]


def reconciles(calls: list[float]) -> list[float]:
    """The times of the reconciles among calls (each reconcile is two calls: the second answers
    the grant requirement)."""
    return sorted(set(calls))


def test_under_v2_0_to_2_3_a_grant_change_reaches_the_cache_only_when_its_ttl_passes():
    f = Fleet("v2.0-2.3")
    last = reconciles(f.functions.calls["ModelCache"])[-1]
    f.edit(GRANT, {"decision": "second"})
    f.until_the_cache_says("admitted", "second")
    seen = reconciles(f.cache_calls_since(last))
    assert len(seen) == 2  # the one before the change, and the TTL's: none in between
    assert TTL * 0.9 <= seen[1] - seen[0] <= TTL * 1.1 + SECONDS_PER_ROUND


def test_under_v2_4_a_grant_change_reaches_the_cache_in_the_round_it_happens():
    f = Fleet("v2.4")
    f.edit(GRANT, {"decision": "second"})
    assert f.until_the_cache_says("admitted", "second") == SECONDS_PER_ROUND


@pytest.mark.parametrize("version", ["v2.0-2.3", "v2.4"])
def test_a_change_of_the_composite_itself_reconciles_it_at_once(version):
    f = Fleet(version)
    f.edit(CACHE, {"note": "edited"})
    started = f.clock.seconds()
    f.round()
    assert f.cache_calls_since(started)


@pytest.mark.parametrize("version", ["v2.0-2.3", "v2.4"])
def test_a_change_of_a_composed_resource_reconciles_its_composite_at_once(version):
    f = Fleet(version)
    f.control.others[RECORD]["data"] = {"phase": "Resolved"}  # what another controller wrote
    assert f.until_the_cache_says("record", "Resolved") == SECONDS_PER_ROUND


def test_a_settled_composite_reconciles_once_per_ttl_give_or_take_ten_percent():
    f = Fleet("v2.0-2.3")
    started = f.clock.seconds()
    f.rounds(60)
    times = reconciles(f.cache_calls_since(started))
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(gaps) >= 3
    assert all(TTL * 0.9 - SECONDS_PER_ROUND <= gap <= TTL * 1.1 + SECONDS_PER_ROUND
               for gap in gaps)


def test_a_composite_that_fails_is_retried_after_a_backoff_doubling_to_30_seconds():
    f = Fleet("v2.0-2.3", seconds_per_round=1.0)
    started = reconciles(f.functions.calls["ModelCacheGrant"])[-1]
    f.edit(GRANT, {"broken": True})
    f.rounds(100)
    times = reconciles([t for t in f.functions.calls["ModelCacheGrant"] if t > started])
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert gaps[:7] == [1, 2, 4, 8, 16, 30, 30]


def test_without_realistic_timing_every_composite_reconciles_every_round():
    f = Fleet(None)
    before = len(f.functions.calls["ModelCacheGrant"])
    f.rounds(3)
    assert len(f.functions.calls["ModelCacheGrant"]) == before + 3


def test_a_crossplane_version_the_simulation_does_not_pace_is_refused_in_one_line():
    with pytest.raises(ValueError) as raised:
        RealisticTiming(Clock(SECONDS_PER_ROUND), crossplane="v2.5")
    assert str(raised.value) == ("crossplane: 'v2.5' is not a version the simulation paces; "
                                 "use 'v2.0-2.3' or 'v2.4'")


def test_the_functions_answer_with_the_sdks_60_second_ttl():
    """What paces every handshake on v2.0-2.3 (design/provider-timing.md)."""
    request = render.build_request(fleet.fleet_cluster("gpu-a"), {}, fnv1.State(), None, None, {},
                                   tag="t")
    rsp = server.run(request, datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))
    assert rsp.meta.ttl.ToTimedelta() == datetime.timedelta(seconds=TTL)
