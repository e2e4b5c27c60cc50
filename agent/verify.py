"""`verify`: re-hash every published file of a snapshot against its manifests, on all cores;
or an existing volume (spec.source.volume) in place against the manifest it was resolved to.

A single file is one sha256 stream, so one huge file uses one core. Files found
corrupt lose their verification record (when the volume is writable), so the next fetch
re-hashes them and fetches them again even if the corruption left their `stat` unchanged.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from fleetcache import reasons
from fleetcache.agent.disk import resolves_within
from fleetcache.agent.errors import AgentError
from fleetcache.agent.layout import Layout, file_problems
from fleetcache.agent.layouts import open_layout
from fleetcache.agent.plan import Listing, resolved_record, select
from fleetcache.agent.sources import manifest_commit, manifest_entries, parse_manifest
from fleetcache.manifest import Entry, manifest_digest
from fleetcache.messages import named

log = logging.getLogger("fleetcache.agent")


# verify's remedy when there is nothing complete to verify: the table's (invalid arguments)
# would mislead, as nothing was.
NOT_FETCHED = ("Run (or finish) `fleetcache-agent fetch` with the same --dest, --repo and --revision first: it "
               "resumes what an interrupted fetch left. Then verify.")


def find_manifests(dest: Path, repo: str, revision: str | None) -> list[dict]:
    """The completed fetches of the commit `revision` names (a commit, a ref, or, when
    omitted, the only commit on the volume, else `main`): one manifest per selection."""
    state = Layout(dest, repo)  # manifests and refs are layout-independent
    commits = state.manifest_commits()
    if revision is None:
        revision = commits[0] if len(commits) == 1 else "main"
    commit = revision if revision in commits else state.resolve_ref(revision)
    manifests = state.read_manifests(commit) if commit else []
    if not manifests:
        held = f" (it holds {named(commits)}: pass one as --revision)" if commits else ""
        raise AgentError(reasons.InvalidConfiguration,
                         f"nothing to verify: --dest {dest} holds no completed fetch of {repo}@{revision}{held}",
                         remedy=NOT_FETCHED)
    return manifests


def verify(dest: Path, repo: str, revision: str | None) -> dict:
    manifests = find_manifests(dest, repo, revision)
    items: dict[tuple[str, str], tuple[Layout, Path, Entry]] = {}
    for manifest in manifests:
        layout = open_layout(manifest["layout"], dest, repo, manifest["commit"])
        for path, entry in layout.published_paths(manifest):
            items[(layout.name, entry.path)] = (layout, path, entry)
    checks = list(items.values())
    results = zip(checks, file_problems([(path, entry) for _, path, entry in checks]), strict=True)
    bad = [(layout, entry, problem) for (layout, _, entry), problem in results if problem]
    if bad:
        for layout in {layout for layout, _, _ in bad}:
            try:
                layout.forget_verified([entry for owner, entry, _ in bad if owner is layout])
            except OSError as err:  # a read-only mount: the next fetch still re-hashes what changed
                log.warning("could not withdraw the verification record (%s)", type(err).__name__)
        problems = sorted(problem for _, _, problem in bad)
        shown = ", ".join(problems[:10]) + (f" and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise AgentError(reasons.CacheCorrupted, f"{len(problems)} of {len(checks)} files failed verification: {shown}")
    entries = tuple(entry for _, _, entry in checks)
    digest = manifests[0]["manifestDigest"] if len(manifests) == 1 else manifest_digest(entries)
    return {"repo": repo, "revision": manifests[0]["revision"], "commit": manifests[0]["commit"],
            "files": len(checks), "bytes": sum(e.size for e in entries), "manifestDigest": digest}


# -- an existing volume (spec.source.volume): checked in place, never written ------------------

MISMATCH_NAMED = 5  # files a SourceVolumeMismatch message names


def read_volume_manifest(path: Path) -> list[dict]:
    """The manifest file a volume ships ({path, size, sha256} per file): missing is the
    source not found, malformed is refused (14), never sanitized."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise AgentError(reasons.SourceNotFound, f"the volume has no manifest file at {path} "
                                           "(spec.source.volume.manifest.file)") from None
    except OSError as err:
        raise AgentError(reasons.SourceNotFound,
                         f"cannot read the manifest file {path} ({type(err).__name__})") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise AgentError(reasons.InvalidSource, f"the manifest file {path} is not JSON") from None
    return parse_manifest(data)


def resolve_volume_manifest(path: Path, allow: list[str] | None, ignore: list[str] | None) -> dict:
    """`resolve --manifest-file` of an existing volume: the pinned manifest every cluster's
    copy is verified against (contract §D). The commit is `vol-` + 40 hex of its canonical
    JSON, so another file list (or the same list with other patterns) is another commit."""
    manifest = read_volume_manifest(path)
    chosen = {e.path for e in select(manifest_entries(manifest), allow, ignore)}
    manifest = [row for row in manifest if row["path"] in chosen]
    if not manifest:
        raise AgentError(reasons.InvalidSource, f"the patterns select none of the files of {path}")
    commit = manifest_commit(manifest, "vol")
    entries = manifest_entries(manifest)
    return {**resolved_record(Listing("", None, commit, entries), entries), "manifest": manifest}


def verify_in_place(dest: Path, entries: tuple[Entry, ...], digest: str | None = None) -> dict:
    """Every file of the manifest at DEST/<path> (flat layout), every byte hashed, nothing
    written: a volume someone else filled is Ready only if all of it matches. A mismatch is
    SourceVolumeMismatch (21) naming up to 5 files."""
    if digest is not None and manifest_digest(entries) != digest:
        raise AgentError(reasons.InvalidConfiguration, f"--manifest-digest {digest} is not the manifest's digest "
                                                 f"{manifest_digest(entries)}")
    checks = [(dest / entry.path, entry) for entry in entries]
    outside = [entry.path for path, entry in checks if not resolves_within(dest, path, below=True)]
    results = file_problems([(path, entry) for path, entry in checks if entry.path not in outside])
    problems = sorted([f"{p} (outside the volume)" for p in outside] + [p for p in results if p])
    if problems:
        shown = ", ".join(problems[:MISMATCH_NAMED])
        more = len(problems) - MISMATCH_NAMED
        raise AgentError(reasons.SourceVolumeMismatch, f"{len(problems)} of {len(entries)} files in {dest} do not "
                                                 f"match the manifest: {shown}"
                                                 + (f" and {more} more" if more > 0 else ""))
    return {"files": len(entries), "bytes": sum(e.size for e in entries),
            "manifestDigest": manifest_digest(entries)}
