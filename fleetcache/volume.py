"""The cache volume's layout as the agent writes it and the replicas read it: the one
definition of every path both sides name (agent/layout.py writes them; the composers
build HF_HUB_CACHE and FLEETCACHE_MODEL from them)."""

from __future__ import annotations

import re

from fleetcache.shapes import OCI_REPOSITORY, oci_reference_parts

STATE_DIR = ".fleetcache"  # the agent's own state, beside the HF cache and never inside it
HUB_DIR = "hub"  # HF_HUB_CACHE for readers: DEST/hub
COMMITS_DIR = "commits"  # a flat fetch's commits: DEST/commits/<commit>
CURRENT_LINK = "current"  # DEST/current -> commits/<the latest commit Ready>
# The name an OCI source's files are kept under (oci_repo), as `--repo` may name it.
OCI_REPO = re.compile(rf"oci/[A-Za-z0-9.-]+(_[0-9]{{1,5}})?/{OCI_REPOSITORY.pattern}")


def repo_folder(repo: str) -> str:
    """The Hugging Face cache's folder of a repository: models--ORG--NAME."""
    return "models--" + repo.replace("/", "--")


def hf_hub_cache(mount_path: str) -> str:
    """HF_HUB_CACHE on a volume mounted at `mount_path`: the agent's `hub/` directory."""
    return f"{mount_path.rstrip('/')}/{HUB_DIR}"


def hf_snapshot_path(mount_path: str, repo: str, commit: str) -> str:
    """One commit's snapshot in the Hugging Face cache layout: hub/models--ORG--NAME/snapshots/<commit>."""
    return f"{hf_hub_cache(mount_path)}/{repo_folder(repo)}/snapshots/{commit}"


def flat_commit_path(root: str, commit: str) -> str:
    """A flat fetch's directory of one commit under a volume mounted at `root` (the agent's
    --dest, or a replica's mount path): the one definition FLEETCACHE_MODEL is built from."""
    return f"{root.rstrip('/')}/{COMMITS_DIR}/{commit}"


def oci_repo(reference: str) -> str:
    """The repository name an OCI source's files are kept under: oci/<host>/<repository>, its
    tag or digest dropped and a port after `_` (registry:5000/models/qwen3:v1 is
    oci/registry_5000/models/qwen3). No host name has `_`, so no two registries share a
    name, and no `:` reaches a path. The reference must match shapes.OCI_REFERENCE."""
    parts = oci_reference_parts(reference)
    if parts is None:
        raise ValueError(f"{reference!r} is not an OCI reference")
    host, repository, _, _ = parts
    return f"oci/{host.replace(':', '_')}/{repository}"
