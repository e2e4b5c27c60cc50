"""`verify`: re-hash every published file of a snapshot against its manifests, on all cores.

A single file is one sha256 stream, so one huge file uses one core. Files found
corrupt lose their verification record (when the volume is writable), so the next fetch
re-hashes them and fetches them again even if the corruption left their `stat` unchanged.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .errors import AgentError
from .layout import Layout, file_problems, open_layout
from .plan import Entry, manifest_digest

log = logging.getLogger("fleetcache.agent")


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
        raise AgentError("InvalidConfiguration", f"no completed fetch of {repo}@{revision} under --dest")
    return manifests


def verify(dest: Path, repo: str, revision: str | None) -> dict:
    manifests = find_manifests(dest, repo, revision)
    items: dict[tuple[str, str], tuple[Layout, Path, Entry]] = {}
    for manifest in manifests:
        layout = open_layout(manifest["layout"], dest, repo)
        for path, entry in layout.published_paths(manifest):
            items[(layout.name, entry.path)] = (layout, path, entry)
    checks = list(items.values())
    results = zip(checks, file_problems([(path, entry) for _, path, entry in checks]))
    bad = [(layout, entry, problem) for (layout, _, entry), problem in results if problem]
    if bad:
        for layout in {layout for layout, _, _ in bad}:
            try:
                layout.forget_verified([entry for owner, entry, _ in bad if owner is layout])
            except OSError as err:  # a read-only mount: the next fetch still re-hashes what changed
                log.warning("could not withdraw the verification record (%s)", type(err).__name__)
        problems = sorted(problem for _, _, problem in bad)
        shown = ", ".join(problems[:10]) + (f" and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise AgentError("CacheCorrupted", f"{len(problems)} of {len(checks)} files failed verification: {shown}")
    entries = tuple(entry for _, _, entry in checks)
    digest = manifests[0]["manifestDigest"] if len(manifests) == 1 else manifest_digest(entries)
    return {"repo": repo, "revision": manifests[0]["revision"], "commit": manifests[0]["commit"],
            "files": len(checks), "bytes": sum(e.size for e in entries), "manifestDigest": digest}
