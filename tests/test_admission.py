"""Budget admission (functions/admission.py): tables of caches in, rows out."""

from __future__ import annotations

import random

import pytest

from fleetcache import reasons
from fleetcache.functions.decisions import admission
from fleetcache.functions.decisions.admission import Cache, Footprint, Grant, Previous

GIB = 1024**3
FLEET = frozenset({"gpu-east-1", "gpu-east-2", "gpu-west-1"})


def grant(quota_gib: int = 100, *, clusters: frozenset[str] = FLEET,
          allow_pinned: bool = False) -> Grant:
    return Grant("team-a", clusters, quota_gib * GIB, allow_pinned)


def cache(name: str, size_gib: int = 10, *, created: str = "2026-01-01T00:00:00Z",
          targets: tuple[str, ...] | None = ("gpu-east-1",), content: str | None = None,
          pinned: bool = False, digest: str = "") -> Cache:
    """A resolved cache of `size_gib` whose content is its own name unless given ("" means
    not resolved yet); its digest is `name@1` unless given."""
    content = f"content-{name}" if content is None else content
    return Cache(name=name, created=created, digest=digest or f"{name}@1",
                 targets=frozenset(targets) if targets is not None else None, pinned=pinned,
                 content=content, commit="", bytes=size_gib * GIB if content else 0)


def decided(caches: list[Cache], quota_gib: int = 100, previous: dict | None = None,
            **grant_args) -> dict[str, tuple[bool, str]]:
    decision = admission.decide(grant(quota_gib, **grant_args), caches, previous or {})
    return {row.cache.name: (row.admitted, row.reason) for row in decision.rows}


def admitted_before(digest: str, content: str, size_gib: int, clusters: int = 1) -> Previous:
    return Previous(True, digest, Footprint(content, size_gib * GIB, clusters))


# --- order -----------------------------------------------------------------------------------


def test_caches_are_admitted_in_creation_order_until_the_projection_passes_the_budget():
    caches = [cache("late", 60, created="2026-01-03T00:00:00Z"),
              cache("early", 60, created="2026-01-01T00:00:00Z")]
    assert decided(caches) == {"early": (True, "Admitted"), "late": (False, "OverQuota")}


def test_caches_created_at_the_same_time_are_ordered_by_name():
    caches = [cache("b", 60), cache("a", 60)]
    assert decided(caches) == {"a": (True, "Admitted"), "b": (False, "OverQuota")}


def test_rows_are_listed_in_admission_order():
    caches = [cache("b"), cache("c", created="2025-12-31T00:00:00Z"), cache("a")]
    decision = admission.decide(grant(), caches, {})
    assert [row.cache.name for row in decision.rows] == ["c", "a", "b"]


def test_a_later_cache_that_fits_is_admitted_after_one_that_does_not():
    caches = [cache("a", 60), cache("b", 60), cache("c", 30)]
    assert decided(caches) == {"a": (True, "Admitted"), "b": (False, "OverQuota"),
                               "c": (True, "Admitted")}


# --- shape refusals ----------------------------------------------------------------------------


def test_a_target_cluster_outside_the_grant_is_refused_naming_it():
    decision = admission.decide(grant(), [cache("a", targets=("gpu-east-1", "gpu-south-9"))], {})
    row = decision.rows[0]
    assert (row.admitted, row.reason) == (False, "OutsideGrant")
    assert "gpu-south-9" in row.message and "gpu-east-1" not in row.message.split(":")[1]


def test_pinning_needs_the_grants_allow_pinned():
    assert decided([cache("a", pinned=True)]) == {"a": (False, "PinningNotAllowed")}
    assert decided([cache("a", pinned=True)], allow_pinned=True) == {"a": (True, "Admitted")}


def test_a_placement_that_cannot_be_evaluated_is_refused():
    assert decided([cache("a", targets=None)]) == {"a": (False, "InvalidSpec")}


def test_a_refused_shape_takes_no_room():
    caches = [cache("a", 60, targets=("elsewhere",)), cache("b", 60)]
    assert decided(caches) == {"a": (False, "OutsideGrant"), "b": (True, "Admitted")}


def test_an_over_quota_message_gives_the_numbers_needed_and_the_budget():
    decision = admission.decide(grant(100), [cache("a", 60), cache("b", 60)], {})
    message = decision.rows[1].message
    assert "would make the projection 120.0GiB" in message
    assert f"over the budget of 100.0GiB ({100 * GIB} bytes)" in message
    assert "40.0GiB is left" in message
    assert reasons.remedy("OverQuota") in message


# --- the projection ----------------------------------------------------------------------------


def test_content_counts_its_widest_cluster_count_among_admitted_caches():
    caches = [cache("a", 10, content="same", targets=("gpu-east-1",)),
              cache("b", 10, content="same", targets=("gpu-east-1", "gpu-east-2", "gpu-west-1"))]
    assert admission.decide(grant(), caches, {}).projected == 30 * GIB


def test_shared_content_is_counted_once_per_grant():
    caches = [cache("a", 60, content="same"), cache("b", 60, content="same")]
    decision = admission.decide(grant(100), caches, {})
    assert [(row.admitted, row.reason) for row in decision.rows] == [
        (True, "Admitted"), (True, "Admitted")]
    assert decision.projected == 60 * GIB


def test_widening_shared_content_past_the_budget_is_refused():
    caches = [cache("a", 40, content="same"),
              cache("b", 40, content="same", targets=("gpu-east-1", "gpu-east-2", "gpu-west-1"))]
    assert decided(caches) == {"a": (True, "Admitted"), "b": (False, "OverQuota")}


def test_an_unresolved_cache_is_admitted_with_no_size_and_counted_as_unresolved():
    decision = admission.decide(grant(10), [cache("a", content=""), cache("b", 10)], {})
    assert [(row.admitted, row.reason) for row in decision.rows] == [
        (True, "Admitted"), (True, "Admitted")]
    assert (decision.projected, decision.unresolved) == (10 * GIB, 1)
    assert "size is not known yet" in decision.rows[0].message


def test_two_caches_created_together_can_never_both_pass_the_budget():
    caches = [cache("a", 60, created="2026-01-01T00:00:00Z"),
              cache("b", 60, created="2026-01-01T00:00:00Z")]
    decision = admission.decide(grant(100), caches, {})
    assert decision.admitted == 1 and decision.projected <= 100 * GIB


# --- the latch ---------------------------------------------------------------------------------


def test_a_refused_edit_keeps_the_earlier_admission_and_its_footprint():
    previous = {"a": admitted_before("a@1", "content-a", 10)}
    edited = cache("a", 10, targets=("gpu-east-1", "gpu-south-9"), digest="a@2")
    row = admission.decide(grant(), [edited], previous).rows[0]
    assert (row.admitted, row.reason, row.admitted_digest) == (False, "OutsideGrant", "a@1")
    assert row.footprint == Footprint("content-a", 10 * GIB, 1)
    assert "the spec admitted earlier (a@1) keeps serving" in row.message


def test_the_footprint_of_a_refused_edit_still_takes_room():
    previous = {"a": admitted_before("a@1", "content-a", 60)}
    caches = [cache("a", 60, pinned=True, digest="a@2"), cache("b", 60)]
    decision = admission.decide(grant(100), caches, previous)
    assert {r.cache.name: (r.admitted, r.reason) for r in decision.rows} == {
        "a": (False, "PinningNotAllowed"), "b": (False, "OverQuota")}
    assert decision.projected == 60 * GIB


def test_an_admitted_edit_replaces_the_earlier_footprint():
    previous = {"a": admitted_before("a@1", "content-a", 60)}
    grown = cache("a", 90, content="content-a2", digest="a@2")
    decision = admission.decide(grant(100), [grown], previous)
    assert (decision.rows[0].admitted, decision.rows[0].admitted_digest) == (True, "a@2")
    assert decision.projected == 90 * GIB


def test_content_an_edit_leaves_counts_only_the_clusters_still_asked_of_it():
    previous = {"a": admitted_before("a@1", "shared", 10, clusters=3),
                "b": admitted_before("b@1", "shared", 10, clusters=1)}
    caches = [cache("a", 10, content="own", digest="a@2"),
              cache("b", 10, content="shared", digest="b@1")]
    assert admission.decide(grant(), caches, previous).projected == (10 + 10) * GIB


def test_an_earlier_caches_edit_never_displaces_a_later_admitted_cache():
    previous = {"a": admitted_before("a@1", "content-a", 30),
                "b": admitted_before("b@1", "content-b", 60)}
    caches = [cache("a", 30, targets=("gpu-east-1", "gpu-east-2"), created="2026-01-01T00:00:00Z",
                    digest="a@2"),
              cache("b", 60, created="2026-01-02T00:00:00Z", digest="b@1")]
    assert decided(caches, previous=previous) == {"a": (False, "OverQuota"),
                                                  "b": (True, "Admitted")}


def test_an_unresolved_edit_keeps_counting_what_it_held():
    previous = {"a": admitted_before("a@1", "content-a", 60)}
    caches = [cache("a", content="", digest="a@2"), cache("b", 60)]
    decision = admission.decide(grant(100), caches, previous)
    assert {r.cache.name: r.reason for r in decision.rows} == {"a": "Admitted", "b": "OverQuota"}
    assert decision.rows[0].footprint == Footprint("content-a", 60 * GIB, 1)


def test_a_cache_never_admitted_has_no_admitted_digest_when_refused():
    row = admission.decide(grant(), [cache("a", pinned=True)], {}).rows[0]
    assert (row.admitted_digest, row.footprint) == ("", None)
    assert "admittedDigest" not in row.as_status()


def test_a_cache_admitted_before_it_resolved_does_not_claim_copies_keep_serving_when_refused():
    previous = {"a": Previous(True, "a@0", None)}  # admitted unresolved: nothing fanned out
    row = admission.decide(grant(5), [cache("a", 10)], previous).rows[0]
    assert (row.admitted, row.reason) == (False, "OverQuota")
    assert "keeps serving" not in row.message


def test_a_refusal_states_its_remedy_once():
    row = admission.decide(grant(5), [cache("a", 10)], {}).rows[0]
    assert row.message.count(reasons.remedy("OverQuota").rstrip(".")) == 1
    assert reasons.with_remedy(row.message.rstrip("."), "OverQuota") == row.message.rstrip(".")


# --- determinism -------------------------------------------------------------------------------


def test_the_same_caches_in_any_order_give_the_same_rows():
    caches = [cache(f"c{i}", 7 + i % 5, content=f"x{i % 3}", created=f"2026-01-0{1 + i % 4}T00:00:00Z",
                    targets=tuple(sorted(FLEET))[: 1 + i % 3]) for i in range(12)]
    expected = admission.decide(grant(60), caches, {})
    for seed in range(5):
        shuffled = list(caches)
        random.Random(seed).shuffle(shuffled)
        assert admission.decide(grant(60), shuffled, {}) == expected


# --- the admission digest ----------------------------------------------------------------------


def model_cache(**spec) -> dict:
    return {"metadata": {"name": "qwen"},
            "spec": {"source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}},
                     "placement": {"clusterNames": ["gpu-east-1"]}, **spec}}


@pytest.mark.parametrize("change", [
    {"spec": {"source": {"huggingFace": {"repo": "Qwen/Qwen3-8B"}}}},
    {"spec": {"placement": {"clusterNames": ["gpu-east-1", "gpu-east-2"]}}},
    {"spec": {"retention": {"pinned": True}}},
    {"status": {"resolved": {"manifestDigest": "cd" * 32}}},
], ids=["source", "placement", "pinned", "resolved content"])
def test_the_admission_digest_changes_with_what_admission_weighs(change):
    changed = model_cache()
    for part, fields in change.items():
        changed.setdefault(part, {}).update(fields)
    assert admission.admission_digest(changed) != admission.admission_digest(model_cache())


def test_the_admission_digest_ignores_what_admission_does_not_weigh():
    other = model_cache(rollout={"maxConcurrent": 3}, retention={"pinned": False})
    other["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    assert admission.admission_digest(other) == admission.admission_digest(model_cache())


# --- usage -------------------------------------------------------------------------------------


def hydration(cache_name: str, cluster: str, content: str, size_gib: int) -> dict:
    return {"metadata": {"name": f"{cache_name}-{cluster}"},
            "spec": {"modelCacheName": cache_name, "clusterName": cluster,
                     "manifestDigest": content, "bytes": size_gib * GIB}}


def test_usage_counts_each_content_once_per_cluster_holding_it():
    hydrations = [hydration("a", "gpu-east-1", "x", 10), hydration("b", "gpu-east-1", "x", 10),
                  hydration("b", "gpu-east-2", "x", 10), hydration("c", "gpu-east-1", "y", 5)]
    assert admission.used_bytes(hydrations, ["a", "b", "c"]) == 25 * GIB


def test_usage_counts_only_the_caches_naming_the_grant():
    hydrations = [hydration("a", "gpu-east-1", "x", 10), hydration("other", "gpu-east-2", "z", 50)]
    assert admission.used_bytes(hydrations, ["a"]) == 10 * GIB


EXISTING_VOLUME = {"volume": {"claimName": "weights", "manifest": {"file": "manifest.json"}}}


def test_an_existing_volume_uses_nothing_of_the_budget():
    hydrations = [hydration("a", "gpu-east-1", "x", 10), hydration("vol", "gpu-east-1", "v", 50)]
    hydrations[1]["spec"]["source"] = EXISTING_VOLUME
    assert admission.used_bytes(hydrations, ["a", "vol"]) == 10 * GIB


def test_an_existing_volume_projects_no_bytes():
    resolved = {"resolved": {"manifestDigest": "ab" * 32, "commit": "vol-" + "0" * 40,
                             "bytes": 50 * GIB}}
    placements = admission.Placements(())
    on_volume = {**model_cache(source=EXISTING_VOLUME), "status": resolved}
    from_hub = {**model_cache(), "status": resolved}
    assert admission.cache_of(on_volume, placements).bytes == 0
    assert admission.cache_of(from_hub, placements).bytes == 50 * GIB
