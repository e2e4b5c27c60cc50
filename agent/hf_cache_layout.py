"""`hf-cache`: the Hugging Face cache layout, what `fetch` writes by default and node-warm copies into.

`DEST/hub/models--ORG--NAME/{blobs/<digest>, snapshots/<commit>/<path> -> ../../blobs/<digest>,
refs/<revision>}`, the layout huggingface_hub, vLLM and SGLang read offline with
`HF_HUB_CACHE=DEST/hub`. A blob is keyed by its digest, so commits share it; a snapshot link is
made under a temp name and renamed, so readers see no link or the right one.
"""

from __future__ import annotations

import os
from pathlib import Path

from fleetcache.agent.disk import fsync_dir, tmp_name, write_atomic
from fleetcache.agent.layout import Layout, ref_names
from fleetcache.agent.plan import Listing
from fleetcache.manifest import Entry
from fleetcache.volume import HUB_DIR, repo_folder


class HfCacheLayout(Layout):
    name = "hf-cache"

    def __init__(self, dest: Path, repo: str, commit: str = ""):
        super().__init__(dest, repo, commit)
        self.root = dest / HUB_DIR / repo_folder(repo)

    def key(self, entry: Entry) -> str:
        return entry.digest

    def blob_path(self, entry: Entry) -> Path:
        return self.root / "blobs" / entry.digest

    def snapshot_path(self, entry: Entry, commit: str) -> Path:
        return self.root / "snapshots" / commit / entry.path

    def link_target(self, entry: Entry) -> str:
        return "../" * (entry.path.count("/") + 2) + "blobs/" + entry.digest

    def scan_roots(self) -> list[Path]:
        return [self.root / "blobs", self.root / "snapshots", self.root / "refs", self.state]

    def is_linked(self, entry: Entry, commit: str) -> bool:
        try:
            return os.readlink(self.snapshot_path(entry, commit)) == self.link_target(entry)
        except OSError:
            return False

    def link(self, entry: Entry, commit: str) -> None:
        """A relative symlink, created under a temp name and renamed: readers see no link or the right one."""
        final = self.snapshot_path(entry, commit)
        self._check_inside(final)
        tmp = tmp_name(final)
        tmp.unlink(missing_ok=True)
        os.symlink(self.link_target(entry), tmp)
        os.replace(tmp, final)

    def finish(self, listing: Listing, entries: tuple[Entry, ...], digest: str, refs: tuple[str, ...] = ()) -> None:
        for directory in {self.snapshot_path(e, listing.commit).parent for e in entries}:
            fsync_dir(directory)
        super().finish(listing, entries, digest, refs)
        for name in ref_names(listing, refs):
            hf_ref = self.root / "refs" / name
            if not (hf_ref.exists() and hf_ref.read_text() == listing.commit):
                write_atomic(hf_ref, listing.commit.encode())  # huggingface_hub reads it without a newline

    def snapshot_root_for(self, final: Path) -> Path:
        return self.root / ("blobs" if final.parent.name == "blobs" and final.parent.parent == self.root
                            else "snapshots")

    def published_paths(self, manifest: dict) -> list[tuple[Path, Entry]]:
        entries = [Entry(**f) for f in manifest["files"]]
        return [(self.snapshot_path(e, manifest["commit"]), e) for e in entries]
