"""The waves of a rollout (functions/decisions/waves.py, design/rollouts.md): which wave each
target is in, each wave's gate, pause and promote, halt and rollback, resume, and the
status.rollout a person reads. Tables over the pure decision: targets, spec, hydrations and
replicas in, a Decision out."""

from __future__ import annotations

import copy

import pytest

from fleetcache import reasons
from fleetcache.apis import xrds
from fleetcache.apis.specs import InputError
from fleetcache.functions import times
from fleetcache.functions.decisions import waves
from fleetcache.functions.decisions.waves import Replicas
from fleetcache.functions.views import cache_replicas, model_cache, placement
from tests.support.fleet import fleet_cluster

REPO = "Qwen/Qwen3-0.6B"
OLD = "1" * 40
NEW = "2" * 40
DIGEST = "ab" * 32
RESOLVED = {"repo": REPO, "commit": NEW, "manifestDigest": DIGEST}
T0 = times.seconds_of("2026-05-01T12:00:00Z") or 0.0
MINUTE = 60.0
FLEET_NAMES = ("gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e")


def targets(names=FLEET_NAMES, labels: dict[str, dict] | None = None, missing=()) -> list[placement.Target]:
    """The placement's targets by name; `missing` are named but have no FleetCluster."""
    labels = labels or {}
    fleet = [fleet_cluster(n, labels=labels.get(n, {"gpu": "h100"})) for n in names if n not in missing]
    return placement.targets(list(names), None, fleet)


def settings(**rollout) -> model_cache.RolloutSpec:
    """spec.rollout as compose-model-cache accepts it (the XRD's defaults and rules)."""
    spec = {"grantRef": {"name": "team"}, "source": {"huggingFace": {"repo": REPO}},
            "placement": {"clusterNames": list(FLEET_NAMES)}, "rollout": rollout}
    return model_cache.rollout_of(model_cache.read_spec(spec))


CANARY = [{"name": "canary", "clusterNames": ["gpu-a"]}]
CANARY_PAUSED = [{"name": "canary", "clusterNames": ["gpu-a"], "pause": True}]


def hydration(phase: str, *, commit: str = NEW, reason: str = "", serving: str | None = None,
              changed: str = "2026-05-01T12:00:00Z") -> dict:
    """A ModelCacheHydration as observed: pinned to `commit`, in `phase`; its volume serves
    `serving` (by default the commit when Ready, else OLD)."""
    serving = serving if serving is not None else (commit if phase == "Ready" else OLD)
    return {"spec": {"commit": commit, "manifestDigest": DIGEST},
            "status": {"phase": phase, "reason": reason, "servingRepo": REPO, "servingCommit": serving,
                       "conditions": [{"type": "Hydrated", "status": str(phase == "Ready"),
                                       "reason": reason or phase, "lastTransitionTime": changed}]}}


def fleet_on_old(names=FLEET_NAMES) -> dict[str, dict]:
    return {n: hydration("Ready", commit=OLD) for n in names}


def decide(rollout: model_cache.RolloutSpec, observed: dict[str, dict | None], *, replicas=None,
           previous: dict | None = None, now: float = T0, fleet=None) -> waves.Decision:
    return waves.decide(fleet if fleet is not None else targets(), rollout, observed, replicas or {},
                        previous, RESOLVED, now)


def previous_of(decision: waves.Decision) -> dict:
    """status.rollout as the composer writes it and reads it back on the next call."""
    assert decision.status is not None
    return decision.status.as_status()


def wave_clusters(assignment: waves.Assignment) -> list[tuple[str, tuple[str, ...]]]:
    return [(w.name, w.clusters) for w in assignment.waves]


# --- the assignment ---------------------------------------------------------------------------


def test_a_wave_by_names_takes_those_targets_and_the_rest_form_the_implicit_last_wave():
    assignment = waves.assign(targets(), settings(waves=CANARY).waves)
    assert wave_clusters(assignment) == [("canary", ("gpu-a",)),
                                         ("rest", ("gpu-b", "gpu-c", "gpu-d", "gpu-e"))]


def test_a_wave_by_selector_takes_the_targets_whose_fleet_cluster_labels_match():
    fleet = targets(labels={"gpu-b": {"ring": "early"}, "gpu-d": {"ring": "early"}})
    rollout = settings(waves=[{"name": "early", "clusterSelector": {"matchLabels": {"ring": "early"}}}])
    assert wave_clusters(waves.assign(fleet, rollout.waves))[0] == ("early", ("gpu-b", "gpu-d"))


def test_a_percentage_is_of_the_targets_left_rounded_up_in_name_order():
    fleet = targets([f"gpu-{i:02}" for i in range(10)])
    rollout = settings(waves=[{"name": "canary", "clusterNames": ["gpu-07"]},
                              {"name": "half", "percent": 50}, {"name": "one", "percent": 1}])
    assert wave_clusters(waves.assign(fleet, rollout.waves)) == [
        ("canary", ("gpu-07",)),
        ("half", ("gpu-00", "gpu-01", "gpu-02", "gpu-03", "gpu-04")),  # 50 % of 9, rounded up
        ("one", ("gpu-05",)),  # 1 % of 4, rounded up
        ("rest", ("gpu-06", "gpu-08", "gpu-09")),
    ]


def test_the_assignment_follows_name_order_whatever_order_the_targets_come_in():
    fleet = targets()
    rollout = settings(waves=[{"name": "first", "percent": 40}])
    assert waves.assign(list(reversed(fleet)), rollout.waves) == waves.assign(fleet, rollout.waves)
    assert wave_clusters(waves.assign(fleet, rollout.waves))[0] == ("first", ("gpu-a", "gpu-b"))


def test_there_is_no_implicit_wave_when_the_waves_take_every_target():
    rollout = settings(waves=[{"name": "canary", "clusterNames": ["gpu-a"]}, {"name": "all", "percent": 100}])
    assert [w.name for w in waves.assign(targets(), rollout.waves).waves] == ["canary", "all"]


def test_a_cluster_named_by_two_waves_is_in_the_first():
    rollout = settings(waves=[{"name": "one", "clusterNames": ["gpu-a", "gpu-b"]},
                              {"name": "two", "clusterNames": ["gpu-b", "gpu-c"]}])
    assert wave_clusters(waves.assign(targets(), rollout.waves))[:2] == [
        ("one", ("gpu-a", "gpu-b")), ("two", ("gpu-c",))]


def test_a_named_cluster_that_is_not_a_target_is_reported_and_skipped():
    rollout = settings(waves=[{"name": "canary", "clusterNames": ["gpu-a", "gpu-zz"]}])
    assignment = waves.assign(targets(), rollout.waves)
    assert assignment.waves[0].clusters == ("gpu-a",)
    assert assignment.unknown == (("canary", "gpu-zz"),)
    decision = decide(rollout, fleet_on_old())
    assert decision.status is not None
    assert "outside the placement, skipped: gpu-zz (canary)" in decision.status.message


def test_a_selector_matching_no_target_is_an_empty_wave_that_is_done_at_once():
    rollout = settings(waves=[{"name": "none", "clusterSelector": {"matchLabels": {"ring": "x"}}}, *CANARY])
    decision = decide(rollout, fleet_on_old())
    assert decision.assignment.waves[0].clusters == ()
    assert (decision.current, decision.gates[0].verdict) == (1, waves.DONE)


# --- the spec as read -------------------------------------------------------------------------


def test_durations_are_read_in_seconds_with_the_xrd_defaults():
    rollout = settings(waves=CANARY)
    assert (rollout.bake_seconds, rollout.deadline_seconds, rollout.rollback) == (0, 1800, False)
    assert settings(bakeTime="10m", progressDeadline="2h", onFailure="Rollback").bake_seconds == 600
    assert settings(progressDeadline="2h").deadline_seconds == 7200


def test_restarted_at_is_read_as_an_rfc_3339_string():
    assert settings(restartedAt="2026-05-01T14:00:00+02:00").restarted_at == "2026-05-01T12:00:00Z"


@pytest.mark.parametrize("rollout, message", [
    ({"waves": [{"name": "canary"}]},
     "spec.rollout.waves[0]: a wave must set exactly one of clusterNames, clusterSelector or percent"),
    ({"waves": [{"name": "canary", "percent": 10, "clusterNames": ["gpu-a"]}]},
     "spec.rollout.waves[0]: a wave must set exactly one of clusterNames, clusterSelector or percent"),
    ({"waves": [{"name": "a", "percent": 101}]}, "spec.rollout.waves[0].percent: 101 must be at most 100"),
    ({"waves": [{"name": "a", "percent": 0}]}, "spec.rollout.waves[0].percent: 0 must be at least 1"),
    ({"waves": [{"name": "a", "percent": 5}, {"name": "a", "percent": 5}]},
     "spec.rollout.waves[].name values must be unique: rename the wave listed twice"),
    ({"waves": [{"name": "Canary", "percent": 5}]},
     "spec.rollout.waves[0].name: must be a DNS label (lowercase letters, digits and '-', starting and ending "
     "with a letter or digit), e.g. canary"),
    ({"waves": [{"name": "rest", "percent": 5}]},
     "spec.rollout.waves[0].name: rest is the implicit last wave (the clusters in no wave): give this wave "
     "another name"),
    ({"waves": [{"name": f"w{i}", "percent": 5} for i in range(21)]},
     "spec.rollout.waves: has more than 20 items"),
    ({"waves": CANARY, "promote": "late"},
     "spec.rollout.promote must name one of spec.rollout.waves[].name (the paused wave to go on from)"),
    ({"promote": "canary"},
     "spec.rollout.promote must name one of spec.rollout.waves[].name (the paused wave to go on from)"),
    ({"bakeTime": "10s"}, "spec.rollout.bakeTime: '10s' is not a whole number of hours or minutes, e.g. 1h or 30m"),
    ({"progressDeadline": "0m"}, "spec.rollout.progressDeadline must be longer than 0m, e.g. 30m"),
    ({"onFailure": "Retry"}, "spec.rollout.onFailure: 'Retry' is not one of Halt, Rollback"),
    ({"restartedAt": "yesterday"},
     "spec.rollout.restartedAt: 'yesterday' is not an RFC 3339 time with its zone, e.g. 2026-05-01T12:00:00Z"),
    ({"restartedAt": "2026-05-01T12:00:00"},
     "spec.rollout.restartedAt: '2026-05-01T12:00:00' is not an RFC 3339 time with its zone, e.g. "
     "2026-05-01T12:00:00Z"),
])
def test_a_bad_rollout_spec_is_one_line_naming_the_field_and_the_fix(rollout, message):
    with pytest.raises(InputError) as raised:
        settings(**rollout)
    assert str(raised.value) == message


# --- without waves: today's behaviour ---------------------------------------------------------


def test_without_waves_every_target_may_start_nothing_is_gated_and_there_is_no_status():
    decision = decide(settings(), {"gpu-a": hydration("Failed", reason="DigestMismatch")})
    assert decision.may_start == frozenset(FLEET_NAMES)
    assert (decision.gates, decision.status, decision.roll_back, decision.reason) == ((), None, frozenset(), "")
    assert wave_clusters(decision.assignment) == [("rest", FLEET_NAMES)]


# --- the gates --------------------------------------------------------------------------------


def test_a_new_rollout_starts_at_the_first_wave_and_only_its_clusters_may_start():
    decision = decide(settings(waves=CANARY), fleet_on_old())
    assert decision.may_start == {"gpu-a"}
    assert decision.status is not None
    assert (decision.status.phase, decision.status.wave, decision.status.summary) == ("Progressing", "canary",
                                                                                      "wave 1/2")
    assert decision.status.message == f"wave canary: 0/1 clusters Ready on {NEW[:10]}; waiting for gpu-a"


def test_a_wave_whose_cluster_is_not_ready_on_the_new_commit_waits():
    decision = decide(settings(waves=CANARY), {**fleet_on_old(), "gpu-a": hydration("Hydrating")})
    assert (decision.gates[0].verdict, decision.gates[0].waiting, decision.current) == (waves.WAITING, ("gpu-a",), 0)


def test_a_ready_cluster_whose_replicas_are_not_yet_on_the_new_commit_waits():
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    decision = decide(settings(waves=CANARY), observed, replicas={"gpu-a": Replicas(None, None)})
    assert (decision.gates[0].verdict, decision.gates[0].ready) == (waves.WAITING, ("gpu-a",))


def test_a_ready_wave_whose_replicas_are_ready_bakes_for_bake_time():
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    decision = decide(settings(waves=CANARY, bakeTime="10m"), observed,
                      replicas={"gpu-a": Replicas(T0 - 4 * MINUTE, None)})
    assert (decision.gates[0].verdict, decision.current, decision.wake_at) == (waves.BAKING, 0, T0 + 6 * MINUTE)
    assert decision.may_start == {"gpu-a"}
    assert decision.status is not None
    assert decision.status.message == (f"wave canary: 1/1 clusters Ready on {NEW[:10]}; its replicas bake until "
                                       "2026-05-01T12:06:00Z (spec.rollout.bakeTime 10m)")


def test_a_baked_wave_is_done_and_the_next_wave_starts():
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    decision = decide(settings(waves=CANARY, bakeTime="10m"), observed,
                      replicas={"gpu-a": Replicas(T0 - 10 * MINUTE, None)})
    assert (decision.gates[0].verdict, decision.current) == (waves.DONE, 1)
    assert decision.may_start == frozenset(FLEET_NAMES)
    assert decision.status is not None and decision.status.summary == "wave 2/2"


def test_a_cluster_without_replicas_is_gated_by_its_cache_alone():
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    decision = decide(settings(waves=CANARY, bakeTime="1h"), observed)
    assert (decision.gates[0].verdict, decision.current) == (waves.DONE, 1)


def test_a_missing_fleet_cluster_and_an_evicted_copy_are_not_waited_for():
    fleet = targets(missing=("gpu-b",))
    rollout = settings(waves=[{"name": "canary", "clusterNames": ["gpu-a", "gpu-b", "gpu-c"]}])
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready"), "gpu-b": None,
                "gpu-c": hydration("Evicted", commit=OLD, serving="")}
    decision = decide(rollout, observed, fleet=fleet)
    assert (decision.gates[0].verdict, decision.gates[0].ready, decision.current) == (waves.DONE, ("gpu-a",), 1)


def test_every_wave_done_is_complete_and_every_target_may_start():
    observed = {n: hydration("Ready") for n in FLEET_NAMES}
    decision = decide(settings(waves=CANARY), observed, replicas={"gpu-b": Replicas(T0 - MINUTE, None)})
    assert decision.status is not None
    assert (decision.status.phase, decision.status.summary, decision.status.wave) == ("Complete", "complete", "rest")
    assert decision.status.message == f"every wave done: the fleet is on {NEW[:10]}"
    assert decision.may_start == frozenset(FLEET_NAMES)
    assert decision.reason == ""


def test_a_complete_rollout_stays_complete_when_a_cluster_fails_later():
    complete = decide(settings(waves=CANARY), {n: hydration("Ready") for n in FLEET_NAMES})
    later = decide(settings(waves=CANARY), {**{n: hydration("Ready") for n in FLEET_NAMES},
                                            "gpu-a": hydration("Failed", reason="DigestMismatch")},
                   previous=previous_of(complete), now=T0 + MINUTE)
    assert later.status is not None and later.status.phase == "Complete"


# --- pause and promote ------------------------------------------------------------------------


def test_a_done_wave_that_pauses_waits_for_a_promote_before_the_next_wave():
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    decision = decide(settings(waves=CANARY_PAUSED), observed)
    assert decision.status is not None
    assert (decision.status.phase, decision.status.summary, decision.current) == ("Paused", "paused at canary", 0)
    assert decision.may_start == {"gpu-a"}
    assert decision.reason == reasons.RolloutPaused
    assert decision.status.message == (f"wave canary done (1/1 clusters Ready on {NEW[:10]}); paused: set "
                                       "spec.rollout.promote to canary to go on")


def test_a_promote_naming_the_paused_wave_starts_the_next_one():
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    paused = decide(settings(waves=CANARY_PAUSED), observed)
    promoted = decide(settings(waves=CANARY_PAUSED, promote="canary"), observed, previous=previous_of(paused),
                      now=T0 + MINUTE)
    assert promoted.status is not None
    assert (promoted.status.phase, promoted.status.summary, promoted.current) == ("Progressing", "wave 2/2", 1)
    assert promoted.may_start == frozenset(FLEET_NAMES)


def test_a_promote_naming_another_wave_does_not_lift_the_pause():
    rollout = [*CANARY_PAUSED, {"name": "late", "clusterNames": ["gpu-e"], "pause": True}]
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    paused = decide(settings(waves=rollout), observed)
    still = decide(settings(waves=rollout, promote="late"), observed, previous=previous_of(paused))
    assert still.status is not None and still.status.summary == "paused at canary"


def test_a_promote_left_from_an_earlier_rollout_is_ignored_until_it_changes():
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    stale = decide(settings(waves=CANARY_PAUSED, promote="canary"), observed)
    assert stale.status is not None and stale.status.summary == "paused at canary"
    assert stale.status.message.endswith("(it already says so from an earlier rollout: clear it, then set it again)")
    cleared = decide(settings(waves=CANARY_PAUSED), observed, previous=previous_of(stale))
    assert cleared.status is not None and cleared.status.stale_promote == ""
    promoted = decide(settings(waves=CANARY_PAUSED, promote="canary"), observed, previous=previous_of(cleared))
    assert promoted.status is not None and promoted.status.summary == "wave 2/2"


# --- failures: halt and roll back -------------------------------------------------------------


def test_a_hydration_failed_on_the_new_commit_in_the_current_wave_halts_the_rollout():
    observed = {**fleet_on_old(), "gpu-a": hydration("Failed", reason="DigestMismatch")}
    decision = decide(settings(waves=CANARY), observed)
    assert decision.status is not None
    assert (decision.status.phase, decision.status.summary, decision.reason) == \
        ("Halted", "halted at canary", reasons.RolloutHalted)
    assert decision.status.message.startswith(
        "wave canary failed on 1 cluster (gpu-a); first: gpu-a: DigestMismatch. No further wave starts. "
        + reasons.RolloutHalted.remedy[:40])
    assert (decision.may_start, decision.roll_back) == ({"gpu-a"}, frozenset())


def test_replicas_not_ready_on_the_new_commit_wait_until_the_progress_deadline():
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    decision = decide(settings(waves=CANARY), observed,
                      replicas={"gpu-a": Replicas(None, T0 - 29 * MINUTE, "CrashLoopBackOff")})
    assert (decision.gates[0].verdict, decision.wake_at) == (waves.WAITING, T0 + MINUTE)


def test_replicas_not_ready_past_the_progress_deadline_halt_the_rollout():
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    decision = decide(settings(waves=CANARY), observed,
                      replicas={"gpu-a": Replicas(None, T0 - 30 * MINUTE, "CrashLoopBackOff")})
    assert decision.status is not None and decision.status.phase == "Halted"
    assert "first: gpu-a: CrashLoopBackOff" in decision.status.message
    unexplained = decide(settings(waves=CANARY), observed, replicas={"gpu-a": Replicas(None, T0 - 30 * MINUTE)})
    assert unexplained.status is not None
    assert "first: gpu-a: replicas not Ready within spec.rollout.progressDeadline (30m)" in unexplained.status.message


def test_failures_outside_the_current_wave_are_not_counted():
    rollout = [*CANARY_PAUSED, {"name": "second", "clusterNames": ["gpu-b"]}]
    on_canary = {**fleet_on_old(), "gpu-a": hydration("Ready"),
                 "gpu-c": hydration("Failed", reason="AuthFailed")}  # in rest, not started yet
    paused = decide(settings(waves=rollout), on_canary)
    assert paused.status is not None and paused.status.phase == "Paused"
    promoted = decide(settings(waves=rollout, promote="canary"), on_canary, previous=previous_of(paused))
    canary_failed = decide(settings(waves=rollout, promote="canary"),
                           {**on_canary, "gpu-a": hydration("Failed", reason="DigestMismatch")},
                           previous=previous_of(promoted), now=T0 + MINUTE)
    assert canary_failed.status is not None
    assert (canary_failed.status.phase, canary_failed.status.wave) == ("Progressing", "second")
    assert [w.failed for w in canary_failed.status.waves] == [1, 0, 1]


def test_a_failure_while_paused_halts_the_paused_wave():
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    paused = decide(settings(waves=CANARY_PAUSED), observed)
    failed = decide(settings(waves=CANARY_PAUSED), observed, previous=previous_of(paused),
                    replicas={"gpu-a": Replicas(None, T0 - 31 * MINUTE, "EngineNotReady")})
    assert failed.status is not None and failed.status.summary == "halted at canary"


def test_with_rollback_the_clusters_on_the_new_commit_return_to_the_previous_one():
    rollout = settings(waves=[{"name": "canary", "clusterNames": ["gpu-a", "gpu-b"]}], onFailure="Rollback")
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready"), "gpu-b": hydration("Failed", reason="AuthFailed")}
    decision = decide(rollout, observed)
    assert decision.status is not None
    assert (decision.status.phase, decision.status.summary, decision.reason) == \
        ("RolledBack", "rolled back", reasons.RolledBack)
    assert decision.status.previous_commit == OLD
    assert (decision.roll_back, decision.may_start) == ({"gpu-a", "gpu-b"}, frozenset())
    assert decision.status.message.startswith(
        f"wave canary failed on 1 cluster (gpu-b); first: gpu-b: AuthFailed. Rolled back: 2 clusters on "
        f"{NEW[:10]} (gpu-a, gpu-b) return to {OLD[:10]}. ")


def test_a_rolled_back_cluster_leaves_the_list_once_it_is_back_on_the_previous_commit():
    rollout = settings(waves=CANARY, onFailure="Rollback")
    failed = decide(rollout, {**fleet_on_old(), "gpu-a": hydration("Failed", reason="AuthFailed")})
    back = decide(rollout, fleet_on_old(), previous=previous_of(failed), now=T0 + MINUTE)
    assert back.status is not None
    assert (back.status.phase, back.roll_back, back.may_start) == ("RolledBack", frozenset(), frozenset())
    assert back.status.message == previous_of(failed)["message"]


def test_rollback_with_no_commit_served_before_halts_instead():
    rollout = settings(waves=CANARY, onFailure="Rollback")
    decision = decide(rollout, {"gpu-a": hydration("Failed", reason="AuthFailed", serving="")})
    assert decision.status is not None
    assert (decision.status.phase, decision.status.previous_commit, decision.roll_back) == ("Halted", "", frozenset())
    assert "onFailure is Rollback but no commit was served before this one, so it halted" in decision.status.message


def test_a_halted_rollout_stays_halted_with_its_reason_while_restarted_at_is_unchanged():
    observed = {**fleet_on_old(), "gpu-a": hydration("Failed", reason="DigestMismatch")}
    halted = decide(settings(waves=CANARY, restartedAt="2026-05-01T11:00:00Z"), observed)
    later = decide(settings(waves=CANARY, restartedAt="2026-05-01T11:00:00Z"),
                   {**observed, "gpu-a": hydration("Ready")}, previous=previous_of(halted), now=T0 + MINUTE)
    assert later.status is not None
    assert (later.status.phase, later.status.message) == ("Halted", previous_of(halted)["message"])
    assert later.may_start == {"gpu-a"}


# --- resume -----------------------------------------------------------------------------------


def test_a_new_restarted_at_resumes_a_halted_rollout_from_its_wave():
    observed = {**fleet_on_old(), "gpu-a": hydration("Failed", reason="DigestMismatch")}
    halted = decide(settings(waves=CANARY), observed)
    resumed = decide(settings(waves=CANARY, restartedAt="2026-05-01T12:05:00Z"), observed,
                     previous=previous_of(halted), now=T0 + 5 * MINUTE)
    assert resumed.status is not None
    assert (resumed.status.phase, resumed.status.wave, resumed.status.resumed) == ("Progressing", "canary",
                                                                                   T0 + 5 * MINUTE)
    assert resumed.gates[0].verdict == waves.WAITING  # its failure from before is not counted again


def test_after_a_resume_a_new_failure_halts_again():
    halted = decide(settings(waves=CANARY), {**fleet_on_old(), "gpu-a": hydration("Failed", reason="AuthFailed")})
    restart = settings(waves=CANARY, restartedAt="2026-05-01T12:05:00Z")
    resumed = decide(restart, {**fleet_on_old(), "gpu-a": hydration("Hydrating")}, previous=previous_of(halted),
                     now=T0 + 5 * MINUTE)
    again = decide(restart, {**fleet_on_old(), "gpu-a": hydration("Failed", reason="AuthFailed",
                                                                  changed="2026-05-01T12:07:00Z")},
                   previous=previous_of(resumed), now=T0 + 8 * MINUTE)
    assert again.status is not None and again.status.phase == "Halted"


def test_after_a_resume_replicas_get_a_new_progress_deadline():
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    late = {"gpu-a": Replicas(None, T0 - 40 * MINUTE, "CrashLoopBackOff")}
    halted = decide(settings(waves=CANARY), observed, replicas=late)
    resumed = decide(settings(waves=CANARY, restartedAt="2026-05-01T12:00:00Z"), observed, replicas=late,
                     previous=previous_of(halted))
    assert resumed.status is not None and resumed.status.phase == "Progressing"
    assert resumed.wake_at == T0 + 30 * MINUTE


def test_a_new_restarted_at_retries_a_rolled_back_rollout_from_the_first_wave():
    rollout = [*CANARY, {"name": "second", "clusterNames": ["gpu-b"]}]
    halted_in_second = {**fleet_on_old(), "gpu-a": hydration("Ready"),
                        "gpu-b": hydration("Failed", reason="AuthFailed")}
    rolled_back = decide(settings(waves=rollout, onFailure="Rollback"), halted_in_second)
    assert rolled_back.status is not None and rolled_back.status.wave == "second"
    retried = decide(settings(waves=rollout, onFailure="Rollback", restartedAt="2026-05-01T12:05:00Z"),
                     fleet_on_old(), previous=previous_of(rolled_back), now=T0 + 5 * MINUTE)
    assert retried.status is not None
    assert (retried.status.phase, retried.status.wave, retried.may_start) == ("Progressing", "canary", {"gpu-a"})


def test_restarted_at_does_not_restart_a_rollout_that_did_not_stop():
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    paused = decide(settings(waves=CANARY_PAUSED), observed)
    bumped = decide(settings(waves=CANARY_PAUSED, restartedAt="2026-05-01T12:05:00Z"), observed,
                    previous=previous_of(paused))
    assert bumped.status is not None
    assert (bumped.status.phase, bumped.status.resumed, bumped.status.restarted_at) == \
        ("Paused", None, "2026-05-01T12:05:00Z")


# --- a new commit, and status.rollout ---------------------------------------------------------


def test_new_content_starts_a_new_rollout_from_the_commit_most_clusters_serve():
    complete = decide(settings(waves=CANARY), {n: hydration("Ready") for n in FLEET_NAMES})
    newer = {**RESOLVED, "commit": "3" * 40}
    decision = waves.decide(targets(), settings(waves=CANARY), {n: hydration("Ready") for n in FLEET_NAMES}, {},
                            previous_of(complete), newer, T0 + 60 * MINUTE)
    assert decision.status is not None
    assert (decision.status.commit, decision.status.previous_commit, decision.status.phase,
            decision.status.started) == ("3" * 40, NEW, "Progressing", T0 + 60 * MINUTE)
    assert decision.may_start == {"gpu-a"}


def test_a_rollout_in_flight_keeps_its_start_and_previous_commit():
    first = decide(settings(waves=CANARY), fleet_on_old())
    later = decide(settings(waves=CANARY), {**fleet_on_old(), "gpu-a": hydration("Hydrating")},
                   previous=previous_of(first), now=T0 + 10 * MINUTE)
    assert later.status is not None
    assert (later.status.started, later.status.previous_commit) == (T0, OLD)


def test_a_malformed_status_rollout_starts_the_rollout_afresh():
    first = decide(settings(waves=CANARY), fleet_on_old())
    for broken in ({**previous_of(first), "phase": "Exploded"}, {**previous_of(first), "startedTime": "x"}, "x"):
        again = decide(settings(waves=CANARY), fleet_on_old(), previous=broken, now=T0 + MINUTE)
        assert again.status is not None and again.status.started == T0 + MINUTE


def test_status_rollout_counts_each_waves_clusters_ready_and_failed():
    rollout = settings(waves=[{"name": "canary", "clusterNames": ["gpu-a", "gpu-b"]}])
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready")}
    decision = decide(rollout, observed)
    assert previous_of(decision)["waves"] == [{"name": "canary", "clusters": 2, "ready": 1, "failed": 0},
                                              {"name": "rest", "clusters": 3, "ready": 0, "failed": 0}]


def test_status_rollout_as_written_reads_back_the_same_and_the_xrd_keeps_it():
    decision = decide(settings(waves=CANARY_PAUSED, restartedAt="2026-05-01T11:00:00Z"),
                      {**fleet_on_old(), "gpu-a": hydration("Ready")})
    written = previous_of(decision)
    assert model_cache.RolloutStatus.of(copy.deepcopy(written)) == decision.status
    xr = {"apiVersion": "fleetcache.dev/v1alpha1", "kind": "ModelCache",
          "metadata": {"name": "qwen", "namespace": "ml"},
          "spec": {"grantRef": {"name": "team"}, "source": {"huggingFace": {"repo": REPO}},
                   "placement": {"clusterNames": list(FLEET_NAMES)}},
          "status": {"rollout": written}}
    assert xrds.violations(xr) == []


@pytest.mark.parametrize("observed, wave_specs, replicas, summary", [
    ({"gpu-a": "Hydrating"}, [*CANARY, {"name": "b", "clusterNames": ["gpu-b"]}, {"name": "c", "percent": 50}],
     {}, "wave 1/4"),
    ({"gpu-a": "Ready"}, [*CANARY, {"name": "b", "clusterNames": ["gpu-b"]}, {"name": "c", "percent": 50}],
     {}, "wave 2/4"),
    ({"gpu-a": "Ready"}, CANARY_PAUSED, {}, "paused at canary"),
    ({"gpu-a": "Failed"}, CANARY, {}, "halted at canary"),
    ({"gpu-a": "Ready"}, CANARY, {"gpu-a": Replicas(None, T0 - 31 * MINUTE)}, "halted at canary"),
    ({n: "Ready" for n in FLEET_NAMES}, CANARY, {}, "complete"),
])
def test_the_rollout_column_says_where_the_rollout_stands(observed, wave_specs, replicas, summary):
    decision = decide(settings(waves=wave_specs), {**fleet_on_old(), **{n: hydration(p) for n, p in observed.items()}},
                      replicas=replicas)
    assert decision.status is not None and decision.status.summary == summary


def test_the_same_inputs_give_the_same_decision():
    observed = {**fleet_on_old(), "gpu-a": hydration("Ready"), "gpu-b": hydration("Failed", reason="AuthFailed")}
    rollout = settings(waves=[{"name": "canary", "clusterNames": ["gpu-a", "gpu-b"]}], onFailure="Rollback")
    assert decide(rollout, observed) == decide(rollout, copy.deepcopy(observed))


# --- what the wiring reads back: the previous content, completion, why a target waits ------------


def test_the_previous_content_is_latched_from_a_target_pinned_to_the_previous_commit():
    observed = {n: {**hydration("Ready", commit=OLD), "spec": {"commit": OLD, "manifestDigest": "cd" * 32,
                                                               "bytes": 7}} for n in FLEET_NAMES}
    decision = decide(settings(waves=CANARY), observed)
    assert decision.status is not None
    assert (decision.status.previous_manifest_digest, decision.status.previous_bytes) == ("cd" * 32, 7)


def test_rollback_with_the_previous_content_unknown_halts_and_says_so():
    observed = {**{n: {**hydration("Ready", commit=OLD), "spec": {"commit": OLD}} for n in FLEET_NAMES},
                "gpu-a": hydration("Failed", reason="AuthFailed")}
    decision = decide(settings(waves=CANARY, onFailure="Rollback"), observed)
    assert decision.status is not None and decision.status.phase == "Halted"
    assert f"onFailure is Rollback but the content of {OLD[:10]} is unknown" in decision.status.message


def test_rollback_the_source_cannot_make_halts_with_the_callers_reason():
    observed = {**fleet_on_old(), "gpu-a": hydration("Failed", reason="AuthFailed")}
    decision = waves.decide(targets(), settings(waves=CANARY, onFailure="Rollback"), observed, {}, None,
                            RESOLVED, T0, "the source pins its manifest")
    assert decision.status is not None and decision.status.phase == "Halted"
    assert "onFailure is Rollback but the source pins its manifest, so it halted" in decision.status.message


def test_the_time_a_rollout_completed_is_latched_once():
    observed = {n: hydration("Ready") for n in FLEET_NAMES}
    complete = decide(settings(waves=CANARY), observed)
    later = decide(settings(waves=CANARY), observed, previous=previous_of(complete), now=T0 + MINUTE)
    assert later.status is not None and later.status.completed == T0
    assert previous_of(later)["completedTime"] == "2026-05-01T12:00:00Z"


@pytest.mark.parametrize("observed, rollout, reason, said", [
    (fleet_on_old(), CANARY, "", "waits for wave rest: the rollout is at wave canary"),
    ({**fleet_on_old(), "gpu-a": hydration("Ready")}, CANARY_PAUSED, reasons.RolloutPaused,
     "waits for wave rest: the rollout is paused at wave canary; set spec.rollout.promote to canary to go on"),
    ({**fleet_on_old(), "gpu-a": hydration("Failed", reason="AuthFailed")}, CANARY, reasons.RolloutHalted,
     "kept on what it has: the rollout halted at wave canary (status.rollout.message says why)"),
])
def test_a_target_that_may_not_start_is_told_why(observed, rollout, reason, said):
    assert decide(settings(waves=rollout), observed).hold("gpu-b") == (reason, said)


def test_a_target_that_may_start_is_not_held():
    assert decide(settings(waves=CANARY), fleet_on_old()).hold("gpu-a") is None


# --- the replicas as the composer reads them (views/cache_replicas.py) ---------------------------


def replica(cluster: str, commit: str, ready: bool, since: str = "2026-05-01T12:00:00Z", cache: str = "qwen",
            reason: str = "Starting") -> dict:
    """A replica on `commit` whose engine serves it (status.servingCommit, the Serving condition)
    and is Ready or not since `since`."""
    return {"metadata": {"creationTimestamp": "2026-05-01T11:00:00Z"},
            "spec": {"clusterName": cluster, "cache": {"modelCacheName": cache, "commit": commit}},
            "status": {"reason": reason, "servingCommit": commit, "model": {"revision": commit},
                       "conditions": [
                           {"type": "Ready", "status": str(ready), "lastTransitionTime": since},
                           {"type": "Serving", "status": "True", "lastTransitionTime": since}]}}


@pytest.mark.parametrize("found, expected", [
    ([replica("a", NEW, True, "2026-05-01T12:00:00Z"), replica("a", NEW, True, "2026-05-01T12:05:00Z")],
     Replicas(T0 + 5 * MINUTE, None)),
    ([replica("a", NEW, True), replica("a", OLD, True)], Replicas(None, None)),
    ([replica("a", NEW, False, "2026-05-01T12:03:00Z"), replica("a", NEW, False, "2026-05-01T12:01:00Z",
                                                                reason="ProgressDeadlineExceeded")],
     Replicas(None, T0 + MINUTE, "ProgressDeadlineExceeded")),
    ([replica("a", NEW, True, cache="other")], None),
    ([{"spec": {"clusterName": "a", "delivery": "Wait"}}], None),
])
def test_a_clusters_replicas_are_ready_on_the_new_commit_since_the_last_of_them(found, expected):
    assert cache_replicas.by_cluster(found, "qwen", NEW, T0 + 10 * MINUTE).get("a") == expected


def test_a_replica_not_ready_without_a_transition_time_counts_from_its_creation():
    found = [replica("a", NEW, False, reason="")]
    del found[0]["status"]["conditions"][0]["lastTransitionTime"]
    assert cache_replicas.by_cluster(found, "qwen", NEW, T0).get("a") == Replicas(None, T0 - 60 * MINUTE)
