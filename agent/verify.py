"""`verify`: re-hash every published file of a snapshot against its manifest, on all cores.

hashlib releases the GIL on large buffers, so one thread per core hashes files in
parallel; a single file is one sha256 stream, so one huge file uses one core.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .errors import AgentError
from .fetch import new_hasher
from .layout import STATE_DIR, Layout, open_layout, repo_folder
from .plan import Entry

READ_BLOCK = 8 << 20


def hash_file(path: Path, entry: Entry) -> str | None:
    """None when the file is intact, else why not."""
    try:
        if os.stat(path).st_size != entry.size:
            return f"{entry.path} (size {os.stat(path).st_size}, want {entry.size})"
        hasher = new_hasher(entry)
        buffer = bytearray(READ_BLOCK)
        view = memoryview(buffer)
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buffer):
                hasher.update(view[:n])
    except OSError as err:
        return f"{entry.path} ({type(err).__name__})"
    return None if hasher.hexdigest() == entry.digest else f"{entry.path} (digest mismatch)"


def find_manifest(dest: Path, repo: str, revision: str | None) -> dict:
    state = Layout(dest, repo)  # manifests and refs are layout-independent
    if revision is None:
        manifests = sorted((dest / STATE_DIR / repo_folder(repo) / "manifests").glob("*.json"))
        if len(manifests) == 1:
            return state.read_manifest(manifests[0].stem)
        revision = "main"
    commit = revision if state.read_manifest(revision) else state.resolve_ref(revision)
    manifest = state.read_manifest(commit) if commit else None
    if manifest is None:
        raise AgentError("InvalidConfiguration", f"no completed fetch of {repo}@{revision} under --dest")
    return manifest


def verify(dest: Path, repo: str, revision: str | None, workers: int | None = None) -> dict:
    manifest = find_manifest(dest, repo, revision)
    layout: Layout = open_layout(manifest["layout"], dest, repo)
    items = layout.published_paths(manifest)
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        problems = sorted(p for p in pool.map(lambda item: hash_file(*item), items) if p)
    if problems:
        shown = ", ".join(problems[:10]) + (f" and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise AgentError("DigestMismatch", f"{len(problems)} of {len(items)} files failed verification: {shown}")
    return {"repo": repo, "revision": manifest["revision"], "commit": manifest["commit"], "files": len(items),
            "bytes": sum(e.size for _, e in items), "manifestDigest": manifest["manifestDigest"]}
