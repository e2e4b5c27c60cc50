"""What the warmers of one hydration report (node_tier/warmers.py, step 2): the warmer
DaemonSet's own numbers and the per-node records its pods write into the status ConfigMap,
counted for one commit (design/node-tier.md §3.4).

Nothing here trusts a record: a garbage record is skipped, every count is clamped to the
DaemonSet's own numbers, and a failure's message is cut to size."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from fleetcache import messages, reasons
from fleetcache.functions import protocol, read
from fleetcache.functions.k8s import agent_job, objects
from fleetcache.functions.node_tier.warmer_names import STATUS_KEY, WARMER_KEY

RECORD_PHASES = ("Waiting", "Copying", "Ready", "Failed")
RECORD_LIMIT = 4096  # characters of one node's record (~200 written): longer is garbage
FAILURE_MESSAGE_LIMIT = 120


@dataclass(frozen=True)
class Counts:
    observed: bool  # the DaemonSet reported its status
    desired: int = 0
    ready: int = 0
    downloading: int = 0
    failed: int = 0
    min_free: int | None = None
    first_failure: dict | None = None

    @property
    def pending(self) -> int:
        return self.desired - self.ready - self.downloading - self.failed

    def as_status(self) -> dict:
        status = {"desiredNodes": self.desired, "readyNodes": self.ready,
                  "downloadingNodes": self.downloading, "failedNodes": self.failed,
                  "pendingNodes": self.pending, "summary": f"{self.ready}/{self.desired}"}
        if self.min_free is not None:
            status["minFreeBytes"] = self.min_free
        if self.first_failure:
            status["firstFailure"] = self.first_failure
        return status


def records_of(configmap: Mapping, commit: str) -> dict[str, dict]:
    """The per-node records of `commit`, by node; whatever is not a record is skipped."""
    data = configmap.get("data")
    records = {}
    for node, text in (data.items() if isinstance(data, Mapping) else ()):
        if not isinstance(text, str) or len(text) > RECORD_LIMIT or not read.name_or_empty(node):
            continue
        try:
            record = json.loads(text)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("phase") in RECORD_PHASES \
                and record.get("commit") == commit:
            records[node] = record
    return records


def count(request: protocol.Request, commit: str) -> Counts:
    """design/node-tier.md §3.4: desired is the DaemonSet's (a node that leaves the pool or
    disappears loses its pod at once); ready is at most the DaemonSet's numberReady (a
    NotReady node's stale record does not count); each count is clamped to what is left
    of desired, so records that outlive their node never count."""
    daemonset = read.mapping_at(objects.remote_manifest(request.observed.get(WARMER_KEY)), "status")
    if "desiredNumberScheduled" not in daemonset:
        return Counts(observed=False)
    desired = max(0, read.as_int(daemonset.get("desiredNumberScheduled")))
    records = records_of(objects.remote_manifest(request.observed.get(STATUS_KEY)), commit)
    phases = [r["phase"] for r in records.values()]
    ready = min(phases.count("Ready"), max(0, read.as_int(daemonset.get("numberReady"))),
                desired)
    downloading = min(phases.count("Waiting") + phases.count("Copying"), desired - ready)
    failed = min(phases.count("Failed"), desired - ready - downloading)
    free = [read.as_int(r.get("freeBytes"), -1) for r in records.values()]
    first = next((node for node in sorted(records) if records[node]["phase"] == "Failed"), None)
    failure = None
    if failed and first is not None:
        record = records[first]
        reason = reasons.reason_or_empty(record.get("reason")) or "Failed"
        failure = {"node": first, "reason": reason, "message": messages.clipped(
            agent_job.agents_own_words(record.get("message"), reason), FAILURE_MESSAGE_LIMIT)}
    return Counts(True, desired, ready, downloading, failed,
                  min((f for f in free if f >= 0), default=None), failure)
