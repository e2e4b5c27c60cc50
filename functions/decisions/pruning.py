"""The prune plan of a ModelCacheHydration's volume: which commits of its repo the volume
holds, which it keeps (the hydration's own commit, every commit a ModelReplica of this
cache on this cluster mounts, and spec.keepCommits: the previous commit a rollout in waves
may roll back to), and the prune that removes the rest once the copy is Ready.
A prune that is still running holds back a fetch of a commit it does not keep. Pure: the
status, the observed prune Job and its record in, a Pruning out."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fleetcache import messages, shapes
from fleetcache.functions import naming, protocol, read
from fleetcache.functions.k8s import agent_job, objects
from fleetcache.functions.k8s.hydration_objects import PROGRESS_KEY, PRUNE_PREFIX
from fleetcache.functions.views.hydration import MOUNTING


def mounted_commits(replicas: list | None, cluster: str, cache: str) -> frozenset[str] | None:
    """The commits replicas mount from this volume; None while that cannot be known (the
    replicas not fetched yet, or a Cache replica without a readable commit), which keeps
    every commit."""
    if replicas is None:
        return None
    mounted = set()
    for replica in replicas:
        replica_spec = read.mapping_at(replica, "spec")
        if replica_spec.get("delivery") not in MOUNTING \
                or replica_spec.get("clusterName") != cluster \
                or read.get_path(replica_spec, "cache.modelCacheName") != cache:
            continue
        commit = read.get_path(replica_spec, "cache.commit")
        if not shapes.is_resolved_commit(commit):
            return None
        mounted.add(commit)
    return frozenset(mounted)


def commits_in(values: Any) -> set[str]:
    """The full commits in a list (a latched status list, or a record's split string)."""
    return {c for c in values if shapes.is_resolved_commit(c)} \
        if isinstance(values, list) else set()


@dataclass(frozen=True)
class Pruning:
    """What the volume holds of this repo, and the prune that removes the rest."""

    stored: frozenset[str]  # commits whose snapshots are on the volume, as far as known
    keep: frozenset[str]  # what the prune keeps: empty when nothing is to be pruned
    pruned: tuple[str, ...]  # the last prune's commits (latched)
    job: agent_job.JobState

    @property
    def needed(self) -> bool:
        return bool(self.keep)

    @property
    def key(self) -> str:
        return f"{PRUNE_PREFIX}{naming.short_digest(*sorted(self.keep))}"

    def job_name(self, cache: str) -> str:
        """One Job per kept set: a Job is immutable, and a changed set is another prune."""
        return naming.child_name(cache, "prune", naming.short_digest(*sorted(self.keep)))


def plan_pruning(request: protocol.Request, repo: str, commit: str, ready: bool, existing_volume: bool,
                 mounted: frozenset[str] | None, kept: frozenset[str]) -> Pruning:
    """The volume's commits: those latched in status.storedCommits, the serving commit the
    status had, and this commit once Ready. A change of repo starts the list afresh (prune
    works on one repo). Once Ready, every stored commit no replica mounts (`mounted`) and
    the spec does not keep (`kept`, spec.keepCommits) is pruned; the prune Job's completion
    removes them from the list, so it runs once, and a kept commit stays listed while it is
    on the volume. The user's existing volume is never pruned."""
    status = request.status
    stored = set()
    if status.get("servingRepo") in (None, "", repo):
        stored = commits_in(status.get("storedCommits")) | commits_in(
            [status.get("servingCommit")])
    if ready:
        stored.add(commit)
    pruned = tuple(sorted(commits_in(status.get("prunedCommits"))))
    if not ready or mounted is None or existing_volume:  # never prune the user's
        return Pruning(frozenset(stored), frozenset(), pruned, agent_job.JobState.of({}))
    keep = frozenset({commit} | mounted | kept)
    planned = Pruning(frozenset(stored), keep, pruned, agent_job.JobState.of({}))
    job = agent_job.JobState.of(objects.remote_manifest(request.observed.get(planned.key)))
    if job.complete:
        record = objects.remote_manifest(request.observed.get(PROGRESS_KEY)).get("data")
        reported = record.get("prunedCommits") if isinstance(record, dict) else None
        gone = (stored - keep) | (commits_in(json_list(reported)) - keep)
        return Pruning(frozenset(stored & keep), frozenset(), tuple(sorted(gone)), job)
    if not stored - keep:
        return Pruning(frozenset(stored), frozenset(), pruned, job)
    return Pruning(frozenset(stored), keep, pruned, job)


def json_list(text: Any) -> list:
    """A record value the agent wrote as a JSON list (ConfigMap values are strings, like
    `compared`); anything else reads as empty."""
    if not isinstance(text, str) or len(text) > 64 * 1024:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def prune_in_flight(request: protocol.Request) -> str | None:
    """A prune Job still running: it was planned for an older set of kept commits, so a
    fetch of a commit that set does not name waits until it ends (the volume lock only
    keeps the two from overlapping; a prune that ran after the fetch would delete it)."""
    for key in sorted(request.observed):
        job = agent_job.JobState.of(objects.remote_manifest(request.observed[key]))
        if key.startswith(PRUNE_PREFIX) and not (job.complete or job.failed):
            return key
    return None


def pruning_note(pruning: Pruning) -> str:
    """A failed prune leaves the cache Ready (the commit is on the volume); it is said."""
    if not pruning.job.failed:
        return ""
    return (f"; pruning {', '.join(c[:10] for c in sorted(pruning.stored - pruning.keep))} "
            f"failed ({pruning.job.failure_reason or 'Failed'}: "
            f"{messages.clipped(pruning.job.failure_message, 120)}); delete the prune Job to retry")
