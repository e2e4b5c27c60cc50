"""capacity.decide: the admit/evict decision of one cluster, as tables."""

from __future__ import annotations

import datetime
import random

import pytest

from fleetcache.functions.decisions.capacity import LISTED, Copy, allocates, decide

GI = 1024**3
CAPACITY = 100 * GI  # high watermark 80Gi, low 70Gi


def at(hour: int) -> datetime.datetime:
    return datetime.datetime(2026, 1, 1, hour, tzinfo=datetime.UTC)


def ready(key: str, used: int, *, pinned: bool | None = False, mounted_by: int | None = 0,
          placed: int | None = 0, lapsed: bool = False, last_used: int | None = 1) -> Copy:
    """A Ready copy of `used` GiB."""
    return Copy(key=key, created="2026-01-01T00:00:00Z", size=used * GI, used=used * GI,
                phase="Ready", serving=True, pinned=pinned, mounted_by=mounted_by,
                placed=placed, lapsed=lapsed,
                last_used=None if last_used is None else at(last_used), removal=False)


def new(key: str, size: int, *, created: str = "2026-01-01T00:00:00Z", used: int | None = None,
        phase: str = "Pending", removal: bool = False) -> Copy:
    """A copy of `size` GiB that has not started fetching."""
    return Copy(key=key, created=created, size=size * GI,
                used=None if used is None else used * GI, phase=phase, serving=False,
                pinned=False, mounted_by=0, placed=0, lapsed=False, last_used=None,
                removal=removal)


def run(copies: list[Copy], *, capacity: int | None = CAPACITY, admitted=(), evicted=()):
    return decide(copies, capacity, 80, 70, admitted, evicted)


# --- usage and reservations ---------------------------------------------------------------


def test_used_is_the_sum_of_measured_usage_and_unmeasured_counts_nothing():
    decision = run([ready("ns/a", 10), ready("ns/b", 5), new("ns/c", 3)])
    assert decision.used == 15 * GI


def test_reserved_is_what_admitted_downloads_may_still_add():
    hydrating = Copy(key="ns/h", created="", size=10 * GI, used=4 * GI, phase="Hydrating",
                     serving=False, pinned=False, mounted_by=0, placed=0, lapsed=False,
                     last_used=None, removal=False)
    decision = run([hydrating, new("ns/p", 6, used=1)], admitted=["ns/p"])
    assert (decision.used, decision.reserved) == (5 * GI, 6 * GI + 5 * GI)


def test_used_percent_is_a_whole_percent_of_the_capacity():
    assert run([ready("ns/a", 33)]).used_percent == 33
    assert run([ready("ns/a", 33)], capacity=None).used_percent is None


# --- admission ----------------------------------------------------------------------------


@pytest.mark.parametrize("sizes, admitted, waiting", [
    ([80], ["ns/c0"], []),  # exactly at the high watermark fits
    ([81], [], ["ns/c0"]),
    ([30, 30, 20], ["ns/c0", "ns/c1", "ns/c2"], []),  # started together, counted together
    ([30, 30, 30], ["ns/c0", "ns/c1"], ["ns/c2"]),  # the third would pass 80: it waits
    ([50, 40, 10], ["ns/c0"], ["ns/c1", "ns/c2"]),  # no overtaking: c2 waits behind c1
])
def test_reservations_of_parallel_starts_stay_under_the_high_watermark(sizes, admitted, waiting):
    copies = [new(f"ns/c{i}", size, created=f"2026-01-01T00:00:0{i}Z")
              for i, size in enumerate(sizes)]
    decision = run(copies)
    assert (list(decision.admitted), list(decision.waiting)) == (admitted, waiting)


def test_admission_counts_what_is_on_the_cluster_already():
    decision = run([ready("ns/old", 60), new("ns/new", 21)])
    assert (decision.admitted, decision.waiting) == ((), ("ns/new",))
    assert decision.capacity_low


def test_admission_is_in_creation_order_then_by_namespace_and_name():
    copies = [new("b/x", 40, created="2026-01-01T00:00:01Z"),
              new("a/z", 40, created="2026-01-01T00:00:02Z"),
              new("a/y", 40, created="2026-01-01T00:00:01Z")]
    decision = run(copies)
    assert (decision.admitted, decision.waiting) == (("a/y", "b/x"), ("a/z",))


def test_an_admitted_copy_stays_admitted_when_usage_grows_meanwhile():
    decision = run([ready("ns/old", 75), new("ns/new", 20)], admitted=["ns/new"])
    assert decision.admitted == ("ns/new",)
    assert decision.waiting == ()


@pytest.mark.parametrize("phase", ["Ready", "Failed", "Evicted"])
def test_an_admitted_copy_leaves_the_list_once_it_is_done_with_its_download(phase):
    decision = run([new("ns/a", 10, phase=phase)], admitted=["ns/a"])
    assert "ns/a" not in decision.admitted


def test_an_admitted_copy_that_is_gone_leaves_the_list():
    assert run([], admitted=["ns/gone"]).admitted == ()


@pytest.mark.parametrize("copy", [
    new("ns/h", 90, phase="Hydrating"),
    Copy(key="ns/s", created="", size=90 * GI, used=None, phase="Pending", serving=True,
         pinned=False, mounted_by=0, placed=0, lapsed=False, last_used=None, removal=False),
])
def test_a_started_copy_needs_no_admission(copy):
    decision = run([copy])
    assert (decision.admitted, decision.waiting) == ((), ())


def test_a_copy_whose_cluster_left_the_placement_is_never_admitted_anew():
    decision = run([new("ns/r", 1, removal=True)])
    assert (decision.admitted, decision.waiting) == ((), ())


def test_a_lapsed_copy_is_not_admitted_until_a_replica_clears_its_lapse():
    lapsed = Copy(**{**new("ns/l", 1).__dict__, "lapsed": True})
    assert (run([lapsed]).admitted, run([lapsed]).waiting) == ((), ())


def test_a_copy_with_an_unreadable_size_waits():
    copy = Copy(key="ns/u", created="", size=None, used=None, phase="Pending", serving=False,
                pinned=False, mounted_by=0, placed=0, lapsed=False, last_used=None,
                removal=False)
    assert run([copy]).waiting == ("ns/u",)


def test_the_admitted_list_is_bounded_and_the_rest_wait():
    copies = [new(f"ns/c{i:04}", 0) for i in range(LISTED + 3)]
    copies = [Copy(**{**c.__dict__, "size": 1}) for c in copies]
    decision = run(copies, capacity=10**15)
    assert len(decision.admitted) == LISTED
    assert len(decision.waiting) == 3


# --- no capacity --------------------------------------------------------------------------


def test_without_a_capacity_everything_is_admitted_nothing_evicted_and_usage_shown():
    copies = [ready("ns/a", 500), new("ns/b", 900)]
    decision = run(copies, capacity=None)
    assert decision.admitted == ("ns/b",)
    assert (decision.waiting, decision.evicted) == ((), ())
    assert decision.used == 500 * GI
    assert not decision.capacity_low


# --- eviction -----------------------------------------------------------------------------


@pytest.mark.parametrize("used", [70, 75, 80])
def test_nothing_is_evicted_at_or_below_the_high_watermark(used):
    decision = run([ready("ns/a", used - 10), ready("ns/b", 10)])
    assert decision.evicted == ()
    assert not decision.capacity_low


def test_above_the_high_watermark_copies_go_until_usage_is_at_the_low_one():
    copies = [ready("ns/a", 30, last_used=1), ready("ns/b", 30, last_used=2),
              ready("ns/c", 25, last_used=3)]
    decision = run(copies)  # 85 > 80: a (oldest) goes, 55 <= 70
    assert decision.evicted == ("ns/a",)
    assert decision.used == 55 * GI


def test_eviction_goes_on_until_the_low_watermark_not_just_under_the_high_one():
    copies = [ready(f"ns/c{i}", 9, last_used=i) for i in range(10)]  # 90
    decision = run(copies)  # 81 is above 80 but above 70 too: two go
    assert decision.evicted == ("ns/c0", "ns/c1", "ns/c2")
    assert decision.used == 63 * GI


def test_lapsed_copies_go_first_then_the_least_recently_used():
    copies = [ready("ns/old", 20, last_used=1), ready("ns/lapsed", 10, lapsed=True, last_used=5),
              ready("ns/mid", 20, last_used=2), ready("ns/new", 40, last_used=3)]
    decision = run(copies)  # 90: lapsed (80), old (60)
    assert decision.evicted == ("ns/lapsed", "ns/old")


def test_a_copy_with_no_known_use_goes_last_and_names_break_ties():
    copies = [ready("ns/unknown", 30, last_used=None), ready("ns/b", 30, last_used=1),
              ready("ns/a", 30, last_used=1)]
    assert run(copies).evicted == ("ns/a",)


@pytest.mark.parametrize("kept", [
    ready("ns/kept", 60, pinned=True),
    ready("ns/kept", 60, pinned=None),  # not reported: kept
    ready("ns/kept", 60, mounted_by=1),
    ready("ns/kept", 60, mounted_by=None),  # unknown: read as mounted
    ready("ns/kept", 60, placed=1),  # a replica placed there will mount it
    ready("ns/kept", 60, placed=None),
    Copy(**{**ready("ns/kept", 60).__dict__, "used": None}),  # never measured
    Copy(**{**ready("ns/kept", 60).__dict__, "phase": "Hydrating"}),
], ids=["pinned", "pin-unknown", "mounted", "mount-unknown", "placed", "placed-unknown",
        "unmeasured", "hydrating"])
def test_a_pinned_mounted_or_unknown_copy_is_never_evicted(kept):
    decision = run([kept, ready("ns/other", 25, last_used=5)])
    assert "ns/kept" not in decision.evicted


def test_with_nothing_removable_above_the_high_watermark_capacity_is_low():
    decision = run([ready("ns/a", 85, pinned=True)])
    assert decision.evicted == ()
    assert decision.stuck and decision.capacity_low


def test_evicting_what_it_can_but_staying_above_the_high_watermark_is_capacity_low():
    decision = run([ready("ns/a", 81, mounted_by=2), ready("ns/b", 5)])
    assert decision.evicted == ("ns/b",)
    assert decision.stuck


def test_evicting_below_high_but_above_low_is_not_capacity_low():
    decision = run([ready("ns/a", 75, mounted_by=2), ready("ns/b", 10)])
    assert decision.evicted == ("ns/b",)
    assert not decision.capacity_low


# --- the evicted latch --------------------------------------------------------------------


def test_a_listed_copy_not_yet_obeyed_stays_evicted_and_counts_nothing():
    decision = run([ready("ns/a", 30), ready("ns/b", 45)], evicted=["ns/a"])
    assert decision.evicted == ("ns/a",)
    assert decision.used == 45 * GI


def test_a_copy_that_says_it_is_evicted_stays_evicted():
    gone = Copy(**{**ready("ns/a", 0).__dict__, "phase": "Evicted", "used": None})
    assert run([gone], evicted=[]).evicted == ("ns/a",)
    assert run([gone], capacity=None).evicted == ("ns/a",)


@pytest.mark.parametrize("copy", [
    new("ns/a", 30),  # asks to be warmed again: a replica was placed
    ready("ns/a", 30, mounted_by=1),  # a replica mounted it before the eviction was obeyed
    ready("ns/a", 30, placed=1),
    ready("ns/a", 30, pinned=True),
], ids=["warming-again", "mounted", "placed", "pinned"])
def test_a_listed_copy_leaves_the_evicted_list_when_it_is_wanted_again(copy):
    assert run([copy], evicted=["ns/a"]).evicted == ()


def test_eviction_makes_room_for_a_waiting_copy_in_the_same_decision():
    decision = run([ready("ns/a", 30, last_used=1), ready("ns/b", 55, mounted_by=1),
                    new("ns/c", 20)])  # 85: a goes (55), then c fits (75)
    assert (decision.evicted, decision.admitted) == (("ns/a",), ("ns/c",))


def test_a_failed_copy_is_not_admitted_until_it_is_retried():
    assert run([new("ns/f", 1, phase="Failed")]).admitted == ()


def test_a_copy_warming_again_after_eviction_is_admitted_like_a_new_one():
    decision = run([new("ns/a", 30)], evicted=["ns/a"])
    assert decision.admitted == ("ns/a",)


def test_an_evicted_copy_that_is_gone_leaves_the_list():
    assert run([], evicted=["ns/gone"]).evicted == ()


# --- determinism --------------------------------------------------------------------------


def test_the_same_copies_in_any_order_give_the_same_decision():
    copies = [ready(f"ns/r{i}", 7, last_used=i % 4, lapsed=i % 5 == 0) for i in range(12)] + \
             [new(f"ns/n{i}", 3, created=f"2026-01-01T00:00:0{i % 3}Z") for i in range(6)]
    first = run(copies, admitted=["ns/n5"], evicted=["ns/r1"])
    for seed in range(5):
        shuffled = copies[:]
        random.Random(seed).shuffle(shuffled)
        assert run(shuffled, admitted=["ns/n5"], evicted=["ns/r1"]) == first


def test_deciding_again_on_its_own_output_changes_nothing():
    copies = [ready("ns/a", 30, last_used=1), ready("ns/b", 30, last_used=2),
              ready("ns/c", 25, last_used=3), new("ns/d", 20)]
    first = run(copies)
    again = run(copies, admitted=first.admitted, evicted=first.evicted)
    assert (again.admitted, again.evicted, again.waiting) == \
        (first.admitted, first.evicted, first.waiting)


@pytest.mark.parametrize("source, takes_room", [
    ({"huggingFace": {"repo": "org/name"}}, True),
    ({"s3": {"bucket": "models"}}, True),
    ({"volume": {"claimName": "weights"}, "allowPatterns": []}, False),  # the user's claim
    ({"volume": "weights"}, True),  # unreadable: counted like any copy
    (None, True),
], ids=["hub", "s3", "existing-volume", "malformed-volume", "absent"])
def test_only_an_existing_volume_takes_no_room_on_its_cluster(source, takes_room):
    assert allocates(source) is takes_room


def test_a_shortfall_names_the_first_five_waiting_copies_and_counts_the_rest():
    decision = run([ready("full", 80, pinned=True)] + [new(f"ns/w{i}", 1) for i in range(7)])
    said = decision.shortfall("80 used", "nothing is removable", "hydration", "detail")
    assert "7 hydrations waiting for room (ns/w0, ns/w1, ns/w2, ns/w3, ns/w4 and 2 more)" in said


def test_a_shortfall_says_where_usage_stands_once_then_the_detail():
    stuck = run([ready("full", 90, pinned=True), new("ns/w", 1)])
    assert stuck.shortfall("90 used", "nothing is removable", "hydration", "5 reserved") == \
        "90 used and nothing is removable; 1 hydration waiting for room (ns/w); 5 reserved"
    waiting = run([ready("some", 75, pinned=True), new("ns/w", 10)])
    assert waiting.shortfall("75 used", "nothing is removable", "hydration", "") == \
        "1 hydration waiting for room (ns/w); 75 used"
