"""A cluster volume as `fetch` leaves it, built with the layout's own publishing steps (no hub, no
network), and the node-warm command line around it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from fleetcache.agent.hf_cache_layout import HfCacheLayout
from fleetcache.agent.plan import Listing
from fleetcache.manifest import GIT_SHA1, SHA256, Entry, manifest_digest
from tests.agent.conftest import run_agent

REPO = "acme/tiny"
COMMIT = "c0ffee" + "0" * 34


def model_files(shards: int = 2, shard_size: int = 1 << 20) -> dict[str, bytes]:
    """Shards of pseudo-random bytes (LFS, sha256) and a config (git blob, sha1)."""
    files = {"config.json": b'{"model_type": "llama"}'}
    for i in range(shards):
        seed = hashlib.sha256(b"shard%d" % i).digest()
        files[f"model-{i:05d}.safetensors"] = (seed * (shard_size // 32 + 1))[:shard_size]
    return files


def entry_for(path: str, data: bytes) -> Entry:
    if path.endswith(".json"):
        return Entry(path, len(data), hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(), GIT_SHA1)
    return Entry(path, len(data), hashlib.sha256(data).hexdigest(), SHA256)


def make_volume(root: Path, files: dict[str, bytes], repo: str = REPO, commit: str = COMMIT,
                revision: str = "main") -> str:
    """Blobs, snapshot links, manifest and refs where fetch puts them; returns the manifestDigest."""
    layout = HfCacheLayout(root, repo)
    entries = tuple(sorted((entry_for(p, d) for p, d in files.items()), key=lambda e: e.path))
    layout.ensure_dirs()
    for entry in entries:
        blob = layout.blob_path(entry)
        blob.write_bytes(files[entry.path])
        layout.record_verified(entry)
        layout.link(entry, commit)
    digest = manifest_digest(entries)
    layout.finish(Listing(repo, revision, commit, entries), entries, digest)
    return digest


def volume_blob(root: Path, files: dict[str, bytes], path: str, repo: str = REPO) -> Path:
    return HfCacheLayout(root, repo).blob_path(entry_for(path, files[path]))


def node_warm(source: Path, dest: Path, digest: str, *extra: str, node: str = "node-a", commit: str = COMMIT,
              env: dict | None = None, timeout: float = 120):
    return run_agent("node-warm", "--source", str(source), "--dest", str(dest), "--repo", REPO, "--commit", commit,
                     "--manifest-digest", digest, "--node", node, *extra, timeout=timeout,
                     env={"FLEETCACHE_NODE_STATUS_INTERVAL": "0", **(env or {})})


def status(path: Path, node: str = "node-a") -> dict:
    return json.loads(path.read_text())[node]


def node_snapshot(dest: Path, commit: str = COMMIT, repo: str = REPO) -> Path:
    return dest / "hub" / ("models--" + repo.replace("/", "--")) / "snapshots" / commit


def visible_bytes(dest: Path, commit: str = COMMIT) -> dict[str, bytes]:
    """Every file a reader of the node copy sees, through the snapshot links."""
    snapshot = node_snapshot(dest, commit)
    if not snapshot.is_dir():
        return {}
    return {str(p.relative_to(snapshot)): p.read_bytes() for p in snapshot.rglob("*") if p.is_file()}


def hidden(path: Path) -> bool:
    return path.name.startswith(".")


def published_blobs(dest: Path, repo: str = REPO) -> list[Path]:
    blobs = dest / "hub" / ("models--" + repo.replace("/", "--")) / "blobs"
    return sorted(p for p in blobs.iterdir() if not hidden(p)) if blobs.is_dir() else []


def flip_byte(path: Path, offset: int = 1000) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 1]))
    os.sync()


def make_manifest_only(root: Path, entries: tuple[Entry, ...], repo: str = REPO, commit: str = COMMIT) -> str:
    """A volume manifest without the bytes: enough for checks that run before any byte is read."""
    layout = HfCacheLayout(root, repo)
    digest = manifest_digest(entries)
    (layout.root / "snapshots" / commit).mkdir(parents=True)
    layout.finish(Listing(repo, commit, commit, entries), entries, digest)
    return digest
