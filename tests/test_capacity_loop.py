"""The capacity loop closed: compose-fleet-cluster decides, the hydrations obey, the
volumes fill or go, and it decides again. Over random clusters the loop settles within a few
rounds and then never changes (no flapping), never removes what is pinned, mounted or wanted
by a placed replica, and never stays above the high watermark while a copy is collectable."""

from __future__ import annotations

import dataclasses
import datetime

from hypothesis import given
from hypothesis import strategies as st

from fleetcache.functions.decisions import capacity

MIB = 2**20
ROUNDS = 12
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


@st.composite
def copies(draw) -> list[capacity.Copy]:
    out = []
    for index in range(draw(st.integers(1, 10))):
        size = draw(st.integers(1, 40)) * MIB
        ready = draw(st.booleans())
        role = draw(st.sampled_from(["plain", "pinned", "mounted", "placed", "lapsed"]))
        out.append(capacity.Copy(
            key=f"ns/copy-{index}", created=f"2026-01-01T00:{index:02d}:00Z", size=size,
            used=size if ready else None, phase="Ready" if ready else "Pending", serving=ready,
            pinned=role == "pinned", mounted_by=1 if role == "mounted" else 0,
            placed=1 if role in ("mounted", "placed") else 0, lapsed=role == "lapsed",
            last_used=EPOCH + datetime.timedelta(hours=draw(st.integers(0, 100))),
            removal=False))
    return out


@st.composite
def clusters(draw) -> tuple[list[capacity.Copy], int, int, int]:
    high = draw(st.integers(2, 95))
    low = draw(st.integers(1, high - 1))
    return draw(copies()), draw(st.integers(1, 300)) * MIB, high, low


def obey(copies_now: list[capacity.Copy], decision: capacity.Decision) -> list[capacity.Copy]:
    """One round of the hydrations: an evicted copy deletes its volume; an admitted one
    downloads (in one round, here) and is Ready at its full size."""
    out = []
    for copy in copies_now:
        if copy.key in decision.evicted:
            copy = dataclasses.replace(copy, phase="Evicted", used=None, serving=False)
        elif copy.key in decision.admitted and copy.phase == "Pending":
            copy = dataclasses.replace(copy, phase="Ready", used=copy.size, serving=True)
        out.append(copy)
    return out


def run(start: list[capacity.Copy], size: int, high: int, low: int
        ) -> tuple[list[tuple], list[capacity.Copy], capacity.Decision]:
    history, now, decision = [], start, None
    admitted: tuple[str, ...] = ()
    evicted: tuple[str, ...] = ()
    for _ in range(ROUNDS):
        decision = capacity.decide(now, size, high, low, admitted, evicted)
        admitted, evicted = decision.admitted, decision.evicted
        now = obey(now, decision)
        history.append((decision, tuple(c.phase for c in now)))
    return history, now, decision


@given(clusters())
def test_the_loop_settles_within_three_rounds_and_never_changes_again(cluster):
    history, _, _ = run(*cluster)
    assert all(state == history[3] for state in history[3:])


@given(clusters())
def test_pinned_mounted_and_placed_copies_are_never_evicted(cluster):
    start, *_ = cluster
    _, end, _ = run(*cluster)
    for before, after in zip(start, end, strict=True):  # obey keeps every copy, in order
        if before.pinned or before.mounted_by or before.placed:
            assert after.phase != "Evicted", before.key


@given(clusters())
def test_usage_stays_above_the_high_watermark_only_when_nothing_is_collectable(cluster):
    _, end, decision = run(*cluster)
    used = sum(c.used or 0 for c in end)
    if used > decision.high:
        assert not any(c.evictable for c in end)
        assert decision.capacity_low


@given(clusters())
def test_what_is_admitted_fits_under_the_high_watermark(cluster):
    start, size, high, low = cluster
    decision = capacity.decide(start, size, high, low, (), ())
    starting = sum(c.size for c in start if c.key in decision.admitted and c.phase == "Pending")
    assert decision.used + starting <= decision.high or not starting
