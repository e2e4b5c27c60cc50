"""The one table of agent exit codes, shared by the agent and every composer.

The agent exits with one of these codes and writes the reason and remedy into its
progress record and termination message; the composers turn the same code back into
a status reason and remedy, and the hydration Job's podFailurePolicy fails at once on
the permanent ones. Change a row here and every part follows.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExitCode:
    code: int
    reason: str
    permanent: bool
    remedy: str


EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(
        10,
        "AuthFailed",
        True,
        "The source or the fleet mirror refused the credentials. Hub: the Secret named by "
        "spec.source.huggingFace.tokenSecretRef must hold a valid token with read access (for "
        "a gated model, its account must accept the model's terms). S3: the keys in "
        "spec.source.s3.credentialsSecretRef (unset: the cluster's own identity) need "
        "s3:ListBucket and s3:GetObject on the bucket, and the mirror's "
        "(spec.distribution.mirror.s3 or regions[].s3 credentialsSecretRef) also s3:PutObject "
        "for the publisher.",
    ),
    ExitCode(
        11,
        "SourceNotFound",
        True,
        "Check where the source points: spec.source.huggingFace.repo, revision and endpoint "
        "(a private repo needs spec.source.huggingFace.tokenSecretRef), or "
        "spec.source.s3.bucket, prefix, region and endpoint (an object version pinned at "
        "resolve and deleted since must be restored); for a publisher, the mirror's bucket "
        "(spec.distribution.mirror).",
    ),
    ExitCode(
        12,
        "DigestMismatch",
        True,
        "The bytes served did not match the digest pinned at resolve, even after retries; "
        "nothing unverified was published. Check the mirror or proxy between the cluster and "
        "the source (spec.source.huggingFace.endpoint, spec.source.s3.endpoint); an S3 object "
        "overwritten since resolve needs its resolved content back, or versioning on the "
        "bucket so the pinned version stays readable. Then delete the failed hydration's Job "
        "to retry.",
    ),
    ExitCode(
        13,
        "InsufficientCapacity",
        True,
        "The volume cannot hold the model: raise spec.storage.size (or the FleetCluster's "
        "spec.cache.capacity), or free space on the volume.",
    ),
    ExitCode(
        14,
        "InvalidSource",
        True,
        "The source's listing (Hub repository, S3 prefix, or the volume's manifest) has an "
        "unsafe or malformed entry (absolute path, '..', symlink escape, bad size or "
        "duplicate path), or no file that spec.source.allowPatterns and ignorePatterns "
        "select; fleetcache refuses it rather than sanitize it or call an empty cache Ready. "
        "Fix the patterns or the source (its files or S3 keys), or pin another revision.",
    ),
    ExitCode(
        15,
        "InvalidConfiguration",
        True,
        "The agent was started with invalid arguments: check the spec fields it names and "
        "that the agent image matches the function's version.",
    ),
    ExitCode(
        16,
        "StagerBusy",
        False,
        "Another writer holds the cache volume; the Job retries on its own. If it persists, "
        "look for another fleetcache Job on that cluster writing to the same volume.",
    ),
    ExitCode(
        17,
        "SourceUnreachable",
        False,
        "The source or the fleet mirror could not be reached (resets, timeouts, 5xx) after "
        "retries; the Job retries on its own. Check the cluster's egress to the endpoint the "
        "message names: spec.source.huggingFace.endpoint (or set it to a reachable Hub "
        "mirror), spec.source.s3.endpoint and region, or the mirror's "
        "(spec.distribution.mirror).",
    ),
    ExitCode(
        18,
        "RateLimited",
        False,
        "The source or the fleet mirror asked the agent to slow down (Hub 429, S3 503 "
        "SlowDown); the Job retries on its own. Lower spec.rollout.maxConcurrent or "
        "spec.agent.concurrency; for the Hub, set spec.source.huggingFace.tokenSecretRef "
        "(higher limits) or a fleet mirror (spec.distribution.mirror) so one cluster "
        "downloads.",
    ),
    ExitCode(
        19,
        "CacheCorrupted",
        True,
        "Files on the cache volume no longer match the digests they were verified against "
        "(the volume changed after hydration, not the source). The next fetch re-hashes "
        "them and downloads the corrupt ones again: re-run the hydration (delete its Job). "
        "If it recurs, check the storage behind the volume.",
    ),
    ExitCode(
        20,
        "MirrorIncomplete",
        True,
        "The fleet mirror has no complete, verified copy of this content (its manifest or a "
        "blob is missing, or a blob does not match the resolved digest) and "
        "spec.distribution.mirror.onMissing is Fail. Let the publishing cluster finish "
        "(status.mirror.published), or set onMissing: Origin to fetch what is missing from the "
        "source and re-publish it.",
    ),
    ExitCode(
        21,
        "SourceVolumeMismatch",
        True,
        "The existing volume named by spec.source.volume.claimName does not hold the files its "
        "manifest pins (the message names up to 5: missing, another size, or other bytes); "
        "fleetcache never writes that volume. Copy the right files into it (at "
        "spec.source.volume.subPath), or fix the manifest, then delete the failed hydration's "
        "Job to verify again.",
    ),
    ExitCode(
        22,
        "NodeCacheNotDedicated",
        True,
        "The node cache path is not the root of its own filesystem, so warming it would fill "
        "the node's root disk (DiskPressure evictions). Mount a dedicated disk at the "
        "FleetCluster's spec.nodeCache.path on every pool node, or remove the node's opt-in label.",
    ),
)

BY_CODE: dict[int, ExitCode] = {row.code: row for row in EXIT_CODES}
BY_REASON: dict[str, ExitCode] = {row.reason: row for row in EXIT_CODES}
PERMANENT_CODES: tuple[int, ...] = tuple(row.code for row in EXIT_CODES if row.permanent)


def for_code(code: int) -> ExitCode | None:
    """The row for an exit code, or None for 0 and codes fleetcache never uses."""
    return BY_CODE.get(code)
