"""Every reason fleetcache reports, defined once: its name (the string conditions and statuses
carry), where a user sees it, what to do about it, and for the agent's failures the exit code
and when it is retried (DESIGN §4).

Call sites name the entry (`reasons.HydrationFailed`), never a string: a `Reason` is the str
of its name, so it goes into a condition or a status as it is. The README's troubleshooting
table is made from this registry (`python -m fleetcache.devtools.docs`), and
fleetcache/exitcodes.py is its exit-code view."""

from __future__ import annotations

import re
from typing import Any

REASON_SHAPE = re.compile(r"[A-Z][A-Za-z0-9]{0,63}")  # what the API server takes as a condition reason


class Reason(str):
    """A reason: the str of its name, with where it shows and its remedy. Defining one
    registers it; a name is defined once."""

    where: str
    remedy: str
    exit_code: int | None
    permanent: bool | None
    retried: str  # when it runs again by itself ("" where that is no question)

    def __new__(cls, name: str, *, where: str, remedy: str, exit_code: int | None = None,
                permanent: bool | None = None, retried: str | None = None) -> Reason:
        if not REASON_SHAPE.fullmatch(name) or name in REGISTRY:
            raise ValueError(f"reason {name!r} is not CamelCase or is defined twice")
        reason = super().__new__(cls, name)
        reason.where, reason.remedy = where, remedy
        reason.exit_code, reason.permanent = exit_code, permanent
        if retried is None:
            retried = "" if permanent is None else AFTER_TTL if permanent else WITHIN_JOB
        reason.retried = retried
        REGISTRY[name] = reason
        return reason

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return entry, (str(self),)  # a copy or a pickle is the one entry


REGISTRY: dict[str, Reason] = {}


def entry(name: str) -> Reason:
    return REGISTRY[name]


def remedy(reason: str) -> str:
    """The remedy of a reason read from input (an agent's record, another composite's status):
    "" for a name fleetcache does not define."""
    found = REGISTRY.get(reason)
    return found.remedy if found else ""


def with_remedy(message: str, reason: str) -> str:
    """A status message that says what happened and then what to do."""
    fix = remedy(reason)
    if not fix or fix.rstrip(".") in message:  # said already (perhaps before a final period)
        return message
    return f"{message.rstrip('.')}. {fix}" if message else fix


def reason_or_empty(value: Any) -> str:
    """A reason read from input (the agent's record, a hydration's status) if it has a
    reason's shape (CamelCase, at most 64 characters), else "": a hostile string must not
    become a condition reason the API server refuses."""
    return value if isinstance(value, str) and REASON_SHAPE.fullmatch(value) else ""


# Where the same places show several reasons.
AGENT = ("`kubectl get modelcachehydrations` (REASON), the hydration's `status.message`; during resolve the "
         "ModelCache `Resolved` condition")
PLACEMENT = "ModelDeployment `status.placements[].reason`"
REPLICA = "ModelReplica `status.reason` and `status.message` (`kubectl describe modelreplica`)"
NODE_TIER = "ModelCacheHydration `status.nodeTier.reason` (NODES column: ready/desired nodes)"

# When a failed agent Job runs again (design/composers.md): a permanent exit code fails the
# Job at once (podFailurePolicy), a transient one after spec.job.backoffLimit more pods; the
# failed Job stays composed, Kubernetes deletes it ttlSecondsAfterFinished after it ended,
# and provider-kubernetes then creates it again.
AFTER_TTL = ("after the Job's TTL (spec.job.ttlSecondsAfterFinished, 1h by default): Kubernetes deletes the "
             "failed Job and provider-kubernetes creates it again")
WITHIN_JOB = ("yes, within the Job (spec.job.backoffLimit more pods, 3 by default); once they are spent, after "
              "the Job's TTL (1h by default)")
# Deleting the failed Job retries before its TTL. Its namespace on the cluster is the
# ModelCache's, its labels functions/k8s/hydration_objects.py labels_for's.
DELETE_HYDRATION_JOB = ("kubectl --context <cluster> -n <namespace> delete job -l "
                        "fleetcache.dev/model-cache=<cache>,app.kubernetes.io/component=hydration")
RETRY_NOW = (f"delete the failed Job on the target cluster to retry before its TTL ({DELETE_HYDRATION_JOB}); "
             "provider-kubernetes creates it again at its next poll")


# --- The agent's failures: the exit-code table (DESIGN §4)

AuthFailed = Reason(
    "AuthFailed", exit_code=10, permanent=True,
    where=AGENT,
    remedy="The source or the fleet mirror refused the credentials. Hub: the Secret named by "
           "spec.source.huggingFace.tokenSecretRef must hold a valid token with read access (for a gated model, its "
           "account must accept the model's terms). S3: the keys in spec.source.s3.credentialsSecretRef (unset: the "
           "cluster's own identity) need s3:ListBucket and s3:GetObject on the bucket, and the mirror's "
           "(spec.distribution.mirror.s3 or regions[].s3 credentialsSecretRef) also s3:PutObject for the publisher. "
           "OCI: the Docker config in spec.source.oci.pullSecretRef must hold credentials for the reference's "
           "registry host with pull access, and spec.distribution.mirror.oci.pushSecretRef push access to the "
           "mirror's repository.")
SourceNotFound = Reason(
    "SourceNotFound", exit_code=11, permanent=True,
    where=AGENT,
    remedy="Check where the source points: spec.source.huggingFace.repo, revision and endpoint (a private repo needs "
           "spec.source.huggingFace.tokenSecretRef), or spec.source.s3.bucket, prefix, region and endpoint (an "
           "object version pinned at resolve and deleted since must be restored), or spec.source.oci.reference (its "
           "tag, or the digest pinned at resolve, which the registry must keep: a registry garbage collection may "
           "have deleted an untagged manifest); for a publisher, the mirror's bucket or repository "
           "(spec.distribution.mirror).")
DigestMismatch = Reason(
    "DigestMismatch", exit_code=12, permanent=True,
    where=AGENT,
    remedy="The bytes served did not match the digest pinned at resolve, even after retries; nothing unverified was "
           "published. Check the mirror or proxy between the cluster and the source "
           "(spec.source.huggingFace.endpoint, spec.source.s3.endpoint, the registry of spec.source.oci.reference, "
           "whose stored blob may be corrupt); an S3 object overwritten since resolve "
           "needs its resolved content back, or versioning on the bucket so the pinned version stays readable. Then "
           + RETRY_NOW + ".")
InsufficientCapacity = Reason(
    "InsufficientCapacity", exit_code=13, permanent=True,
    where=AGENT,
    remedy="The volume cannot hold the model: raise spec.storage.size (or the FleetCluster's spec.cache.capacity), "
           "or free space on the volume.")
InvalidSource = Reason(
    "InvalidSource", exit_code=14, permanent=True,
    where=AGENT + "; the ModelCache `Resolved` condition when the patterns select no file",
    remedy="The source's listing (Hub repository, S3 prefix, or the volume's manifest) has an unsafe or malformed "
           "entry (absolute path, '..', symlink escape, bad size or duplicate path), or no file that "
           "spec.source.allowPatterns and ignorePatterns select; fleetcache refuses it rather than sanitize it or "
           "call an empty cache Ready. Fix the patterns or the source (its files or S3 keys), or pin another "
           "revision.")
InvalidConfiguration = Reason(
    "InvalidConfiguration", exit_code=15, permanent=True,
    where=AGENT,
    remedy="The agent was started with invalid arguments: check the spec fields it names and that the agent image "
           "matches the function's version.")
StagerBusy = Reason(
    "StagerBusy", exit_code=16, permanent=False,
    where=AGENT,
    remedy="Another writer holds the cache volume; the Job retries on its own. If it persists, look for another "
           "fleetcache Job on that cluster writing to the same volume.")
SourceUnreachable = Reason(
    "SourceUnreachable", exit_code=17, permanent=False,
    where=AGENT,
    remedy="The source or the fleet mirror could not be reached (resets, timeouts, 5xx) after retries; the Job "
           "retries on its own. Check the cluster's egress to the endpoint the message names: "
           "spec.source.huggingFace.endpoint (or set it to a reachable Hub mirror), spec.source.s3.endpoint and "
           "region, the registry host of spec.source.oci.reference (plainHTTP for a registry without TLS), or the "
           "mirror's (spec.distribution.mirror).")
RateLimited = Reason(
    "RateLimited", exit_code=18, permanent=False,
    where=AGENT,
    remedy="The source or the fleet mirror asked the agent to slow down (Hub 429, S3 503 SlowDown, a registry's "
           "429); the Job retries on its own. Lower spec.rollout.maxConcurrent or spec.agent.concurrency; for the "
           "Hub, set spec.source.huggingFace.tokenSecretRef (higher limits) or a fleet mirror "
           "(spec.distribution.mirror) so one cluster downloads.")
CacheCorrupted = Reason(
    "CacheCorrupted", exit_code=19, permanent=True,
    retried="no: only `fleetcache-agent verify`, run by hand, exits 19; a fetch repairs the files instead",
    where="`fleetcache-agent verify` (its exit code and last line); the next hydration fetch repairs the files "
          "instead of failing",
    remedy="Files on the cache volume no longer match the digests they were verified against (the volume changed "
           "after hydration, not the source). The next fetch on the volume re-hashes them and downloads the "
           "corrupt ones again, so re-run the hydration: a Failed one fetches again after its Job's TTL, or sooner "
           f"once you delete the Job on its cluster ({DELETE_HYDRATION_JOB}); a Ready one has no Job left: it "
           "fetches with its next commit, or delete its ModelCacheHydration to recreate the volume and fetch it "
           "whole. If it recurs, check the storage behind the volume.")
MirrorIncomplete = Reason(
    "MirrorIncomplete", exit_code=20, permanent=True,
    where=AGENT,
    remedy="The fleet mirror has no complete, verified copy of this content (its manifest or a blob is missing, or a "
           "blob does not match the resolved digest) and spec.distribution.mirror.onMissing is Fail. Let the "
           "publishing cluster finish (status.mirror.published), or set onMissing: Origin to fetch what is missing "
           "from the source and re-publish it.")
SourceVolumeMismatch = Reason(
    "SourceVolumeMismatch", exit_code=21, permanent=True,
    where=AGENT,
    remedy="The existing volume named by spec.source.volume.claimName does not hold the files its manifest pins (the "
           "message names up to 5: missing, another size, or other bytes); fleetcache never writes that volume. Copy "
           "the right files into it (at spec.source.volume.subPath), or fix the manifest, then "
           + RETRY_NOW + ".")
NodeCacheNotDedicated = Reason(
    "NodeCacheNotDedicated", exit_code=22, permanent=True,
    retried="yes: the node's warmer (a DaemonSet pod, not a Job) checks again every minute",
    where="the hydration's `status.nodeTier.firstFailure` (node, reason, message) and that node's record in the "
          "`<cache>-node-status` ConfigMap",
    remedy="The node cache path is not the root of its own filesystem, so warming it would fill the node's root disk "
           "(DiskPressure evictions). Mount a dedicated disk at the FleetCluster's spec.nodeCache.path on every pool "
           "node, or remove the node's opt-in label.")
# The agent's one reason that is not a failure: a signal stopped it (it exits 128 + the signal).
Interrupted = Reason(
    "Interrupted",
    retried="yes, within the Job: its next pod resumes (a drain or preemption does not count against "
            "spec.job.backoffLimit)",
    where="ModelCacheHydration REASON or `status.message` (the last attempt's)",
    remedy="The agent was stopped (SIGINT/SIGTERM: a node drain, a deleted pod) and kept what it had verified; the "
           "Job's next attempt resumes. If it repeats, look for what evicts the pod.")


# --- Placement, sources and the agent Job, as the composers report them

AwaitingManifest = Reason(
    "AwaitingManifest",
    where="ModelCacheHydration `status.reason` (S3 and existing-volume sources)",
    remedy="None: an S3 or existing-volume source is fetched or verified against the manifest its ModelCache latched "
           "(status.resolved.manifest); if it lasts, check that the ModelCache is Resolved on this commit (kubectl "
           "describe modelcache).")
WaitingForMirror = Reason(
    "WaitingForMirror",
    where="ModelCache `status.clusters[].reason` and `status.mirror` (who publishes)",
    remedy="None: the publishing cluster (the ModelCache's status.mirror.publisher) fetches this commit from the "
           "origin and publishes it to spec.distribution.mirror first; the others then read the mirror. If it lasts, "
           "see the publisher's ModelCacheHydration.")
ClusterNotReady = Reason(
    "ClusterNotReady",
    where="ModelCache `status.clusters[].reason`, ModelCacheHydration and ModelReplica `status.reason`; `kubectl "
          "describe fleetcluster`",
    remedy="Wait for the FleetCluster to become Ready, or check its ProviderConfig credentials (kubectl describe "
           "fleetcluster).")
ClusterNotFound = Reason(
    "ClusterNotFound",
    where="ModelCache `Degraded` and `Progressing` conditions and `status.clusters[].reason`, ModelCacheHydration "
          "and ModelReplica `status.reason`",
    remedy="Create the FleetCluster, or fix the name in spec.placement.clusterNames.")
NoClusters = Reason(
    "NoClusters",
    where="ModelCache `Progressing` condition; ModelDeployment `ReplicasScheduled`",
    remedy="Label FleetClusters to match spec.placement.clusterSelector, or list them in "
           "spec.placement.clusterNames.")
TokenSecretMissing = Reason(
    "TokenSecretMissing",
    where="ModelCache `Resolved` condition",
    remedy="Create the Secret named by spec.source.huggingFace.tokenSecretRef in this namespace, with the key it "
           "names.")
CredentialsSecretMissing = Reason(
    "CredentialsSecretMissing",
    where="ModelCache `Resolved` condition (the S3 or OCI source's Secret), `Progressing` condition and "
          "`status.clusters[].reason` (a mirror's Secret)",
    remedy="Create the Secret named by the field in the message (spec.source.s3.credentialsSecretRef, "
           "spec.distribution.mirror.s3 or regions[].s3 credentialsSecretRef) in this namespace, with the keys it "
           "names (accessKeyIdKey and secretAccessKeyKey, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY by default), "
           "or for spec.source.oci.pullSecretRef a Docker config JSON under its key (.dockerconfigjson by default: "
           "kubectl create secret docker-registry), or fix the name.")
HydrationFailed = Reason(
    "HydrationFailed",
    where="ModelCache `Degraded` condition; ModelReplica PHASE under `onHydrationFailure: Fail`; " + PLACEMENT,
    remedy="See the failed clusters' ModelCacheHydration status for the cause (kubectl get modelcachehydrations).")
DeadlineExceeded = Reason(
    "DeadlineExceeded", retried=AFTER_TTL,
    where="ModelCacheHydration REASON",
    remedy="The agent Job ran longer than spec.job.activeDeadlineSeconds: raise it, or check the cluster's bandwidth "
           "to the endpoint.")
BackoffLimitExceeded = Reason(
    "BackoffLimitExceeded", retried=AFTER_TTL,
    where="ModelCacheHydration REASON; the Job's pod logs",
    remedy="The agent Job failed more often than spec.job.backoffLimit; read the last progress record and the Job's "
           "pod logs.")
InvalidSpec = Reason(
    "InvalidSpec",
    where="the composite's events (`kubectl describe`); a ModelReplica's `status.reason` when its ModelDeployment's "
          "spec.engine is invalid",
    remedy="Fix the field named in the message.")
AwaitingPrerequisites = Reason(
    "AwaitingPrerequisites",
    where="ModelCacheHydration REASON; `kubectl get objects -n <namespace>`",
    remedy="If this persists, check the Synced condition of those Objects (kubectl get objects -n <namespace>); a "
           "token Secret that never appears usually means the Secret named by tokenSecretRef is missing in this "
           "namespace.")
JobNotStarted = Reason(
    "JobNotStarted",
    where="ModelCacheHydration REASON; `kubectl describe job` on the cluster",
    remedy="The agent Job exists but has not started: check quota and admission on the cluster (kubectl describe "
           "job).")
VolumeNotBound = Reason(
    "VolumeNotBound",
    where="ModelCacheHydration REASON; `kubectl describe pvc` on the cluster",
    remedy="The cache PVC is not Bound: check that the storage class (spec.storage.storageClassName, else the "
           "FleetCluster's spec.cache.storageClassName) exists, supports the access mode and has capacity (kubectl "
           "describe pvc).")
VolumeNotExpandable = Reason(
    "VolumeNotExpandable",
    where="ModelCacheHydration REASON; the volume Object's Synced condition",
    remedy="The cache PVC's storage class cannot grow it to hold the new commit beside the one replicas still serve: "
           "recreate the volume in a storage class with allowVolumeExpansion: true (spec.storage.storageClassName on "
           "the ModelCache, then delete this ModelCacheHydration), or set spec.storage.size on the ModelCache large "
           "enough for two commits, or delete this ModelCacheHydration to recreate the volume at the new size.")
VolumeReplaced = Reason(
    "VolumeReplaced",
    where="ModelCacheHydration REASON and a Warning event on it (kubectl describe modelcachehydration)",
    remedy="None needed: the cache PVC was deleted (on the cluster, or its Object on the control plane) and "
           "provider-kubernetes created it again empty, so the copy is fetched again and no replica is sent to it "
           "until it is Ready. If it recurs, look for what deletes the PVC (kubectl get events on the cluster).")
ModelCacheNotFound = Reason(
    "ModelCacheNotFound",
    where="ModelDeployment `ModelCacheResolved` condition; ModelDeployment `status.placements[].reason`; "
          "ModelReplica `status.reason` (Waiting)",
    remedy="Create the ModelCache named by spec.modelCacheRef.name in this namespace, or fix the name.")
MaxReplicasPerCluster = Reason(
    "MaxReplicasPerCluster",
    where="ModelDeployment `ReplicasScheduled` condition; " + PLACEMENT,
    remedy="Raise spec.maxReplicasPerCluster, lower spec.replicas, or widen spec.placement to more Ready clusters.")


# --- ModelCache and ModelCacheHydration

Complete = Reason(
    "Complete",
    where="ModelCache `Progressing` condition (False: nothing left to do)",
    remedy="None: every target cluster is Ready.")
Hydrated = Reason(
    "Hydrated",
    where="ModelCacheHydration REASON",
    remedy="None: the model is verified on the cluster's volume.")
Hydrating = Reason(
    "Hydrating",
    where=("ModelCache `Progressing` condition, ModelCacheHydration REASON, ModelReplica `status.reason` (Waiting); "
           + PLACEMENT),
    remedy="None while the model is fetched onto the cluster; a replica under spec.delivery.whileHydrating: Wait "
           "starts once it is Ready there (progress: kubectl get modelcachehydrations).")
MinimumClustersReady = Reason(
    "MinimumClustersReady",
    where="ModelCache `Available` condition",
    remedy="None: at least spec.minReady clusters (0: all) serve the model.")
TooFewClustersReady = Reason(
    "TooFewClustersReady",
    where="ModelCache `Available` condition",
    remedy="Wait while clusters hydrate; if it lasts, see the Progressing and Degraded conditions for the clusters "
           "that are not Ready.")
NoFailures = Reason(
    "NoFailures",
    where="ModelCache `Degraded` condition (False)",
    remedy="None: no cluster has failed.")
RolloutQueued = Reason(
    "RolloutQueued",
    where="ModelCache `status.clusters[].reason`",
    remedy="None: the cluster waits for a rollout slot (spec.rollout.maxConcurrent clusters hydrate at once); raise "
           "it to go faster.")
RolloutPaused = Reason(
    "RolloutPaused",
    where="ModelCache `Progressing` condition, `status.rollout.message`; ROLLOUT column (`paused at <wave>`)",
    remedy="Check the paused wave's clusters and the replicas serving there (kubectl get modelcachehydrations, "
           "kubectl get modelreplicas), then set spec.rollout.promote to that wave's name to start the next wave. A "
           "promote left from an earlier rollout is ignored until it changes: clear it, then set it again.")
RolloutHalted = Reason(
    "RolloutHalted",
    where="ModelCache `Progressing` condition (False), `status.rollout.message`; ROLLOUT column (`halted at <wave>`)",
    remedy="A wave failed (a hydration Failed on the new commit, or a replica on it not Ready within "
           "spec.rollout.progressDeadline) and no further wave starts; clusters keep what they have. Fix the cause "
           "status.rollout.message names (see that cluster's ModelCacheHydration or ModelReplica), then set "
           "spec.rollout.restartedAt to the current time (e.g. `$(date -u +%FT%TZ)`) to resume from the halted wave; "
           "or revert spec.source to the revision the fleet served.")
RolledBack = Reason(
    "RolledBack",
    where="ModelCache `Progressing` condition (False), `status.rollout.message`; ROLLOUT column (`rolled back`)",
    remedy="A wave failed and spec.rollout.onFailure is Rollback: every cluster on the new commit returns to "
           "status.rollout.previousCommit, kept on its volume, and its replicas with it. Fix the cause "
           "status.rollout.message names, then set spec.rollout.restartedAt to the current time to try the new "
           "commit again from the first wave; or revert spec.source to the revision the fleet served.")
Lapsed = Reason(
    "Lapsed",
    where="ModelCache `Lapsed` condition (True) and `Available` condition; LAPSED column",
    remedy="None if intended: no replica mounted those copies for spec.retention.ttlAfterLastUse, so their clusters "
           "evicted them. Place a replica there to re-warm a copy, or raise or unset ttlAfterLastUse (or lower "
           "spec.minReady).")
NotLapsed = Reason(
    "NotLapsed",
    where="ModelCache `Lapsed` condition (False)",
    remedy="None: no shortfall below spec.minReady is the TTL's doing (see Available and Progressing for any other "
           "cause).")
Mounted = Reason(
    "Mounted",
    where="ModelCache `status.retained[].reason`",
    remedy="None: a replica on that cluster still mounts the copy; it is removed spec.retention.afterRemoval after "
           "the last one stops.")
Pinned = Reason(
    "Pinned",
    where="ModelCache `status.retained[].reason`",
    remedy="None: spec.retention.pinned keeps the copy; unpin it (or let ttlAfterLastUse lapse it) to let it be "
           "removed.")
AfterRemoval = Reason(
    "AfterRemoval",
    where="ModelCache `status.retained[].reason` (with `until`)",
    remedy="None: the copy is removed at `until` (spec.retention.afterRemoval after the cluster left or its last "
           "use); put the cluster back in spec.placement to keep it.")


# --- FleetCluster capacity and the hydrations that obey it

CapacityLow = Reason(
    "CapacityLow",
    where="FleetCluster `CapacityLow` condition and `status.cache.waiting`; ModelCacheHydration REASON (Pending: "
          "waits for room)",
    remedy="Raise the FleetCluster's spec.cache.capacity or spec.cache.highWatermark, or remove caches from this "
           "cluster (a ModelCache's placement), or unpin caches no replica needs (spec.retention.pinned) so they can "
           "be evicted.")
CapacityAvailable = Reason(
    "CapacityAvailable",
    where="FleetCluster `CapacityLow` condition (False)",
    remedy="None: every hydration on the cluster fits under the high watermark (or the cluster sets no "
           "spec.cache.capacity).")
Evicted = Reason(
    "Evicted",
    where="ModelCacheHydration PHASE and REASON; FleetCluster `status.cache.evicted`; the ModelCache's evicted count "
          "and condition message",
    remedy="None needed: the copy was unpinned and unmounted and the cluster was above its high watermark. Placing a "
           "replica of the cache on this cluster warms it again; pin the ModelCache (spec.retention.pinned) to keep "
           "its copies.")
LeftPlacement = Reason(
    "LeftPlacement",
    where="ModelCacheHydration REASON (Pending: its cluster left the placement)",
    remedy="None needed: the cluster left the ModelCache's placement, so its copy only serves what it holds until "
           "spec.removal.until; add the cluster to the placement again to update it.")
StatusUnknown = Reason(
    "StatusUnknown",
    where="ModelCache `status.retained[].reason`",
    remedy="The cluster's ModelCacheHydration does not report status.mountedBy (or reports an unreadable "
           "lastUsedTime), so its copy is kept; check that compose-model-cache-hydration runs (kubectl describe "
           "modelcachehydration).")


# --- ModelCache admission by its ModelCacheGrant

GrantNotFound = Reason(
    "GrantNotFound",
    where="ModelCache `Admitted`, `Resolved` and `Progressing` conditions",
    remedy="Ask the platform team for a ModelCacheGrant in this namespace (kubectl get modelcachegrants) and name it "
           "in spec.grantRef.name; until the grant exists the cache neither resolves nor fans out, and copies it "
           "already has keep serving.")
AwaitingGrant = Reason(
    "AwaitingGrant",
    where="ModelCache `Admitted` and `Progressing` conditions",
    remedy="None: the ModelCacheGrant decides on this spec (and its resolved size) at its next reconcile; if it "
           "lasts, check that compose-model-cache-grant runs (kubectl describe modelcachegrant).")
GrantAdmitted = Reason(
    "GrantAdmitted",
    where="ModelCache `Admitted` condition (True)",
    remedy="None: the ModelCacheGrant admitted this cache at its current spec and resolved content.")
Resolved = Reason(
    "Resolved",
    where="ModelCache `Resolved` condition; ModelDeployment `ModelCacheResolved`",
    remedy="None: the commit every replica serves is known (a ModelCache's Resolved condition, a ModelDeployment's "
           "ModelCacheResolved).")
Resolving = Reason(
    "Resolving",
    where="ModelCache `Resolved` condition; ModelDeployment `ModelCacheResolved`; ModelReplica `status.reason`",
    remedy="None while a ModelCache resolves its revision to a commit (and a ModelDeployment waits for it) or "
           "Crossplane fetches what a ModelReplica reads; if it lasts, see the ModelCache's Resolved condition.")


# --- ModelDeployment

CacheReady = Reason(
    "CacheReady",
    where=PLACEMENT,
    remedy="None: the replica mounts its cluster's warm cache.")
NotACacheTarget = Reason(
    "NotACacheTarget",
    where=PLACEMENT + "; ModelReplica `status.reason` (Waiting, when the cache's source is S3 or an existing volume)",
    remedy="None: the replica's cluster is not one of the ModelCache's targets, so it loads from the source (a Hub "
           "model; the replica of an S3 or existing-volume cache, which no engine loads from its source, waits); "
           "widen the ModelCache's spec.placement to warm it there.")
NoModelCache = Reason(
    "NoModelCache",
    where="ModelDeployment `ModelCacheResolved` condition (True); " + PLACEMENT,
    remedy="None: spec.model.huggingFace loads from the source; set spec.modelCacheRef to serve from a warm "
           "ModelCache.")
SwitchToCacheNever = Reason(
    "SwitchToCacheNever",
    where=PLACEMENT,
    remedy="None: spec.delivery.switchToCache: Never keeps a running Source replica on the source; set OnReady to "
           "move it to the cache.")
PreviousCommitWhileHydrating = Reason(
    "PreviousCommitWhileHydrating",
    where=PLACEMENT,
    remedy="None: the cluster serves the commit it has verified from its cache until the new one is Ready there.")
PreviousCommitHydrationFailed = Reason(
    "PreviousCommitHydrationFailed",
    where=PLACEMENT,
    remedy="The new commit failed to hydrate on the cluster, which keeps serving its previous commit from the cache: "
           "fix the cause on the ModelCacheHydration (kubectl get modelcachehydrations).")
PreviousCommitHeldByRollout = Reason(
    "PreviousCommitHeldByRollout",
    where=PLACEMENT,
    remedy="None: the ModelCache rolls its new commit out in waves and keeps this cluster on the commit it served "
           "before (its wave has not started, the rollout halted before it, or rolled it back), so the replica serves "
           "that commit, from the cache once it is Ready there; it moves when the cluster's wave starts and the new "
           "commit is Ready there (kubectl get modelcache: the ROLLOUT column, status.rollout.message).")
NodeReady = Reason(
    "NodeReady",
    where=PLACEMENT + "; ModelReplica `status.deliveryReason`",
    remedy="None: the replica reads its node's own copy; placed on (or preferring) nodes that hold the commit, it "
           "reads the cluster volume on a node without it.")
NodeTierWarming = Reason(
    "NodeTierWarming",
    where=PLACEMENT + "; ModelReplica `status.deliveryReason`",
    remedy="None while the cluster's nodes copy the model from its volume (kubectl get modelcachehydrations: NODES); "
           "the replica reads the cluster volume meanwhile and rolls once onto the node copy.")
NodeTierUnavailable = Reason(
    "NodeTierUnavailable",
    where=PLACEMENT + "; ModelReplica `status.deliveryReason`",
    remedy="The cache's node tier does not serve on this cluster (the hydration's status.nodeTier says why: no "
           "spec.nodeCache on the FleetCluster, no opted-in pool node, failed or evicted); the replica reads the "
           "cluster volume. Fix the cause named in the message.")
NodeDeliveryNever = Reason(
    "NodeDeliveryNever",
    where=PLACEMENT + "; ModelReplica `status.deliveryReason`",
    remedy="None: spec.delivery.node.policy: Never keeps replicas on the cluster volume; set Prefer or Require to "
           "read the node copy.")
SwitchToNodeNever = Reason(
    "SwitchToNodeNever",
    where=PLACEMENT + "; ModelReplica `status.deliveryReason`",
    remedy="None: spec.delivery.switchToCache: Never keeps a running replica on the cluster volume; set OnReady to "
           "roll it once onto the node copy.")
Scheduled = Reason(
    "Scheduled",
    where="ModelDeployment `ReplicasScheduled` condition",
    remedy="None: every desired replica has a cluster.")
ReplicasNotReady = Reason(
    "ReplicasNotReady",
    where="ModelDeployment `ReplicasReady` condition",
    remedy="None while replicas start; if it lasts, the message counts those waiting, failed and unscheduled: look "
           "at their ModelReplicas (kubectl get modelreplicas).")
Available = Reason(
    "Available",
    where="ModelDeployment `ReplicasReady` condition; ModelReplica `status.reason`",
    remedy="None: the engine is available (a ModelReplica), or every replica is (a ModelDeployment's ReplicasReady).")


# --- ModelReplica

Starting = Reason(
    "Starting",
    where=REPLICA,
    remedy="None while the image pulls and the model loads; if it lasts, look at the engine pod on the cluster "
           "(kubectl describe pod -l fleetcache.dev/model-replica=<replica>).")
ProgressDeadlineExceeded = Reason(
    "ProgressDeadlineExceeded",
    where=REPLICA + "; `kubectl describe deployment` on the cluster",
    remedy="The engine did not become available in time: read the engine pod's events and logs on the cluster "
           "(image, GPUs, memory, the model path in FLEETCACHE_MODEL).")
NotProgressing = Reason(
    "NotProgressing",
    where=REPLICA + "; `kubectl describe deployment` on the cluster",
    remedy="The engine's Deployment stopped progressing: kubectl describe deployment on the cluster says why.")
DeploymentNotFound = Reason(
    "DeploymentNotFound",
    where=REPLICA,
    remedy="A ModelReplica runs only for its ModelDeployment: recreate the ModelDeployment named in "
           "spec.deploymentName, or delete the replica.")
EngineChanging = Reason(
    "EngineChanging",
    where=REPLICA,
    remedy="None: the ModelDeployment's spec.engine changed and the replica rolls once the ModelDeployment has "
           "recomposed it; if it lasts, look for an error on the ModelDeployment.")
NodeRequireReverted = Reason(
    "NodeRequireReverted",
    where="ModelReplica `status.deliveryReason` and `status.nodeCache.revertedAt`",
    remedy="None: the replica was not available requireTimeout after its Node delivery started under "
           "spec.delivery.node.policy: Require, so it is placed by preference from now on (compute first). Warm more "
           "nodes of the pool, or raise requireTimeout, to keep Require.")
ImageVolume = Reason(
    "ImageVolume",
    where=PLACEMENT + "; ModelReplica `status.deliveryReason`; ModelCacheHydration `status.reason`",
    remedy="None: the FleetCluster declares spec.features.imageVolumes, so the replica mounts the cache's OCI "
           "artifact by digest and the cluster's hydration warms no PVC (design/image-volumes.md).")
ImageVolumeUnavailable = Reason(
    "ImageVolumeUnavailable",
    where=REPLICA + "; " + PLACEMENT + "; ModelReplica `status.deliveryReason`",
    remedy="The engine's Deployment did not become available within its progress deadline while it mounted the "
           "artifact (or the FleetCluster no longer declares spec.features.imageVolumes), so the replica uses the "
           "cluster volume. Read the engine pod's events on the cluster (ErrImagePull: the registry, its "
           "credentials, the runtime's image-volume support); set spec.features.imageVolumes false if the nodes "
           "cannot mount artifacts. Recreate the ModelReplica to try the image volume again.")


# --- ModelCacheGrant admission and accounting

Admitted = Reason(
    "Admitted",
    where="ModelCacheGrant `status.caches[].reason`",
    remedy="None: the ModelCache fans out at this spec.")
OutsideGrant = Reason(
    "OutsideGrant",
    where="ModelCacheGrant `status.caches[].reason`; the API server's refusal of a ModelCache (package/policies/) "
          "when both list cluster names",
    remedy="Narrow spec.placement to clusters the ModelCacheGrant covers (kubectl get modelcachegrant "
           "<spec.grantRef.name> -o yaml: spec.clusters), or ask the platform team for a grant that covers them.")
PinningNotAllowed = Reason(
    "PinningNotAllowed",
    where="ModelCacheGrant `status.caches[].reason`; the API server's refusal of a ModelCache (package/policies/)",
    remedy="Set spec.retention.pinned to false, or ask the platform team to set spec.allowPinned on the "
           "ModelCacheGrant.")
PoolNotGranted = Reason(
    "PoolNotGranted",
    where="ModelCacheGrant `status.caches[].reason`",
    remedy="Set the ModelCache's spec.storage.nodePool to a pool the ModelCacheGrant names (kubectl get "
           "modelcachegrant <spec.grantRef.name> -o yaml: spec.nodePools; absent, it grants default only), or ask "
           "the platform team to add the pool to the grant's spec.nodePools.")
OverQuota = Reason(
    "OverQuota",
    where="ModelCacheGrant `status.caches[].reason` and `OverQuota` condition (OVERQUOTA)",
    remedy="Ask the platform team to raise the ModelCacheGrant's spec.quota.bytes, or free room: delete ModelCaches "
           "naming the grant, or narrow their spec.placement (kubectl get modelcachegrant shows BUDGET, USED and "
           "PROJECTED).")
WithinQuota = Reason(
    "WithinQuota",
    where="ModelCacheGrant `OverQuota` condition (False)",
    remedy="None: what the namespace's caches hold fits the budget.")
UsageUnknown = Reason(
    "UsageUnknown",
    where="ModelCacheGrant `OverQuota` condition (Unknown)",
    remedy="None while a ModelCache naming the grant resolves; if it lasts, see that cache's Resolved condition "
           "(kubectl get modelcaches).")


# --- The node tier of a hydration

NodeTierNotConfigured = Reason(
    "NodeTierNotConfigured",
    where=NODE_TIER,
    remedy="None if intended: the cache stays on the cluster's volume there. For node copies, the platform team sets "
           "spec.nodeCache on the FleetCluster (nodeSelector, path, capacityPerNode; design/node-tier.md), or the "
           "spec.nodePools[] entry the cache's spec.storage.nodePool names (design/node-pools.md).")
NodeCacheModeUnsupported = Reason(
    "NodeCacheModeUnsupported",
    where=NODE_TIER + "; FleetCluster `NodeAgent` condition",
    remedy="Node caches from a storage class (spec.nodeCache.storageClassName) are reserved and not built: remove it "
           "from the FleetCluster and set spec.nodeCache.path to a dedicated filesystem mounted on every pool node.")
NoEligibleNodes = Reason(
    "NoEligibleNodes",
    where=NODE_TIER,
    remedy="Label the GPU nodes that should hold copies with the FleetCluster's spec.nodeCache.optInLabel (default "
           "fleetcache.dev/node-cache=enabled), and check that they match spec.nodeCache.nodeSelector (control-plane "
           "nodes never do); give spec.nodeCache.tolerations for their taints.")
AwaitingVolumeTier = Reason(
    "AwaitingVolumeTier",
    where=NODE_TIER,
    remedy="None: nodes copy from the cluster's verified volume, so they start once the hydration's phase is Ready "
           "on this commit; see its reason if that lasts.")
VolumeNotShared = Reason(
    "VolumeNotShared",
    where=NODE_TIER,
    remedy="Give the cache volume access mode ReadWriteMany (the ModelCache's spec.storage.accessMode, else the "
           "FleetCluster's spec.cache.accessMode; an existing PVC keeps its mode: delete this ModelCacheHydration to "
           "recreate it), or set the ModelCache's spec.storage.tier to Volume.")
NodesWarming = Reason(
    "NodesWarming",
    where=NODE_TIER,
    remedy="None: the pool nodes copy from the cluster's volume, at most spec.nodeCache.maxConcurrentNodes at once "
           "per cluster; raise it to go faster.")
NodesWarm = Reason(
    "NodesWarm",
    where=NODE_TIER,
    remedy="None: every eligible pool node holds the verified commit.")
NodeTierDegraded = Reason(
    "NodeTierDegraded",
    where="ModelCache `Degraded` condition; ModelCacheHydration `status.nodeTier.reason`",
    remedy="See the named clusters' ModelCacheHydration status.nodeTier.firstFailure (kubectl get "
           "modelcachehydrations: NODES) and the warmer pod on that node (kubectl logs ds/<cache>-node-warmer); "
           "replicas there keep reading the cluster volume meanwhile.")

# --- Engine images kept on the pool nodes (design/engine-images.md)

IMAGES = "ModelCacheHydration `status.images.reason` (IMAGES column: ready/desired nodes); the ModelCache IMAGES column"
ImagesWarm = Reason(
    "ImagesWarm",
    where=IMAGES,
    remedy="None: every opted-in pool node holds every image of spec.images at its pinned digest.")
ImagesPulling = Reason(
    "ImagesPulling",
    where=IMAGES,
    remedy="None: the pool nodes pull the images, at most the pool's maxConcurrentNodes at once per cluster on "
           "clusters without image volumes; raise it to go faster.")
ImagePullFailed = Reason(
    "ImagePullFailed",
    where=IMAGES + "; the ModelCache `Degraded` condition",
    remedy="Read firstFailure: ErrImagePull or ImagePullBackOff means the node cannot pull the pinned digest (the "
           "registry's name, reachability from the nodes, or credentials: spec.images[].image must be pullable by "
           "the nodes without a pull secret); CommandFailed means the command did not exit 0 (spec.images[].command). "
           "The kubelet retries by itself with backoff.")
ImageCommandRequired = Reason(
    "ImageCommandRequired",
    where=IMAGES,
    remedy="Give every spec.images[] entry a command that exits 0 without a GPU or network, e.g. "
           "command: [vllm, serve, --help=all] (the image must contain it), or have the platform team set the "
           "FleetCluster's spec.features.imageVolumes where the runtime mounts images as volumes.")
CommandFailed = Reason(
    "CommandFailed",
    where="the `<cache>-images-status` ConfigMap on the cluster (`status.json` firstFailure), written by the "
          "image keeper's reporter",
    remedy="An engine image's command (spec.images[].command and args) exited non-zero on the named node: make it "
           "a command that exits 0 without a GPU or network (e.g. [vllm, serve, --help=all]); read its output with "
           "kubectl logs <keeper pod> -c pull-<i> on the cluster. The kubelet runs it again with backoff.")


# --- The FleetCluster's node tier

NodeCapacityLow = Reason(
    "NodeCapacityLow",
    where="FleetCluster `NodeCapacityLow` condition and `status.nodeCache.waiting`; ModelCacheHydration "
          "`status.nodeTier.reason` (Pending: waits for room)",
    remedy="Raise the FleetCluster's spec.nodeCache.capacityPerNode or highWatermark (only as far as the pool nodes' "
           "disks really hold), remove tier-Node caches from this cluster or set their spec.storage.tier to Volume, "
           "or unpin node caches no replica needs so they can be evicted; the volume serves meanwhile.")
NodeCapacityAvailable = Reason(
    "NodeCapacityAvailable",
    where="FleetCluster `NodeCapacityLow` condition (False)",
    remedy="None: every tier-Node cache on the cluster fits under spec.nodeCache.highWatermark of capacityPerNode.")
NodeAgentReady = Reason(
    "NodeAgentReady",
    where="FleetCluster `NodeAgent` condition (True)",
    remedy="None: every pool node runs the node agent (fleetcache-system/fleetcache-node-agent).")
NodeAgentNotReady = Reason(
    "NodeAgentNotReady",
    where="FleetCluster `NodeAgent` condition",
    remedy="See the node agent's pods on the named cluster (kubectl -n fleetcache-system get pods -l "
           "app.kubernetes.io/component=node-agent): a pod that cannot mount spec.nodeCache.path means the path is "
           "missing on that node (create the filesystem, or remove the node's opt-in label).")


# --- ModelReplica: the commit its engine serves

CommitServed = Reason(
    "CommitServed",
    where="ModelReplica `Serving` condition (True) and `status.servingCommit`",
    remedy="None: every pod of the engine's Deployment serves status.servingCommit, the commit the replica is "
           "composed for; the condition's lastTransitionTime says since when.")
RollingCommit = Reason(
    "RollingCommit",
    where=REPLICA + "; ModelReplica `Serving` condition (False)",
    remedy="None while the engine's Deployment rolls to the new commit (the old pod serves until the new one is "
           "available: maxUnavailable 0); if it lasts, look at the new engine pod on the cluster (kubectl describe "
           "pod -l fleetcache.dev/model-replica=<replica>); a ModelCache rollout halts on it after "
           "spec.rollout.progressDeadline.")
NotServing = Reason(
    "NotServing",
    where="ModelReplica `Serving` condition (False)",
    remedy="None: no engine runs for this replica (delivery Wait or Fail); status.reason says what it waits for.")
