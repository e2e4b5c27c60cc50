"""compose-model-cache-grant: the grant's freeze rules, and compose() on plain requests."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from fleetcache import reasons
from fleetcache.apis import cel, specs
from fleetcache.devtools import cli
from fleetcache.functions import naming, protocol, read
from fleetcache.functions.composers.model_cache_grant import (
    FLEET_CLUSTERS_KEY,
    HYDRATIONS_KEY,
    MODEL_CACHES_KEY,
    compose,
)
from fleetcache.functions.decisions import admission
from tests.support.fleet import fleet_cluster
from tests.support.xrd import assert_valid, xrd_for

ROOT = Path(__file__).resolve().parents[1]
GIB = 1024**3
DIGEST_A, DIGEST_B = "aa" * 32, "bb" * 32
COMMIT = "4f1c2b0d9e8a7c6b5a493827161504f3e2d1c0b9"
FLEET = [fleet_cluster("gpu-east-1", labels={"tier": "serving"}),
         fleet_cluster("gpu-east-2", labels={"tier": "serving"}),
         fleet_cluster("gpu-lab-1", labels={"tier": "lab"})]


def grant_xr(quota: str = "100Gi", *, allow_pinned: bool | None = None,
             clusters: dict | None = None, status: dict | None = None) -> dict:
    spec: dict = {"clusters": clusters or {"clusterSelector": {"matchLabels": {"tier": "serving"}}},
                  "quota": {"bytes": quota}}
    if allow_pinned is not None:
        spec["allowPinned"] = allow_pinned
    xr = {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
          "metadata": {"name": "team-a", "namespace": "ml"}, "spec": spec}
    if status is not None:
        xr["status"] = status
    return xr


def model_cache(name: str, *, size_gib: int | None = 10, content: str = DIGEST_A,
                clusters: tuple[str, ...] = ("gpu-east-1",), grant: str = "team-a",
                created: str = "2026-01-01T00:00:00Z", pinned: bool = False) -> dict:
    """A ModelCache as Crossplane returns it; `size_gib` None: not resolved yet."""
    cache = {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
             "metadata": {"name": name, "namespace": "ml", "creationTimestamp": created},
             "spec": {"grantRef": {"name": grant},
                      "source": {"huggingFace": {"repo": f"org/{name}", "revision": "main"}},
                      "placement": {"clusterNames": list(clusters)},
                      "retention": {"pinned": pinned}}}
    if size_gib is not None:
        cache["status"] = {"resolved": {"commit": COMMIT, "bytes": size_gib * GIB,
                                        "manifestDigest": content}}
    return cache


def hydration(cache: str, cluster: str, content: str, size_gib: int) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheHydration",
            "metadata": {"name": f"{cache}-{cluster}", "namespace": "ml"},
            "spec": {"modelCacheName": cache, "clusterName": cluster,
                     "manifestDigest": content, "bytes": size_gib * GIB}}


def request(xr: dict | None = None, caches: list[dict] | None = None,
            hydrations: list[dict] | None = None, fleet: list[dict] | None = FLEET
            ) -> protocol.Request:
    """caches / hydrations / fleet: what Crossplane fetched (None: not fetched yet)."""
    required = {key: value for key, value in ((MODEL_CACHES_KEY, caches),
                                              (HYDRATIONS_KEY, hydrations),
                                              (FLEET_CLUSTERS_KEY, fleet)) if value is not None}
    return protocol.Request(composite=grant_xr() if xr is None else xr, required=required)


def rows(outcome: protocol.Outcome) -> dict[str, tuple[bool, str]]:
    return {row["name"]: (row["admitted"], row["reason"]) for row in outcome.status["caches"]}


def condition(outcome: protocol.Outcome, type_: str) -> protocol.Condition:
    return next(c for c in outcome.conditions if c.type == type_)


# --- the XRD: freeze rules -------------------------------------------------------------------


def cel_messages(new: dict, old: dict) -> list[str]:
    return xrd_for(new).cel_messages(new, old)


@pytest.mark.parametrize("old, new", [
    ("10Ti", "11Ti"), ("10Ti", "10Ti"), ("10Ti", "10240Gi"), ("1T", "1Ti"),
])
def test_the_budget_may_grow_or_stay(old, new):
    assert cel_messages(grant_xr(new), grant_xr(old)) == []


@pytest.mark.parametrize("old, new", [("10Ti", "9Ti"), ("1Ti", "1T"), ("100Gi", "99.5Gi")])
def test_a_shrunk_budget_is_refused(old, new):
    assert cel_messages(grant_xr(new), grant_xr(old)) == [
        "spec.quota.bytes may only grow; a smaller budget would put caches admitted under the "
        "old one over it"]


@pytest.mark.parametrize("clusters", [
    {"clusterSelector": {"matchLabels": {"tier": "lab"}}},
    {"clusterSelector": {"matchLabels": {"tier": "serving"}, "matchExpressions": [
        {"key": "region", "operator": "Exists"}]}},
    {"clusterNames": ["gpu-east-1"]},
], ids=["other labels", "narrowed", "names instead"])
def test_moved_clusters_are_refused(clusters):
    assert cel_messages(grant_xr(clusters=clusters), grant_xr()) == [
        "spec.clusters is frozen; to cover other clusters, create another ModelCacheGrant and "
        "point the caches at it"]


def test_allow_pinned_only_turns_on():
    assert cel_messages(grant_xr(allow_pinned=True), grant_xr(allow_pinned=False)) == []
    assert cel_messages(grant_xr(allow_pinned=False), grant_xr(allow_pinned=True)) == [
        "spec.allowPinned may only turn on; pinned caches were admitted under it"]


def test_leaving_allow_pinned_out_turns_it_off_through_the_default():
    assert cel_messages(grant_xr(), grant_xr(allow_pinned=True)) == [
        "spec.allowPinned may only turn on; pinned caches were admitted under it"]


def test_a_grant_sets_exactly_one_of_selector_or_names():
    both = grant_xr(clusters={"clusterSelector": {}, "clusterNames": ["gpu-east-1"]})
    assert xrd_for(both).cel_messages(both) == [
        "spec.clusters must set exactly one of clusterSelector or clusterNames"]


def test_the_budget_must_be_a_positive_quantity():
    assert [v.path for v in xrd_for(grant_xr("0")).violations(grant_xr("0"))] == [
        "spec.quota.bytes"]


@pytest.mark.parametrize("rule, expected", [
    ('quantity("1Gi").compareTo(quantity("1024Mi"))', 0),
    ('quantity("1G").compareTo(quantity("1Gi"))', -1),
    ('quantity("1.5Ti").compareTo(quantity("1536Gi"))', 0),
    ('quantity("10Ti").isGreaterThan(quantity("9.99Ti"))', True),
    ('quantity("500M").isLessThan(quantity("0.5G"))', False),
    ('isQuantity("10Ti")', True),
    ('isQuantity("ten")', False),
])
def test_the_cel_quantity_library_compares_exactly(rule, expected):
    assert cel.evaluate_rule(f"({rule}) == {str(expected).lower()}", None) is True


def test_a_string_that_is_no_quantity_is_an_evaluation_error():
    assert str(cel.evaluate_rule('quantity(self).isLessThan(quantity("1Gi"))', "ten")
               ).startswith("evaluation error")


def run_render(tmp_path: Path, new: dict, old: dict) -> tuple[int, str]:
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(new))
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    result = CliRunner().invoke(cli.main, [
        "render", str(tmp_path / "new.yaml"), "--old", str(tmp_path / "old.yaml"),
        "--composition", str(ROOT / "compositions/modelcachegrants.yaml")])
    return result.exit_code, result.stderr


@pytest.mark.parametrize("new, line", [
    (grant_xr("50Gi", allow_pinned=True), "ModelCacheGrant/team-a: spec.quota.bytes: spec.quota.bytes may only "
                       "grow; a smaller budget would put caches admitted under the old one over it"),
    (grant_xr(clusters={"clusterNames": ["gpu-east-1"]}, allow_pinned=True),
     "ModelCacheGrant/team-a: spec.clusters: spec.clusters is frozen; to cover other clusters, "
     "create another ModelCacheGrant and point the caches at it"),
    (grant_xr(allow_pinned=False), "ModelCacheGrant/team-a: spec.allowPinned: spec.allowPinned "
                                   "may only turn on; pinned caches were admitted under it"),
], ids=["shrunk budget", "moved clusters", "allowPinned off"])
def test_render_with_old_refuses_a_frozen_field_in_one_line(tmp_path, new, line):
    code, err = run_render(tmp_path, new, grant_xr(allow_pinned=True))
    assert (code, err) == (1, line + "\n")


def test_render_answers_every_cache_of_the_grants_namespace_and_no_other(tmp_path):
    """Through the real pipeline: render answers "no labels, namespace ml" with the caches
    of ml only, as Crossplane lists them."""
    ours = model_cache("qwen", size_gib=1, clusters=("gpu-east-1",))
    theirs = model_cache("llama", size_gib=1, clusters=("gpu-east-1",))
    theirs["metadata"]["namespace"] = "other"
    for cache in (ours, theirs):
        cache["status"]["resolved"]["files"] = 1
    (tmp_path / "grant.yaml").write_text(yaml.safe_dump(grant_xr(
        clusters={"clusterSelector": {"matchLabels": {"gpu": "h100"}}})))
    (tmp_path / "caches.yaml").write_text(yaml.safe_dump_all([ours, theirs]))
    result = CliRunner().invoke(cli.main, [
        "render", str(tmp_path / "grant.yaml"),
        "--composition", str(ROOT / "compositions/modelcachegrants.yaml"),
        "--required", str(tmp_path / "caches.yaml"),
        "--required", str(ROOT / "tests/fixtures/render/required")])
    assert result.exit_code == 0, result.stderr
    status = next(yaml.safe_load_all(result.stdout))["status"]
    assert [(r["name"], r["reason"]) for r in status["caches"]] == [("qwen", "Admitted")]
    assert (status["cachesSummary"], status["usedBytes"]) == ("1/1", 0)


# --- requirements ------------------------------------------------------------------------------


def test_it_requires_every_model_cache_and_hydration_of_its_namespace_and_every_cluster():
    outcome = compose(request(fleet=None))
    assert {key: (r.kind, r.namespace, r.match_labels) for key, r in
            outcome.requirements.items()} == {
        MODEL_CACHES_KEY: ("ModelCache", "ml", ()),
        HYDRATIONS_KEY: ("ModelCacheHydration", "ml", ()),
        FLEET_CLUSTERS_KEY: ("FleetCluster", None, None)}


def test_before_the_caches_are_fetched_nothing_is_decided_and_it_is_not_ready():
    outcome = compose(request(fleet=None))
    assert "caches" not in outcome.status and outcome.composite_ready is False
    assert outcome.status["budgetHuman"] == "100.0GiB"


# --- deciding ----------------------------------------------------------------------------------


def test_it_decides_over_the_caches_naming_it_and_only_those():
    caches = [model_cache("a"), model_cache("other", grant="team-b")]
    outcome = compose(request(caches=caches, hydrations=[]))
    assert rows(outcome) == {"a": (True, "Admitted")}
    assert outcome.composite_ready is True


def test_the_grants_selector_decides_which_clusters_a_cache_may_target():
    caches = [model_cache("a", clusters=("gpu-east-1", "gpu-east-2")),
              model_cache("b", clusters=("gpu-lab-1",))]
    assert rows(compose(request(caches=caches, hydrations=[]))) == {
        "a": (True, "Admitted"), "b": (False, "OutsideGrant")}


def test_a_cache_selecting_clusters_by_label_is_held_to_the_grant_too():
    wide = model_cache("a")
    wide["spec"]["placement"] = {"clusterSelector": {}}
    assert rows(compose(request(caches=[wide], hydrations=[]))) == {"a": (False, "OutsideGrant")}


def test_pinning_follows_allow_pinned():
    caches = [model_cache("a", pinned=True)]
    assert rows(compose(request(caches=caches, hydrations=[]))) == {
        "a": (False, "PinningNotAllowed")}
    assert rows(compose(request(grant_xr(allow_pinned=True), caches, []))) == {
        "a": (True, "Admitted")}


def test_rows_record_what_was_admitted_for_compose_model_cache_to_obey():
    cache = model_cache("a", size_gib=10, clusters=("gpu-east-1", "gpu-east-2"))
    row = compose(request(caches=[cache], hydrations=[])).status["caches"][0]
    assert row == {"name": "a", "commit": COMMIT, "manifestDigest": DIGEST_A,
                   "bytes": 10 * GIB, "clusters": 2, "admitted": True, "reason": "Admitted",
                   "message": "10.0GiB on 2 clusters fits: the projection is 20.0GiB of "
                              "100.0GiB",
                   "admittedDigest": admission.admission_digest(cache),
                   "admittedFootprint": {"manifestDigest": DIGEST_A, "bytes": 10 * GIB,
                                         "clusters": 2}}


def test_a_refused_edit_keeps_the_digest_published_before():
    before = model_cache("a", clusters=("gpu-east-1",))
    first = compose(request(caches=[before], hydrations=[]))
    edited = model_cache("a", clusters=("gpu-east-1", "gpu-lab-1"))
    xr = grant_xr(status=first.status)
    row = compose(request(xr, [edited], [])).status["caches"][0]
    assert (row["admitted"], row["reason"], row["admittedDigest"]) == (
        False, "OutsideGrant", admission.admission_digest(before))


def test_two_tenants_caches_past_the_budget_are_refused_with_the_numbers():
    caches = [model_cache("a", size_gib=60, content=DIGEST_A),
              model_cache("b", size_gib=60, content=DIGEST_B, created="2026-01-02T00:00:00Z")]
    row = compose(request(caches=caches, hydrations=[])).status["caches"][1]
    assert (row["admitted"], row["reason"]) == (False, "OverQuota")
    assert "would make the projection 120.0GiB" in row["message"]
    assert "over the budget of 100.0GiB" in row["message"]


def test_status_rows_are_bounded_and_the_rest_counted():
    caches = [model_cache(f"c{i:03d}", size_gib=None) for i in range(admission.LISTED + 7)]
    status = compose(request(caches=caches, hydrations=[])).status
    assert len(status["caches"]) == admission.LISTED
    assert (status["cacheCount"], status["cachesOmitted"]) == (admission.LISTED + 7, 7)


def test_the_figures_for_the_columns():
    caches = [model_cache("a", size_gib=10, clusters=("gpu-east-1", "gpu-east-2")),
              model_cache("b", size_gib=90, content=DIGEST_B)]
    hydrations = [hydration("a", "gpu-east-1", DIGEST_A, 10)]
    status = compose(request(caches=caches, hydrations=hydrations)).status
    assert {k: status[k] for k in ("budgetHuman", "usedHuman", "projectedHuman",
                                   "cachesSummary", "usedBytes", "projectedBytes")} == {
        "budgetHuman": "100.0GiB", "usedHuman": "10.0GiB", "projectedHuman": "20.0GiB",
        "cachesSummary": "1/2", "usedBytes": 10 * GIB, "projectedBytes": 20 * GIB}


# --- usage and OverQuota ---------------------------------------------------------------------


def test_used_bytes_is_absent_while_any_cache_is_unresolved():
    caches = [model_cache("a"), model_cache("b", size_gib=None)]
    outcome = compose(request(caches=caches, hydrations=[hydration("a", "gpu-east-1", DIGEST_A, 10)]))
    assert "usedBytes" not in outcome.status and outcome.status["unresolvedCaches"] == 1
    over = condition(outcome, "OverQuota")
    assert (over.status, over.reason) == ("Unknown", "UsageUnknown")
    assert "usage cannot be counted: 1 unresolved ModelCache naming the grant" in over.message


def test_used_bytes_is_absent_until_the_hydrations_are_listed():
    outcome = compose(request(caches=[model_cache("a")]))
    assert "usedBytes" not in outcome.status
    assert condition(outcome, "OverQuota").status == "Unknown"


def test_zero_is_a_measurement():
    outcome = compose(request(caches=[model_cache("a")], hydrations=[]))
    assert outcome.status["usedBytes"] == 0
    assert (condition(outcome, "OverQuota").status, condition(outcome, "OverQuota").reason) == (
        "False", "WithinQuota")


def test_over_quota_is_true_when_what_is_held_passes_the_budget():
    caches = [model_cache("a", size_gib=60, clusters=("gpu-east-1", "gpu-east-2"))]
    hydrations = [hydration("a", "gpu-east-1", DIGEST_A, 60), hydration("a", "gpu-east-2",
                                                                        DIGEST_A, 60)]
    over = condition(compose(request(caches=caches, hydrations=hydrations)), "OverQuota")
    assert (over.status, over.reason) == ("True", "OverQuota")
    assert "hold 120.0GiB" in over.message and reasons.remedy("OverQuota") in over.message


def test_content_another_namespace_shares_counts_fully_here():
    theirs = hydration("a", "gpu-east-1", DIGEST_A, 10)
    theirs["metadata"]["namespace"] = "team-b"
    theirs["spec"]["modelCacheName"] = "shared"
    ours = hydration("a", "gpu-east-1", DIGEST_A, 10)
    status = compose(request(caches=[model_cache("a")], hydrations=[ours])).status
    assert status["usedBytes"] == 10 * GIB


# --- input errors and status validity ----------------------------------------------------------


def test_a_spec_without_quota_is_an_input_error_naming_the_field():
    xr = grant_xr()
    del xr["spec"]["quota"]
    with pytest.raises(specs.InputError, match=r"^spec.quota is required"):
        compose(request(xr, [], []))


def test_a_hostile_cache_never_fails_the_grant():
    hostile = model_cache("a")
    hostile["spec"]["placement"] = {"clusterSelector": {"matchExpressions": "nope"}}
    hostile["status"] = {"resolved": {"bytes": "NaN", "manifestDigest": ["x"]}}
    assert rows(compose(request(caches=[hostile], hydrations=[]))) == {
        "a": (False, "InvalidSpec")}


def test_the_status_it_writes_is_accepted_by_the_xrd():
    caches = [model_cache("a", size_gib=60), model_cache("b", size_gib=60, content=DIGEST_B),
              model_cache("c", clusters=("gpu-lab-1",)), model_cache("d", size_gib=None)]
    xr = copy.deepcopy(grant_xr())
    xr["status"] = compose(request(caches=caches, hydrations=[])).status
    assert_valid(xr)


def test_a_hostile_hydration_counts_nothing_and_fails_nothing():
    hostile = hydration("a", "gpu-east-1", DIGEST_A, 10)
    hostile["spec"]["modelCacheName"] = ["a"]
    status = compose(request(caches=[model_cache("a")], hydrations=[hostile])).status
    assert status["usedBytes"] == 0


def test_a_budget_past_int64_is_published_at_int64s_largest_value():
    status = compose(request(grant_xr("9000Pi"), [model_cache("a")], [])).status
    assert status["quotaBytes"] == read.INT64_MAX
    assert status["budgetHuman"] == f"{9000 * 1024:.1f}TiB"
