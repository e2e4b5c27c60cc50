"""The Argo CD health checks, run as Lua (lupa) on the statuses the demo's rounds produce."""

from __future__ import annotations

import copy
from pathlib import Path

import lupa
import pytest
import yaml

from fleetcache import demo

ROOT = Path(__file__).resolve().parents[1]
ARGOCD_CM = ROOT / "examples" / "argocd" / "argocd-cm.yaml"
KINDS = ("FleetCluster", "ModelCache", "ModelCacheHydration", "ModelDeployment", "ModelReplica")


def lua_value(lua: lupa.LuaRuntime, value):
    if isinstance(value, dict):
        return lua.table_from({k: lua_value(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([lua_value(lua, v) for v in value])
    return value


@pytest.fixture(scope="module")
def health():
    scripts = yaml.safe_load(ARGOCD_CM.read_text())["data"]
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    checks = {kind: lua.eval(f"function(obj)\n{scripts[f'resource.customizations.health.fleetcache.dev_{kind}']}\nend")
              for kind in KINDS}

    def check(obj: dict) -> tuple[str, str]:
        result = checks[obj["kind"]](lua_value(lua, obj))
        return result["status"], result["message"]

    return check


@pytest.fixture(scope="module")
def demo_rounds() -> list[dict]:
    """Every composite as the demo's rounds left it, in order."""
    seen: list[dict] = []
    assert demo.run(ROOT, out=lambda _: None, on_composite=lambda c: seen.append(copy.deepcopy(c))) == 0
    return seen


def last(rounds: list[dict], kind: str, **where) -> dict:
    matching = [c for c in rounds if c["kind"] == kind and all(
        c.get("spec", {}).get(k) == v for k, v in where.items())]
    return matching[-1]


def test_argocd_cm_has_a_health_check_for_every_kind():
    data = yaml.safe_load(ARGOCD_CM.read_text())["data"]
    assert sorted(data) == sorted(f"resource.customizations.health.fleetcache.dev_{k}"
                                  for k in KINDS)


def test_a_ready_fleet_cluster_is_healthy(health, demo_rounds):
    status, message = health(last(demo_rounds, "FleetCluster"))
    assert status == "Healthy" and "ProviderConfig" in message


def test_a_model_cache_that_is_resolving_is_progressing(health, demo_rounds):
    resolving = next(c for c in demo_rounds if c["kind"] == "ModelCache")
    status, message = health(resolving)
    assert status == "Progressing" and "resolving" in message


def test_a_model_cache_partway_through_the_fleet_is_progressing_with_its_counts(health,
                                                                               demo_rounds):
    status, message = health(last(demo_rounds, "ModelCache"))
    assert status == "Progressing"
    assert "1/3 Ready, 1 hydrating, 1 pending" in message


@pytest.mark.parametrize("cluster, expected", [("gpu-east-1", "Healthy"),
                                               ("gpu-east-2", "Progressing"),
                                               ("gpu-west-1", "Progressing")])
def test_hydrations_are_healthy_only_when_ready(health, demo_rounds, cluster, expected):
    hydration = last(demo_rounds, "ModelCacheHydration", clusterName=cluster)
    status, message = health(hydration)
    assert status == expected
    assert message == hydration["status"]["message"]


def test_a_failed_hydration_is_degraded_with_its_reason_and_remedy(health, demo_rounds):
    failed = copy.deepcopy(last(demo_rounds, "ModelCacheHydration", clusterName="gpu-east-2"))
    failed["status"].update(phase="Failed", reason="DigestMismatch",
                            message="bytes did not match. Check the mirror.")
    assert health(failed) == ("Degraded", "DigestMismatch: bytes did not match. Check the mirror.")


def test_a_model_cache_with_a_failed_cluster_is_degraded_with_the_degraded_message(
        health, demo_rounds):
    cache = copy.deepcopy(last(demo_rounds, "ModelCache"))
    for cond in cache["status"]["conditions"]:
        if cond["type"] == "Degraded":
            cond.update(status="True", reason="HydrationFailed",
                        message="hydration failed on gpu-east-2 (DigestMismatch)")
    assert health(cache) == ("Degraded", "hydration failed on gpu-east-2 (DigestMismatch)")


def test_a_composite_crossplane_cannot_sync_is_degraded_with_crossplanes_message(health,
                                                                                demo_rounds):
    cache = copy.deepcopy(last(demo_rounds, "ModelCache"))
    cache["status"]["conditions"].append({"type": "Synced", "status": "False",
                                          "reason": "ReconcileError",
                                          "message": "spec.placement: set exactly one"})
    assert health(cache) == ("Degraded", "spec.placement: set exactly one")


def test_a_composite_without_status_yet_is_progressing(health):
    for kind in KINDS:
        status, _ = health({"apiVersion": "fleetcache.dev/v1alpha1", "kind": kind,
                            "metadata": {"name": "new"}})
        assert status == "Progressing"


def test_the_applicationset_rolls_out_region_by_region_in_waves():
    appset = yaml.safe_load((ROOT / "examples/argocd/applicationset-modelcaches.yaml").read_text())
    regions = [e["region"] for e in appset["spec"]["generators"][0]["list"]["elements"]]
    steps = appset["spec"]["strategy"]["rollingSync"]["steps"]
    assert appset["spec"]["strategy"]["type"] == "RollingSync"
    assert len(steps) == len(regions) == 2
    assert appset["spec"]["template"]["metadata"]["labels"]["fleetcache.dev/wave"] == "{{.wave}}"
