"""compose-model-cache obeys its ModelCacheGrant, as a specification.

The grant's composer is the one writer of admission (functions/admission.py decides); the
ModelCache composer reads its row in the grant's status.caches and fans out only what the
row admitted at this very spec and resolved content. Anything else composes nothing new,
keeps what exists as it is, and says why in the Admitted condition, with the remedy.
"""

from __future__ import annotations

import copy
import datetime
from pathlib import Path

import lupa
import pytest
import yaml
from click.testing import CliRunner
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import json_format

from fleetcache import reasons
from fleetcache.apis import specs, xrds
from fleetcache.devtools import cli, render
from fleetcache.functions import naming, protocol, server
from fleetcache.functions.composers import model_cache, model_cache_grant
from fleetcache.functions.decisions import obey_grant
from fleetcache.functions.k8s import objects
from tests.support.builders import composed_key
from tests.support.fleet import (
    DIGEST,
    GIB,
    GRANT,
    admitted_digest,
    condition,
    fleet_cluster,
    grant,
    grant_admitting,
    grant_row,
    hydrations,
    model_cache_xr,
    observed_hydration,
    with_resolved,
)
from tests.test_argocd import ARGOCD_CM, lua_value

ROOT = Path(__file__).resolve().parents[1]
FLEET = [fleet_cluster("gpu-west-1"), fleet_cluster("gpu-east-1"), fleet_cluster("gpu-east-2")]
EAST = {"clusterNames": ["gpu-east-1", "gpu-east-2"]}


def compose(xr: dict, grants: list[dict] | None, observed: dict | None = None) -> protocol.Outcome:
    """grants: what Crossplane fetched for the grant requirement (None: not fetched yet)."""
    required: dict = {"fleet-clusters": FLEET}
    if grants is not None:
        required["model-cache-grant"] = grants
    return model_cache.compose(protocol.Request(composite=xr, observed=observed or {},
                                           required=required))


def serving_fleet(xr: dict) -> dict:
    """The hydrations `xr` fanned out under its admission, each Ready, as observed."""
    outcome = compose(xr, [grant_admitting(xr)])
    return {k: observed_hydration(r, "Ready", done=3 * GIB)
            for k, (r, _) in outcome.desired.items() if r["kind"] == "ModelCacheHydration"}


def as_observed(observed: dict) -> dict:
    return {k: objects.strip_observed(v) for k, v in observed.items()}


# --- the grant is required ------------------------------------------------------------------


def test_asks_for_the_grant_by_name_in_its_own_namespace():
    outcome = compose(model_cache_xr(grantRef={"name": "team-b"}), None)
    assert outcome.requirements["model-cache-grant"] == protocol.Requirement(
        naming.API_VERSION, "ModelCacheGrant", match_name="team-b", namespace="ml")


def test_composes_nothing_new_until_the_grant_is_fetched():
    xr = with_resolved(model_cache_xr())
    observed = serving_fleet(xr)
    outcome = compose(xr, None, observed)
    assert {k: r for k, (r, _) in outcome.desired.items()} == as_observed(observed)
    assert not outcome.conditions


@pytest.mark.parametrize("grant_ref", [None, {}, {"name": ""}, {"name": "Team_A"}])
def test_a_spec_without_a_valid_grant_ref_is_an_input_error_naming_it(grant_ref):
    xr = model_cache_xr()
    if grant_ref is None:
        del xr["spec"]["grantRef"]
    else:
        xr["spec"]["grantRef"] = grant_ref
    with pytest.raises(specs.InputError, match=r"spec\.grantRef"):
        compose(xr, [])


# --- GrantNotFound --------------------------------------------------------------------------


def test_without_the_grant_it_does_not_resolve():
    outcome = compose(model_cache_xr(), [])
    assert outcome.desired == {}
    assert condition(outcome, "Resolved").reason == "GrantNotFound"


@pytest.mark.parametrize("type_, status", [("Admitted", "False"), ("Progressing", "False"),
                                           ("Resolved", "False")])
def test_without_the_grant_the_conditions_say_grant_not_found(type_, status):
    found = condition(compose(model_cache_xr(), []), type_)
    assert (found.status, found.reason) == (status, "GrantNotFound")


def test_grant_not_found_names_the_grant_and_the_namespace_with_the_remedy():
    message = condition(compose(model_cache_xr(), []), "Admitted").message
    assert f"ModelCacheGrant {GRANT} (spec.grantRef.name) does not exist in namespace ml" \
        in message
    assert reasons.remedy("GrantNotFound") in message


def test_a_deleted_grant_keeps_every_copy_and_the_resolve_step_as_they_are():
    xr = with_resolved(model_cache_xr())
    observed = serving_fleet(xr)
    observed["resolve-job"] = {"apiVersion": objects.OBJECT_API_VERSION, "kind": "Object",
                               "metadata": {"name": "qwen-resolve-job"}, "spec": {}}
    outcome = compose(xr, [], observed)
    assert {k: r for k, (r, _) in outcome.desired.items()} == as_observed(observed)


def test_a_deleted_grant_leaves_the_latched_resolution_and_availability_standing():
    xr = with_resolved(model_cache_xr())
    outcome = compose(xr, [], serving_fleet(xr))
    assert condition(outcome, "Resolved").status == "True"
    assert condition(outcome, "Available").status == "True"
    assert outcome.composite_ready is True


# --- what the grant's row says --------------------------------------------------------------


def row_for(xr: dict, kind: str) -> dict | None:
    """The grant's row for `xr` in each state the ModelCache composer distinguishes."""
    earlier = model_cache_xr(placement=EAST)
    rows = {
        "none": None,
        "admitted": grant_row(xr),
        "admitted-unresolved": grant_row(xr, manifest=""),
        "admitted-earlier-spec": {**grant_row(earlier), "name": xr["metadata"]["name"]},
        "outside": grant_row(xr, admitted=False, reason="OutsideGrant",
                             message="gpu-west-1 is outside the grant's clusters"),
        "pinning": grant_row(xr, admitted=False, reason="PinningNotAllowed",
                             message="spec.retention.pinned needs spec.allowPinned"),
        "over-quota": grant_row(xr, admitted=False, reason="OverQuota",
                                message="needs 9.0GiB, budget 5.0GiB"),
        "unresolved": grant_row(xr, admitted=False, reason="Unresolved"),
        "refused-latched-this-spec": grant_row(xr, admitted=False, reason="OverQuota",
                                               admitted_digest_of=xr),
    }
    return rows[kind]


@pytest.mark.parametrize("kind, reason, fans_out", [
    ("none", "AwaitingGrant", False),
    ("admitted", "GrantAdmitted", True),
    ("admitted-unresolved", "AwaitingGrant", False),  # content the grant never counted
    ("admitted-earlier-spec", "AwaitingGrant", False),  # the grant has not seen the edit
    ("outside", "OutsideGrant", False),
    ("pinning", "PinningNotAllowed", False),
    ("over-quota", "OverQuota", False),
    ("unresolved", "AwaitingGrant", False),
    ("refused-latched-this-spec", "OverQuota", False),  # refused again: a latch, not admitted
])
def test_fans_out_only_what_the_grant_admitted_at_this_spec_and_content(kind, reason, fans_out):
    xr = with_resolved(model_cache_xr())
    row = row_for(xr, kind)
    outcome = compose(xr, [grant(*([row] if row else []))])
    admitted = condition(outcome, "Admitted")
    assert (admitted.status, admitted.reason) == ("True" if fans_out else "False", reason)
    assert sorted(hydrations(outcome)) == (["gpu-east-1", "gpu-east-2", "gpu-west-1"]
                                           if fans_out else [])


@pytest.mark.parametrize("kind", ["outside", "pinning", "over-quota"])
def test_a_refusal_shows_the_grants_message_and_the_remedy(kind):
    xr = with_resolved(model_cache_xr())
    row = row_for(xr, kind)
    admitted = condition(compose(xr, [grant(row)]), "Admitted")
    assert row["message"] in admitted.message
    assert f"ModelCacheGrant {GRANT} refuses this spec" in admitted.message
    assert reasons.remedy(row["reason"]) in admitted.message


@pytest.mark.parametrize("kind, progressing", [
    ("none", ("True", "AwaitingGrant")),
    ("over-quota", ("False", "OverQuota")),
    ("outside", ("False", "OutsideGrant")),
])
def test_progressing_says_the_cache_waits_for_or_was_refused_by_its_grant(kind, progressing):
    xr = with_resolved(model_cache_xr())
    row = row_for(xr, kind)
    found = condition(compose(xr, [grant(*([row] if row else []))]), "Progressing")
    assert (found.status, found.reason) == progressing


def test_admitted_says_on_how_many_clusters_and_bytes():
    xr = with_resolved(model_cache_xr())
    admitted = condition(compose(xr, [grant_admitting(xr, clusters=3)]), "Admitted")
    assert admitted.message == \
        f"ModelCacheGrant {GRANT} admits this cache on 3 clusters (3.0GiB each)"


def test_admitted_on_one_cluster_says_so_in_the_singular():
    xr = with_resolved(model_cache_xr(placement={"clusterNames": ["gpu-east-1"]}))
    admitted = condition(compose(xr, [grant_admitting(xr, clusters=1)]), "Admitted")
    assert admitted.message == f"ModelCacheGrant {GRANT} admits this cache on 1 cluster (3.0GiB)"


RENDER = ROOT / "tests/fixtures/render"


def test_the_render_fixtures_grant_is_what_compose_model_cache_grant_publishes_for_the_example():
    """The README's render reads this grant: its rows count one copy per cluster, so the
    rendered cache is admitted at the resolved size on each cluster, not the total."""
    grant_doc = render.load_documents(RENDER / "required/modelcachegrant.yaml")[0]
    record = render.load_documents(RENDER / "observed/resolve-configmap.yaml")[0]
    data = record["status"]["atProvider"]["manifest"]["data"]
    cache = xrds.with_defaults(render.load_documents(ROOT / "examples/fleet/modelcache.yaml")[0])
    cache["status"] = {"resolved": {"commit": data["commit"], "bytes": int(data["bytes"]),
                                    "manifestDigest": data["manifestDigest"]}}
    published = model_cache_grant.compose(protocol.Request(
        composite={k: v for k, v in grant_doc.items() if k != "status"},
        required={model_cache_grant.MODEL_CACHES_KEY: [cache],
                  model_cache_grant.FLEET_CLUSTERS_KEY: render.load_documents(
                      RENDER / "required/fleetclusters.yaml"),
                  model_cache_grant.HYDRATIONS_KEY: []}))
    assert grant_doc["status"] == published.status
    assert grant_doc["status"]["caches"][0]["bytes"] == int(data["bytes"])


def test_the_readmes_render_says_the_grant_counts_the_resolved_size_on_each_cluster():
    result = CliRunner().invoke(cli.main, [
        "render", str(ROOT / "examples/fleet/modelcache.yaml"),
        "--composition", str(ROOT / "compositions/modelcaches.yaml"), "--xrd", str(ROOT / "apis"),
        "--required", str(RENDER / "required"), "--observed", str(RENDER / "observed")])
    assert result.exit_code == 0, result.stderr
    cache = next(yaml.safe_load_all(result.stdout))
    admitted = next(c for c in cache["status"]["conditions"] if c["type"] == "Admitted")
    assert admitted["message"] == "ModelCacheGrant team-a admits this cache on 3 clusters (1.4GiB each)"
    assert cache["status"]["sizeHuman"] == "1.4GiB"


def test_a_placement_that_grew_past_what_the_grant_counted_waits_for_its_next_decision():
    """A cluster inside the grant that came to match the selector after the grant decided
    is not reached before the grant has counted it against the budget."""
    xr = with_resolved(model_cache_xr())
    outcome = compose(xr, [grant_admitting(xr, clusters=2)])
    admitted = condition(outcome, "Admitted")
    assert admitted.reason == "AwaitingGrant" and "more than the 2" in admitted.message
    assert not [k for k in outcome.desired if k.startswith("hydration-")]


def test_a_grant_resolves_before_it_admits_so_the_projection_has_the_size():
    outcome = compose(model_cache_xr(), [grant()])
    assert composed_key(outcome, "resolve-job")
    assert condition(outcome, "Admitted").reason == "AwaitingGrant"
    assert hydrations(outcome) == {}


def test_a_resolution_latched_in_this_call_waits_for_the_grant_to_count_it():
    xr = model_cache_xr()
    unresolved = grant(grant_row(xr, manifest=""))  # admitted before the size was known
    first = compose(xr, [unresolved])
    observed = {k: {**copy.deepcopy(r), "status": {"atProvider": {"manifest": {
        **r["spec"]["forProvider"]["manifest"],
        "data": {"phase": "Resolved", "commit": "4f" * 20, "bytes": str(3 * GIB), "files": "5",
                 "manifestDigest": DIGEST}}}}}
        for k, (r, _) in first.desired.items()}
    outcome = compose(xr, [unresolved], observed)
    assert outcome.status["resolved"]["manifestDigest"] == DIGEST
    assert condition(outcome, "Admitted").reason == "AwaitingGrant"
    assert hydrations(outcome) == {}


# --- a refused edit keeps the old footprint -------------------------------------------------


def refused_edit(reason: str = "OverQuota") -> tuple[dict, dict, protocol.Outcome]:
    """The cache admitted on the east clusters, then edited to every cluster; the grant
    refuses the edit and keeps the earlier admission (its admittedDigest)."""
    before = with_resolved(model_cache_xr(placement=EAST))
    observed = serving_fleet(before)
    after = copy.deepcopy(before)
    after["spec"]["placement"] = {"clusterSelector": {"matchLabels": {"gpu": "h100"}}}
    row = grant_row(after, admitted=False, reason=reason, admitted_digest_of=before,
                    message="needs 9.0GiB, budget 6.0GiB")
    return before, observed, compose(after, [grant(row)], observed)


def test_a_refused_edit_keeps_every_copy_admitted_before_exactly_as_it_was():
    _, observed, outcome = refused_edit()
    assert {k: r for k, (r, _) in outcome.desired.items()} == as_observed(observed)


def test_a_refused_edit_says_the_copies_admitted_before_keep_serving():
    _, _, outcome = refused_edit()
    admitted = condition(outcome, "Admitted")
    assert admitted.reason == "OverQuota"
    assert "the copies it admitted before keep serving" in admitted.message


def test_a_refused_edit_counts_the_old_copies_ready_and_the_new_cluster_pending():
    _, _, outcome = refused_edit()
    assert outcome.status["readyClusters"] == 2
    assert outcome.status["pendingClusters"] == 1  # gpu-west-1: asked for, never admitted


def test_an_unadmitted_spec_lets_retention_decide_nothing_and_keeps_what_it_latched():
    before = with_resolved(model_cache_xr(retention={"afterRemoval": "0h"}))
    observed = serving_fleet(before)
    after = copy.deepcopy(before)
    after["spec"]["placement"] = EAST  # gpu-west-1 leaves: retention would let it go
    after["status"]["retained"] = [{"cluster": "gpu-west-1", "since": "2026-12-01T10:00:00Z",
                                    "until": "2026-12-01T10:00:00Z", "reason": "AfterRemoval"}]
    after["status"]["retainedClusters"] = 1
    outcome = compose(after, [grant(grant_row(after, admitted=False, reason="Unresolved",
                                              admitted_digest_of=before))], observed)
    assert "hydration-gpu-west-1" in outcome.desired
    assert outcome.status["retained"] == after["status"]["retained"]
    assert outcome.status["retainedClusters"] == 1


def test_a_selector_matching_a_cluster_outside_the_grant_again_composes_nothing_there():
    """The same spec, admitted before; a new FleetCluster now matches its selector, so the
    grant refuses it at the same digest (a latch): the copies stay, none is added."""
    xr = with_resolved(model_cache_xr())
    observed = serving_fleet(xr)
    fleet = FLEET + [fleet_cluster("gpu-south-1")]
    latched = grant_row(xr, admitted=False, reason="OutsideGrant", admitted_digest_of=xr,
                        message="gpu-south-1 is outside the grant's clusters")
    outcome = model_cache.compose(protocol.Request(composite=xr, observed=observed, required={
        "fleet-clusters": fleet, "model-cache-grant": [grant(latched)]}))
    assert {k: r for k, (r, _) in outcome.desired.items()} == as_observed(observed)
    assert condition(outcome, "Admitted").reason == "OutsideGrant"
    assert "keep serving" in condition(outcome, "Admitted").message


def test_a_cluster_matching_since_the_grant_admitted_is_not_reached_before_it_decides_again():
    """Admitted at this digest over the fleet as it was; a FleetCluster outside the grant's
    clusters has come to match the selector since: nothing is added until the grant
    decides (it will refuse: OutsideGrant), and the copies stay."""
    xr = with_resolved(model_cache_xr())
    observed = serving_fleet(xr)
    east_only = grant(grant_row(xr))
    east_only["spec"]["clusters"] = {"clusterNames": [c["metadata"]["name"] for c in FLEET]}
    fleet = FLEET + [fleet_cluster("gpu-south-1")]
    outcome = model_cache.compose(protocol.Request(composite=xr, observed=observed, required={
        "fleet-clusters": fleet, "model-cache-grant": [east_only]}))
    assert {k: r for k, (r, _) in outcome.desired.items()} == as_observed(observed)
    admitted = condition(outcome, "Admitted")
    assert admitted.reason == "AwaitingGrant" and admitted.message.startswith(
        f"gpu-south-1 came to match spec.placement outside ModelCacheGrant {GRANT}'s clusters")


def test_a_grant_whose_clusters_cannot_be_read_admits_nothing_new():
    xr = with_resolved(model_cache_xr())
    broken = grant(grant_row(xr))
    broken["spec"]["clusters"] = {"clusterSelector": {"matchExpressions": "gpu"}}
    outcome = compose(xr, [broken])
    assert condition(outcome, "Admitted").reason == "AwaitingGrant"
    assert hydrations(outcome) == {}


def test_once_the_grant_admits_the_edit_it_rolls_out():
    before, observed, _ = refused_edit()
    after = copy.deepcopy(before)
    after["spec"]["placement"] = {"clusterSelector": {"matchLabels": {"gpu": "h100"}}}
    outcome = compose(after, [grant_admitting(after)], observed)
    assert sorted(hydrations(outcome)) == ["gpu-east-1", "gpu-east-2", "gpu-west-1"]


def test_the_admission_digest_is_the_grants_own():
    xr = with_resolved(model_cache_xr())
    assert obey_grant.admission.admission_digest(obey_grant.as_admitted(
        protocol.Request(composite=xr), None)) == admitted_digest(xr)


# --- the grant decides, the cache obeys: no spec reaches past the grant ---------------------


GRANTED_CLUSTERS = ["gpu-east-1", "gpu-east-2"]


def decided_grant(*caches: dict, allow_pinned: bool = False) -> dict:
    """The grant over the east clusters (100Gi) with the status its own composer publishes
    after weighing `caches`."""
    xr = {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
          "metadata": {"name": GRANT, "namespace": "ml"},
          "spec": {"clusters": {"clusterNames": GRANTED_CLUSTERS}, "quota": {"bytes": "100Gi"},
                   "allowPinned": allow_pinned}}
    outcome = model_cache_grant.compose(protocol.Request(composite=xr, required={
        model_cache_grant.MODEL_CACHES_KEY: list(caches),
        model_cache_grant.HYDRATIONS_KEY: [],
        model_cache_grant.FLEET_CLUSTERS_KEY: FLEET}))
    return {**xr, "status": outcome.status}


@pytest.mark.parametrize("spec, reason, reached", [
    ({"placement": {"clusterNames": ["gpu-east-1"]}}, "GrantAdmitted", ["gpu-east-1"]),
    ({"placement": {"clusterNames": GRANTED_CLUSTERS}}, "GrantAdmitted", GRANTED_CLUSTERS),
    ({"placement": {"clusterNames": ["gpu-east-1", "gpu-west-1"]}}, "OutsideGrant", []),
    ({"placement": {"clusterNames": ["gpu-ghost"]}}, "OutsideGrant", []),
    ({"placement": {"clusterSelector": {}}}, "OutsideGrant", []),
    ({"placement": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}}}, "OutsideGrant", []),
    ({"placement": {"clusterSelector": {"matchExpressions": [
        {"key": "gpu", "operator": "Exists"}]}}}, "OutsideGrant", []),
    ({"placement": {"clusterNames": ["gpu-east-1"]}, "retention": {"pinned": True}},
     "PinningNotAllowed", []),
])
def test_no_spec_a_tenant_writes_reaches_a_cluster_its_grant_does_not_cover(spec, reason,
                                                                           reached):
    xr = with_resolved(model_cache_xr(**spec))
    outcome = compose(xr, [decided_grant(xr)])
    assert condition(outcome, "Admitted").reason == reason
    assert sorted(hydrations(outcome)) == reached
    assert {r["metadata"]["namespace"] for r, _ in outcome.desired.values()} <= {"ml"}


def test_a_grant_of_another_namespace_is_never_asked_for():
    xr = model_cache_xr()
    xr["metadata"]["namespace"] = "team-b"
    outcome = compose(xr, None)
    assert outcome.requirements["model-cache-grant"].namespace == "team-b"


# --- what Argo CD shows ---------------------------------------------------------------------


def argocd_health(cache: dict) -> tuple[str, str]:
    """examples/argocd/argocd-cm.yaml's ModelCache health check, run as Lua."""
    scripts = yaml.safe_load(ARGOCD_CM.read_text())["data"]
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    check = lua.eval("function(obj)\n"
                     f"{scripts['resource.customizations.health.fleetcache.dev_ModelCache']}\nend")
    result = check(lua_value(lua, cache))
    return result["status"], result["message"]


def as_composed(xr: dict, outcome: protocol.Outcome) -> dict:
    """The cache with the status and conditions the composer returned."""
    conditions = [{"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
                  for c in outcome.conditions]
    return {**xr, "status": {**outcome.status, "conditions": conditions}}


@pytest.mark.parametrize("grants, health", [
    ([], "Degraded"),  # GrantNotFound
    ("over-quota", "Degraded"),
    ("outside", "Degraded"),
    ("pinning", "Degraded"),
    ("none", "Progressing"),  # AwaitingGrant: the grant decides on its next reconcile
])
def test_argo_cd_shows_a_refused_or_grantless_cache_degraded_and_a_waiting_one_progressing(
        grants, health):
    xr = with_resolved(model_cache_xr())
    if isinstance(grants, str):
        row = row_for(xr, grants)
        grants = [grant(*([row] if row else []))]
    outcome = compose(xr, grants)
    status, message = argocd_health(as_composed(xr, outcome))
    assert (status, message) == (health, condition(outcome, "Admitted").message
                                 if health == "Degraded" else
                                 condition(outcome, "Progressing").message)


def test_argo_cd_shows_a_refused_edit_degraded_while_its_old_copies_serve():
    before, _, outcome = refused_edit()
    assert outcome.status["readyClusters"] == 2
    assert argocd_health(as_composed(before, outcome))[0] == "Degraded"


# --- through gRPC ---------------------------------------------------------------------------


NOW = datetime.datetime(2026, 12, 3, tzinfo=datetime.UTC)


def test_a_refused_edit_through_grpc_keeps_the_footprint_and_says_why():
    before = with_resolved(model_cache_xr(placement=EAST))
    observed = serving_fleet(before)
    after = copy.deepcopy(before)
    after["spec"]["placement"] = {"clusterSelector": {"matchLabels": {"gpu": "h100"}}}
    required = {"fleet-clusters": FLEET, "model-cache-grant": [grant(grant_row(
        after, admitted=False, reason="OverQuota", admitted_digest_of=before,
        message="needs 9.0GiB, budget 6.0GiB"))]}
    request = render.build_request(after, observed, fnv1.State(), None, None, required,
                                   tag="refused-edit")
    with render.InProcessServer(None, server.FunctionRunner(now=lambda: NOW)) as srv, \
            render.channel_to(srv.address) as channel:
        rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request, timeout=30)
    assert rsp.SerializeToString(deterministic=True) == \
        server.run(request, NOW).SerializeToString(deterministic=True)
    assert set(rsp.desired.resources) == set(observed)
    conditions = {c.type: c for c in rsp.conditions}
    assert conditions["Admitted"].reason == "OverQuota"
    assert "needs 9.0GiB, budget 6.0GiB" in conditions["Admitted"].message
    composite = json_format.MessageToDict(rsp.desired.composite.resource)
    assert composite["status"]["readyClusters"] == 2
