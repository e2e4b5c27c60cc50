"""The cache volume's layout as the agent writes it and the replicas read it: the one
definition of every path both sides name (agent/layout.py writes them; the composers
build HF_HUB_CACHE and FLEETCACHE_MODEL from them)."""

from __future__ import annotations

STATE_DIR = ".fleetcache"  # the agent's own state, beside the HF cache and never inside it
HUB_DIR = "hub"  # HF_HUB_CACHE for readers: DEST/hub
COMMITS_DIR = "commits"  # a flat fetch's commits: DEST/commits/<commit>
CURRENT_LINK = "current"  # DEST/current -> commits/<the latest commit Ready>


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
