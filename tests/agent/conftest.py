"""Hub fixtures and a runner for the real `fleetcache-agent` console script."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetcache.devtools.testhub import TestHub, make_model
from tests.support.registry import PASSWORD, USER, LoopbackRegistry

AGENT = str(Path(sys.executable).parent / "fleetcache-agent")
REPO = "acme/tiny"
TOKEN = "hf_SECRETtoken0123456789abcdefXYZ"


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict:
        return json.loads(self.stdout)


@pytest.fixture(scope="module")
def registry():
    """docker-registry on loopback, anonymous."""
    with LoopbackRegistry() as running:
        yield running


@pytest.fixture(scope="module")
def private_registry():
    """docker-registry on loopback that answers only USER with PASSWORD."""
    with LoopbackRegistry(users={USER: PASSWORD}) as running:
        yield running


@pytest.fixture
def hub():
    with TestHub() as running:
        yield running


@pytest.fixture
def tiny(hub) -> str:
    """A ~3 MB model: two safetensors shards (LFS, via the CDN) and small JSON files (git blobs)."""
    return hub.add_repo(REPO, make_model(3_000_000, shards=2))


def run_agent(*args: str, timeout: float = 120, env: dict | None = None) -> Run:
    proc = subprocess.run(
        [AGENT, *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "FLEETCACHE_RETRY_BASE_DELAY": "0.01", **(env or {})},
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def fetch_args(hub: TestHub, dest: Path, *extra: str, repo: str = REPO) -> list[str]:
    return ["fetch", "--endpoint", hub.endpoint, "--repo", repo, "--dest", str(dest), *extra]


def expected_bytes(hub: TestHub, repo: str = REPO, revision: str = "main") -> dict[str, bytes]:
    files = hub.repos[repo].commits[hub.repos[repo].resolve(revision)]
    return {path: bytes(b"".join(bytes(c) for c in _blocks(f.content))) for path, f in files.items()}


def _blocks(content):
    offset = 0
    while offset < content.size:
        chunk = content.read(offset, 1 << 20)
        yield chunk
        offset += len(chunk)


def repo_dir(dest: Path, repo: str = REPO) -> Path:
    """Where the hf-cache layout keeps a repo: under `hub/`, the directory HF_HUB_CACHE names."""
    return dest / "hub" / ("models--" + repo.replace("/", "--"))


def snapshot_dir(dest: Path, commit: str, repo: str = REPO) -> Path:
    return repo_dir(dest, repo) / "snapshots" / commit


def published_files_verify(dest: Path, hub: TestHub, repo: str = REPO) -> list[str]:
    """Every file visible under snapshots/ or blobs/ must hash to a digest the hub published.

    Returns the visible snapshot paths; fails the test on any unverified visible byte.
    """
    root = repo_dir(dest, repo)
    digests = {}
    for files in hub.repos[repo].commits.values():
        for f in files.values():
            digests[f.etag] = f
    for blob in (root / "blobs").glob("*") if (root / "blobs").exists() else []:
        if blob.name.startswith("."):
            continue  # hidden partial/journal files are the agent's own, never a reader's
        assert blob.name in digests, f"unexpected visible blob {blob.name}"
        data = blob.read_bytes()
        f = digests[blob.name]
        got = hashlib.sha256(data).hexdigest() if f.lfs else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        assert got == blob.name, f"visible blob {blob.name} does not match its digest"
    visible = []
    for link in (root / "snapshots").rglob("*") if (root / "snapshots").exists() else []:
        if link.is_symlink():
            target = link.resolve()
            assert target.parent == (root / "blobs").resolve(), f"{link} points outside blobs/"
            assert target.exists(), f"{link} dangles"
            visible.append(str(link.relative_to(root / "snapshots")))
    return sorted(visible)
