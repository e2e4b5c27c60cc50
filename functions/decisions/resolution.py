"""Resolving a ModelCache's source to one commit. compose-model-cache decides whether the
latched status.resolved still answers the spec, what a finished resolve record latches as,
and why a record cannot be latched (an unpinned manifest, nothing selected);
compose-model-cache-hydration takes the pinned manifest from that latch only when it hashes
to its own spec.manifestDigest (`pinned_manifest`). Pure: records and statuses in, answers
out."""

from __future__ import annotations

from dataclasses import dataclass

from fleetcache import messages, reasons
from fleetcache.functions import read
from fleetcache.functions.decisions import sources
from fleetcache.functions.views.model_cache import is_empty, latched_result, read_manifest, read_resolved


@dataclass
class Resolution:
    resolved: dict | None  # the latched status.resolved, when it matches the spec
    reason: str = reasons.Resolving
    message: str = ""


def stands(latched: dict | None, origin: sources.Source) -> bool:
    """A latched result still answers this spec: the same source, something selected, and
    for an S3 prefix or a volume's file the pinned manifest every hydration needs (a status
    without it, or with a broken one, resolves again rather than strand the fleet)."""
    if not latched:
        return False
    return latched["sourceDigest"] == origin.digest and not is_empty(latched) \
        and ("manifest" in latched or not origin.pinned_manifest)


def result_of(origin: sources.Source, record: dict) -> dict | None:
    """A Resolved record as status.resolved (None before, or when its commit is malformed)."""
    if record.get("phase") != "Resolved":
        return None
    manifest = sources.manifest_of(record.get("manifest"))[0] if origin.pinned_manifest else None
    return read_resolved(latched_result(record, origin.repo, origin.revision, origin.digest, manifest))


def manifest_problem(origin: sources.Source, record: dict, result: dict | None) -> str:
    """Why a resolved S3 prefix or volume manifest cannot be latched ("" when it can): every
    hydration fetches or verifies against the latched manifest, so it must be there, within
    the bound, and hash to the digest the record states."""
    if result is None or not origin.pinned_manifest:
        return ""
    manifest, problem = sources.manifest_of(record.get("manifest"))
    if manifest is None:
        return problem
    if sources.digest_of_manifest(manifest) != result["manifestDigest"]:
        return "the resolve record's manifest does not hash to its manifestDigest"
    return ""


def empty_source(origin: sources.Source, source: dict, resolved: dict) -> Resolution:
    return Resolution(None, reasons.InvalidSource, reasons.with_remedy(
        f"{origin.described} resolved to commit {resolved['commit'][:10]} with "
        f"{messages.counted(resolved['files'], 'file')} ({resolved['bytes']} bytes) selected: "
        f"spec.source.allowPatterns {messages.shown(source['allowPatterns'])} and "
        f"ignorePatterns {messages.shown(source['ignorePatterns'])} select no file; fix the "
        "patterns so they match the repository's files", reasons.InvalidSource))


def not_found_message(missing: list[str]) -> str:
    return reasons.with_remedy(f"FleetCluster {messages.named(missing)} named in "
                               "spec.placement.clusterNames does not exist", reasons.ClusterNotFound)


def pinned_manifest(caches: list | None, cache: str, commit: str, manifest_digest: str
                    ) -> tuple[list[dict] | None, str]:
    """The manifest an S3 prefix or a volume's file resolved to, from the ModelCache's
    status.resolved (caches: what Crossplane fetched for it by name, None while it has not),
    only if it hashes to the hydration's spec.manifestDigest: a copy is fetched or verified
    against exactly the content the fleet resolved, never another. Else None and why not."""
    if caches is None:
        return None, f"waiting for Crossplane to fetch ModelCache {cache}"
    found = next((c for c in caches if isinstance(c, dict)), None)
    if found is None:
        return None, f"ModelCache {cache} does not exist"
    if read.get_path(found, "status.resolved.commit") != commit:
        return None, (f"ModelCache {cache} has not latched commit {commit[:14]} "
                      "(status.resolved)")
    manifest = read_manifest(read.get_path(found, "status.resolved.manifest"))
    if manifest is None:
        return None, f"ModelCache {cache} status.resolved.manifest is missing or malformed"
    if sources.digest_of_manifest(manifest) != manifest_digest:
        return None, (f"ModelCache {cache} status.resolved.manifest does not hash to "
                      f"spec.manifestDigest {manifest_digest[:12]}; nothing is fetched "
                      "until they agree")
    return manifest, ""
