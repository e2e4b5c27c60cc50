"""What other composers read of a ModelCacheHydration: where the cache stands on its
cluster (phase, progress, reason, message), which content it is pinned to, the commit its
volume still serves, and whether its copy lapsed or was evicted. compose-model-cache and
compose-model-deployment read a cluster's standing the same way, through `report_of`."""

from __future__ import annotations

from dataclasses import dataclass

from fleetcache import messages, reasons, shapes
from fleetcache.functions import read
from fleetcache.functions.views.placement import Target

PHASES = ("Failed", "Hydrating", "Pending", "Evicted", "Ready")  # also the order rows are listed in
BYTES_FROM = ("Origin", "Mirror", "Volume")


@dataclass
class ClusterReport:
    """One target cluster's standing on the resolved content (a ModelCache's
    status.clusters row)."""

    name: str
    phase: str = "Pending"
    bytes_done: int = 0
    bytes_total: int = 0
    reason: str = ""
    message: str = ""
    serving_commit: str = ""  # the last commit Ready on the volume, while another is not
    lapsed: bool = False  # ttlAfterLastUse passed unmounted: unpinned until a replica returns
    bytes_from: str = ""  # Origin | Mirror | Volume, from the hydration's status

    @property
    def serving_previous(self) -> bool:
        """Not Ready on the resolved commit, but an earlier one can be mounted there."""
        return self.phase != "Ready" and bool(self.serving_commit)

    def as_status(self) -> dict:
        return {"name": self.name, "phase": self.phase, "bytesDone": self.bytes_done,
                "bytesTotal": self.bytes_total, "reason": self.reason, "message": self.message,
                "servingCommit": self.serving_commit, "lapsed": self.lapsed,
                **({"bytesFrom": self.bytes_from} if self.bytes_from else {})}


def is_lapsed(hydration: dict | None) -> bool:
    return read.get_path(hydration, "status.lapsed") is True


def is_evicted(hydration: dict | None) -> bool:
    return read.get_path(hydration, "status.phase") == "Evicted"


def serving_commit_of(observed: dict | None, repo: str) -> str:
    """The hydration's latched servingCommit, if it is a snapshot of the repo served now
    (a changed repo leaves the old model's snapshot on the volume, but it is another model)."""
    status = read.get_path(observed, "status")
    if not isinstance(status, dict) or status.get("servingRepo") != repo:
        return ""
    commit = status.get("servingCommit")
    return commit if shapes.is_resolved_commit(commit) else ""


def pinned_to(observed: dict | None, resolved: dict) -> bool:
    """The hydration fetches exactly the resolved content: the commit and the manifest
    (the same commit with other patterns is other content)."""
    return (read.get_path(observed, "spec.commit") == resolved.get("commit")
            and read.get_path(observed, "spec.manifestDigest") == resolved.get("manifestDigest"))


def report_of(target: Target, observed: dict | None, resolved_bytes: int,
              resolved: dict, repo: str) -> ClusterReport:
    """Where one cluster stands on the `resolved` content, from its hydration's own status.

    A hydration still pinned to other content (queued for a rollout slot, or re-pinned in
    this very call) is Pending: its Ready speaks of a snapshot the replicas of the
    resolved commit cannot use. What it can still serve is in serving_commit.
    """
    report = ClusterReport(target.name, bytes_total=resolved_bytes)
    if target.cluster is None:
        report.reason = reasons.ClusterNotFound
        report.message = reasons.with_remedy(f"FleetCluster {target.name} does not exist",
                                             reasons.ClusterNotFound)
        return report
    if observed is not None:
        report.lapsed = is_lapsed(observed)
        # An evicted copy's volume is deleted: nothing is left there to serve.
        report.serving_commit = "" if is_evicted(observed) else serving_commit_of(observed, repo)
    if observed is None or (resolved.get("commit") and not pinned_to(observed, resolved)):
        if not target.ready:
            report.reason = reasons.ClusterNotReady
            report.message = reasons.with_remedy(f"FleetCluster {target.name} is not Ready",
                                                 reasons.ClusterNotReady)
        return report
    status = read.mapping_at(observed, "status")
    progress = read.mapping_at(status, "progress")
    phase = status.get("phase")
    report.phase = phase if phase in PHASES else "Pending"
    report.bytes_total = max(0, read.as_int(progress.get("bytesTotal"), resolved_bytes)) \
        or resolved_bytes
    report.bytes_done = (report.bytes_total if report.phase == "Ready"
                         else max(0, read.as_int(progress.get("bytesDone"))))
    report.reason = reasons.reason_or_empty(status.get("reason"))
    report.message = messages.clipped(status.get("message") or "")
    bytes_from = status.get("bytesFrom")
    report.bytes_from = bytes_from if bytes_from in BYTES_FROM else ""
    return report
