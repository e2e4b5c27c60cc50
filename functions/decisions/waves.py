"""The waves of a ModelCache's rollout (spec.rollout.waves, design/rollouts.md): which wave
each target is in, which wave is current, whether it is done (its clusters Ready on the new
commit and the replicas there Ready on it for bakeTime), paused until a promote, or failed
(Halt, or Rollback to the commit served before), and the status.rollout a person reads.

Pure and deterministic: the targets, the accepted spec.rollout, the observed hydrations, the
replicas' readiness per cluster, the last status.rollout, the resolved content and `now` (in
seconds) in; a Decision out. The caller still bounds the clusters hydrating at once inside
the clusters it may start (decisions/rollout.py)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fleetcache import messages, reasons
from fleetcache.functions import read, times
from fleetcache.functions.k8s import selectors
from fleetcache.functions.views.cache_replicas import Replicas
from fleetcache.functions.views.hydration import pinned_to, serving_commit_of
from fleetcache.functions.views.model_cache import (
    COMPLETE,
    HALTED,
    PAUSED,
    PROGRESSING,
    ROLLED_BACK,
    RolloutSpec,
    RolloutStatus,
    WaveCount,
    WaveSpec,
)
from fleetcache.functions.views.placement import Target

IMPLICIT_WAVE = "rest"  # the clusters in no wave (the XRD reserves the name)

# A wave's gate verdicts.
WAITING, BAKING, DONE, FAILED = "Waiting", "Baking", "Done", "Failed"

SUMMARIES = {PAUSED: "paused at {wave}", HALTED: "halted at {wave}", ROLLED_BACK: "rolled back",
             COMPLETE: "complete"}  # Progressing: "wave 2/4"
REASONS = {PAUSED: reasons.RolloutPaused, HALTED: reasons.RolloutHalted, ROLLED_BACK: reasons.RolledBack}


# --- the assignment -------------------------------------------------------------------------


@dataclass(frozen=True)
class Wave:
    name: str
    clusters: tuple[str, ...]  # in name order
    pause: bool


@dataclass(frozen=True)
class Assignment:
    waves: tuple[Wave, ...]
    unknown: tuple[tuple[str, str], ...]  # (wave, cluster): named by a wave, not a target


def assign(targets: Sequence[Target], waves: Sequence[WaveSpec]) -> Assignment:
    """Each target in the first wave that takes it, in the waves' order: by name, by a
    selector over its FleetCluster's labels, or as `percent` of the targets no earlier wave
    took, rounded up, in name order. The targets left form a last wave, `rest`. A name that
    is not a target is reported, not fatal (the placement may have moved on)."""
    left = sorted(targets, key=lambda t: t.name)
    target_names = {t.name for t in targets}
    assigned, unknown = [], []
    for index, spec in enumerate(waves):
        if spec.cluster_names is not None:
            unknown += [(spec.name, name) for name in sorted(spec.cluster_names - target_names)]
            chosen = [t for t in left if t.name in spec.cluster_names]
        elif spec.cluster_selector is not None:
            where = f"spec.rollout.waves[{index}].clusterSelector"
            chosen = [t for t in left if selectors.selector_matches(
                spec.cluster_selector, t.cluster.labels if t.cluster else {}, where)]
        else:
            chosen = left[:math.ceil(len(left) * (spec.percent or 0) / 100)]
        taken = {t.name for t in chosen}
        left = [t for t in left if t.name not in taken]
        assigned.append(Wave(spec.name, tuple(t.name for t in chosen), spec.pause))
    if left:
        assigned.append(Wave(IMPLICIT_WAVE, tuple(t.name for t in left), False))
    return Assignment(tuple(assigned), tuple(unknown))


# --- what the gates weigh -------------------------------------------------------------------


@dataclass(frozen=True)
class Hydration:
    """A target's hydration as the rollout weighs it."""

    on_commit: bool  # pinned to the rollout's content (commit and manifest)
    phase: str  # its status.phase; "" when none is observed
    reason: str
    failed_since: float | None  # Failed: when its Hydrated condition last changed; None: unknown
    serving: str  # the last commit of this repo Ready on its volume
    content: tuple[str, str, int]  # its spec's commit, manifestDigest and bytes

    @classmethod
    def of(cls, observed: dict | None, resolved: Mapping) -> Hydration:
        """Read totally. failed_since is Crossplane's lastTransitionTime of the condition the
        hydration's composer sets (it changes with its status, reason or message: crossplane
        apis/core/v2/condition.go), so a failure from before a restart is told from a new one."""
        status = read.mapping_at(observed, "status")
        phase = status.get("phase")
        phase = phase if isinstance(phase, str) else ""
        failed_since = None
        if phase == "Failed":
            failed_since = times.seconds_of(read.condition_of(observed, "Hydrated").get("lastTransitionTime"))
        return cls(on_commit=observed is not None and pinned_to(observed, resolved), phase=phase,
                   reason=reasons.reason_or_empty(status.get("reason")), failed_since=failed_since,
                   serving=serving_commit_of(observed, str(resolved.get("repo") or "")),
                   content=(str(read.get_path(observed, "spec.commit") or ""),
                            str(read.get_path(observed, "spec.manifestDigest") or ""),
                            max(0, read.as_int(read.get_path(observed, "spec.bytes")))))

    @property
    def ready(self) -> bool:
        return self.on_commit and self.phase == "Ready"


@dataclass(frozen=True)
class Failure:
    cluster: str
    cause: str  # the hydration's or the replica's reason, else what went wrong


@dataclass(frozen=True)
class Gate:
    """Where one wave stands on the new commit."""

    verdict: str  # Waiting | Baking | Done | Failed
    ready: tuple[str, ...]  # clusters Ready on the new commit
    waiting: tuple[str, ...]  # clusters the wave still waits for (cache or replicas)
    failed: tuple[Failure, ...]
    until: float | None  # Baking: when the bake ends; Waiting: the first replica deadline


def gate(wave: Wave, targets: Mapping[str, Target], hydrations: Mapping[str, Hydration],
         replicas: Mapping[str, Replicas], settings: RolloutSpec, now: float,
         resumed: float | None) -> Gate:
    """Done once every cluster of the wave is Ready on the new commit and the replicas
    serving there have been Ready on it for bakeTime; Failed when a hydration failed on it
    or a replica on it stayed not Ready for progressDeadline (counted from the restart, if
    later; a hydration failure from before the restart is not counted again). A missing
    FleetCluster or an evicted copy holds nothing to roll out and is not waited for."""
    since_resume = -math.inf if resumed is None else resumed
    ready, waiting, failed = [], [], []
    bakes, deadlines = [], []
    for name in wave.clusters:
        hydration = hydrations[name]
        serving = replicas.get(name)
        if hydration.on_commit and hydration.phase == "Failed" and \
                (hydration.failed_since is None or hydration.failed_since >= since_resume):
            failed.append(Failure(name, hydration.reason or "hydration Failed"))
            continue
        if serving is not None and serving.not_ready_since is not None:
            deadline = max(serving.not_ready_since, since_resume) + settings.deadline_seconds
            if now >= deadline:
                failed.append(Failure(name, serving.reason or "replicas not Ready within "
                                      f"spec.rollout.progressDeadline ({duration_text(settings.deadline_seconds)})"))
                continue
            deadlines.append(deadline)
        if hydration.ready:
            ready.append(name)
            if serving is not None and serving.ready_since is None:
                waiting.append(name)
            elif serving is not None and serving.ready_since is not None:
                bakes.append(serving.ready_since + settings.bake_seconds)
        elif targets[name].cluster is not None and hydration.phase != "Evicted":
            waiting.append(name)
    if failed:
        return Gate(FAILED, tuple(ready), tuple(waiting), tuple(failed), None)
    if waiting:
        return Gate(WAITING, tuple(ready), tuple(waiting), (), min(deadlines, default=None))
    baked = max(bakes, default=now)
    return Gate(DONE if now >= baked else BAKING, tuple(ready), (), (), None if now >= baked else baked)


def duration_text(seconds: float) -> str:
    """A duration as the spec writes it: whole hours, else whole minutes."""
    return f"{int(seconds // 3600)}h" if seconds and seconds % 3600 == 0 else f"{int(seconds // 60)}m"


# --- the decision ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    assignment: Assignment
    current: int  # the current wave's index in assignment.waves
    gates: tuple[Gate, ...]  # one per wave; none without spec.rollout.waves
    may_start: frozenset[str]  # targets that may be composed on the new commit now
    roll_back: frozenset[str]  # targets to return to status.rollout.previousCommit
    status: RolloutStatus | None  # status.rollout; None without spec.rollout.waves
    wake_at: float | None  # when a bake ends or a replica's deadline passes

    @property
    def reason(self) -> str:
        """The Progressing condition's reason when the rollout holds it; "" otherwise."""
        return REASONS.get(self.status.phase, "") if self.status else ""

    def hold(self, cluster: str) -> tuple[str, str] | None:
        """Why a target the rollout does not let start keeps what it has, as its report's
        (reason, message); None for one that may start or is rolled back now."""
        if self.status is None or cluster in self.may_start or cluster in self.roll_back:
            return None
        state = self.status
        wave = next((w.name for w in self.assignment.waves if cluster in w.clusters), IMPLICIT_WAVE)
        if state.phase == PAUSED:
            return reasons.RolloutPaused, (f"waits for wave {wave}: the rollout is paused at wave {state.wave}; "
                                           f"set spec.rollout.promote to {state.wave} to go on")
        if state.phase == HALTED:
            return reasons.RolloutHalted, (f"kept on what it has: the rollout halted at wave {state.wave} "
                                           "(status.rollout.message says why)")
        if state.phase == ROLLED_BACK:
            return reasons.RolledBack, (f"kept on {state.previous_commit[:10]}: the rollout rolled back at wave "
                                        f"{state.wave} (status.rollout.message says why)")
        return "", f"waits for wave {wave}: the rollout is at wave {state.wave}"


def decide(targets: Sequence[Target], settings: RolloutSpec, observed: Mapping[str, dict | None],
           replicas: Mapping[str, Replicas], previous: Any, resolved: Mapping, now: float,
           roll_back_blocked: str = "") -> Decision:
    """Where the rollout of the `resolved` content stands and what may move now.

    observed: each target's hydration by cluster name; previous: the last status.rollout as
    observed. Without waves, today's behaviour: every target may start, nothing is gated and
    there is no status.rollout. A rollout of other content than `previous` starts afresh at
    the first wave; previousCommit is then the commit most targets serve other than the new
    one. A Halted or RolledBack rollout resumes when spec.rollout.restartedAt changes (from its
    wave, or from the first after a rollback); a Complete one stays Complete, and latches
    when it completed. roll_back_blocked: why the source cannot go back (its hydrations read
    the cache's current manifest); a Rollback then halts and says so.
    """
    names = frozenset(t.name for t in targets)
    if not settings.waves:
        return Decision(Assignment((Wave(IMPLICIT_WAVE, tuple(sorted(names)), False),), ()), 0, (),
                        names, frozenset(), None, None)
    assignment = assign(targets, settings.waves)
    hydrations = {t.name: Hydration.of(observed.get(t.name), resolved) for t in targets}
    state = RolloutStatus.of(previous)
    if state is None or (state.commit, state.manifest_digest) != (resolved["commit"], resolved["manifestDigest"]):
        state = started(assignment, hydrations, settings, resolved, now)
    if state.stale_promote and settings.promote != state.stale_promote:
        state = replace(state, stale_promote="")
    waves = assignment.waves
    index = next((i for i, w in enumerate(waves) if w.name == state.wave), 0)
    if state.phase in (HALTED, ROLLED_BACK) and settings.restarted_at \
            and settings.restarted_at != state.restarted_at:
        index = 0 if state.phase == ROLLED_BACK else index
        state = replace(state, phase=PROGRESSING, resumed=now, message="")
    state = replace(state, restarted_at=settings.restarted_at)
    by_name = {t.name: t for t in targets}
    gates = tuple(gate(w, by_name, hydrations, replicas, settings, now, state.resumed) for w in waves)
    on_commit = frozenset(n for n, h in hydrations.items() if h.on_commit)
    if state.phase in (PROGRESSING, PAUSED):
        state, index = advanced(state, index, assignment, gates, settings, on_commit, roll_back_blocked)
    if state.phase == COMPLETE and state.completed is None:
        state = replace(state, completed=now)
    touched = on_commit if state.phase == ROLLED_BACK else frozenset()
    may_start = {COMPLETE: names, HALTED: on_commit, ROLLED_BACK: frozenset()}.get(
        state.phase, on_commit | {n for w in waves[:index + 1] for n in w.clusters})
    current = waves[index]
    wake_at = gates[index].until if state.phase == PROGRESSING else None
    summary = SUMMARIES.get(state.phase, "wave {number}/{total}").format(
        wave=current.name, number=index + 1, total=len(waves))
    message = state.message if state.phase in (HALTED, ROLLED_BACK) else \
        progress_message(state, current, gates[index], settings, wake_at) + unknown_note(assignment)
    status = replace(state, wave=current.name, summary=summary,
                     waves=tuple(WaveCount(w.name, len(w.clusters), len(g.ready), len(g.failed))
                                 for w, g in zip(waves, gates, strict=True)),
                     message=messages.clipped(message, messages.MESSAGE_LIMIT))
    return Decision(assignment, index, gates, frozenset(may_start), touched, status, wake_at)


def started(assignment: Assignment, hydrations: Mapping[str, Hydration], settings: RolloutSpec,
            resolved: Mapping, now: float) -> RolloutStatus:
    """A rollout of the resolved content starting now, at the first wave: the commit most
    targets serve other than it is the one to roll back to; the promote given now was for
    an earlier rollout."""
    served = Counter(h.serving for h in hydrations.values() if h.serving and h.serving != resolved["commit"])
    previous = min(served, key=lambda c: (-served[c], c), default="")
    _, digest, size = next((hydrations[n].content for n in sorted(hydrations)
                            if previous and hydrations[n].content[0] == previous and hydrations[n].content[1]),
                           ("", "", 0))
    return RolloutStatus(commit=resolved["commit"], manifest_digest=resolved["manifestDigest"],
                         previous_commit=previous, previous_manifest_digest=digest, previous_bytes=size,
                         phase=PROGRESSING, wave=assignment.waves[0].name, waves=(), started=now,
                         resumed=None, completed=None, restarted_at=settings.restarted_at,
                         stale_promote=settings.promote, summary="", message="")


def advanced(state: RolloutStatus, index: int, assignment: Assignment, gates: Sequence[Gate],
             settings: RolloutSpec, on_commit: frozenset[str], roll_back_blocked: str) -> tuple[RolloutStatus, int]:
    """From the current wave on: past every wave done (and promoted, if it pauses), up to the
    first that waits, pauses or failed, or to the end (Complete). A failure halts, or rolls
    back when asked to and there is content to go back to."""
    waves = assignment.waves
    while index < len(waves):
        wave, verdict = waves[index], gates[index]
        if verdict.verdict == FAILED:
            blocker = rollback_blocker(state, roll_back_blocked) if settings.rollback else ""
            rollback = settings.rollback and not blocker
            phase = ROLLED_BACK if rollback else HALTED
            return replace(state, phase=phase, message=failure_message(
                state, wave, verdict, blocker, on_commit if rollback else frozenset())), index
        if verdict.verdict != DONE:
            return replace(state, phase=PROGRESSING), index
        if wave.pause and not promoted(wave, settings, state):
            return replace(state, phase=PAUSED), index
        index += 1
    return replace(state, phase=COMPLETE), max(0, len(waves) - 1)


def promoted(wave: Wave, settings: RolloutSpec, state: RolloutStatus) -> bool:
    return settings.promote == wave.name and settings.promote != state.stale_promote


def rollback_blocker(state: RolloutStatus, blocked: str) -> str:
    """Why a Rollback cannot compose the previous content; "" when it can."""
    if not state.previous_commit:
        return "no commit was served before this one"
    if not state.previous_manifest_digest:
        return (f"the content of {state.previous_commit[:10]} is unknown (no target's hydration was pinned "
                "to it when the rollout started)")
    return blocked


# --- what a person reads ----------------------------------------------------------------------


def failure_message(state: RolloutStatus, wave: Wave, verdict: Gate, blocker: str,
                    roll_back: frozenset[str]) -> str:
    """Latched while the rollout stays stopped: the wave, the failed clusters, the first
    failure's cause, what happens to the clusters on the new commit (blocker: why a Rollback
    halted instead), and what to do."""
    first = verdict.failed[0]
    failed = [f.cluster for f in verdict.failed]
    said = (f"wave {wave.name} failed on {messages.counted(len(failed), 'cluster')} "
            f"({messages.named(failed)}); first: {first.cluster}: {first.cause}")
    if roll_back:
        return reasons.with_remedy(
            f"{said}. Rolled back: {messages.counted(len(roll_back), 'cluster')} on {state.commit[:10]} "
            f"({messages.named(sorted(roll_back))}) return to {state.previous_commit[:10]}", reasons.RolledBack)
    if blocker:
        said += (f"; spec.rollout.onFailure is Rollback but {blocker}, so it halted (revert the source "
                 "to go back, or set spec.rollout.onFailure to Halt)")
    return reasons.with_remedy(f"{said}. No further wave starts", reasons.RolloutHalted)


def progress_message(state: RolloutStatus, wave: Wave, verdict: Gate, settings: RolloutSpec,
                     wake_at: float | None) -> str:
    """What a running, paused or complete rollout is at."""
    commit = state.commit[:10]
    if state.phase == COMPLETE:
        return f"every wave done: the fleet is on {commit}"
    ready = f"{len(verdict.ready)}/{len(wave.clusters)} clusters Ready on {commit}"
    if state.phase == PAUSED:
        said = f"wave {wave.name} done ({ready}); paused: set spec.rollout.promote to {wave.name} to go on"
        if settings.promote == wave.name:
            said += " (it already says so from an earlier rollout: clear it, then set it again)"
        return said
    if verdict.verdict == BAKING and wake_at is not None:
        return (f"wave {wave.name}: {ready}; its replicas bake until {times.time_at(wake_at)} "
                f"(spec.rollout.bakeTime {duration_text(settings.bake_seconds)})")
    return f"wave {wave.name}: {ready}; waiting for {messages.named(list(verdict.waiting))}"


def unknown_note(assignment: Assignment) -> str:
    if not assignment.unknown:
        return ""
    named = [f"{cluster} ({wave})" for wave, cluster in assignment.unknown]
    return f"; spec.rollout.waves names clusters outside the placement, skipped: {messages.named(named)}"
