"""The node agent: `node-prepare` (directories, ownership, node-check.json, deletion) and `node-label`."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

from fleetcache.agent import node_agent
from fleetcache.agent.node_plan import LABEL_PREFIX, label_key
from tests.agent.conftest import run_agent
from tests.agent.node_support import COMMIT, make_volume, model_files, node_warm

NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)


def keep(tmp_path, rows) -> Path:
    path = tmp_path / "keep.json"
    path.write_text(json.dumps(rows))
    return path


def placed(*names):
    return {name: {"since": None, "afterRemoval": "1h"} for name in names}


def removed(name, ago: timedelta, after="1h"):
    return {name: {"since": (NOW - ago).isoformat().replace("+00:00", "Z"), "afterRemoval": after}}


def root_with(tmp_path, *dirs) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    for d in dirs:
        (root / d).mkdir(parents=True)
        (root / d / "weights").write_text("x")
    return root


def prepare(root, keep_file):
    return node_agent.prepare(root, keep_file, now=NOW)


# -- node-prepare ------------------------------------------------------------------------------------

AS_ROOT = os.geteuid() == 0
WARMER = 65532 if AS_ROOT else os.geteuid()  # without root the agent leaves its own uid (and says so)


def test_a_placed_cache_gets_its_directory_owned_by_the_warmer_uid(tmp_path):
    root = root_with(tmp_path)
    prepare(root, keep(tmp_path, placed("team-a/llama")))
    directory = root / "team-a/llama"
    assert directory.is_dir()
    assert (directory.stat().st_uid, directory.stat().st_gid) == (WARMER, WARMER)
    assert (directory / ".fleetcache").stat().st_uid == WARMER
    assert (root / "team-a").stat().st_uid == os.geteuid() and (root / "team-a").stat().st_mode & 0o777 == 0o755


def test_node_check_says_size_free_and_whether_the_root_is_its_own_filesystem(tmp_path):
    root = root_with(tmp_path)
    prepare(root, keep(tmp_path, placed("team-a/llama")))
    check = json.loads((root / "team-a/llama/.fleetcache/node-check.json").read_text())
    st = os.statvfs(root)
    assert check["dedicated"] is False
    assert check["sizeBytes"] == st.f_blocks * st.f_frsize and 0 < check["freeBytes"] <= check["sizeBytes"]


def mountinfo(tmp_path, mount_point, fs_root) -> Path:
    path = tmp_path / "mountinfo"
    path.write_text("22 1 253:1 / / rw,relatime - ext4 /dev/vda1 rw\n"
                    f"45 22 259:0 {fs_root} {mount_point} rw,relatime - xfs /dev/nvme0n1 rw\n")
    return path


def test_a_root_that_is_a_filesystem_of_its_own_is_dedicated(tmp_path, monkeypatch):
    root = root_with(tmp_path)
    monkeypatch.setenv(node_agent.MOUNTINFO_ENV, str(mountinfo(tmp_path, root, "/")))
    assert node_agent.is_dedicated(root) is True


def test_a_bind_mount_of_a_directory_of_another_filesystem_is_not_dedicated(tmp_path, monkeypatch):
    root = root_with(tmp_path)
    monkeypatch.setenv(node_agent.MOUNTINFO_ENV, str(mountinfo(tmp_path, root, "/var/lib/models")))
    assert node_agent.is_dedicated(root) is False


def test_a_mount_point_path_with_a_space_is_unescaped(tmp_path, monkeypatch):
    root = tmp_path / "node cache"
    root.mkdir()
    monkeypatch.setenv(node_agent.MOUNTINFO_ENV, str(mountinfo(tmp_path, str(root).replace(" ", "\\040"), "/")))
    assert node_agent.is_dedicated(root) is True


def test_a_directory_not_in_the_keep_list_is_deleted(tmp_path):
    root = root_with(tmp_path, "team-a/llama", "team-a/old")
    result = prepare(root, keep(tmp_path, placed("team-a/llama")))
    assert result["deleted"] == ["team-a/old"]
    assert (root / "team-a/llama/weights").exists() and not (root / "team-a/old").exists()


def test_a_removed_cache_stays_until_after_removal_has_passed(tmp_path):
    root = root_with(tmp_path, "team-a/recent", "team-a/expired")
    prepare(root, keep(tmp_path, {**removed("team-a/recent", timedelta(minutes=30)),
                                  **removed("team-a/expired", timedelta(minutes=90))}))
    assert (root / "team-a/recent/weights").exists() and not (root / "team-a/expired").exists()


def test_a_namespace_left_with_no_cache_is_removed(tmp_path):
    root = root_with(tmp_path, "team-b/gone")
    prepare(root, keep(tmp_path, placed("team-a/llama")))
    assert not (root / "team-b").exists()


def test_names_that_are_not_dns_labels_are_never_touched(tmp_path):
    root = root_with(tmp_path, "lost+found", "team-a/Not_A_Cache")
    prepare(root, keep(tmp_path, {}))
    assert (root / "lost+found/weights").exists() and (root / "team-a/Not_A_Cache/weights").exists()


def test_a_symlink_out_of_the_root_is_never_followed_or_deleted_through(tmp_path):
    outside = tmp_path / "outside"
    (outside / "precious").mkdir(parents=True)
    (outside / "precious/data").write_text("keep me")
    root = root_with(tmp_path)
    (root / "team-x").symlink_to(outside)
    prepare(root, keep(tmp_path, {**placed("team-x/precious")}))
    assert sorted(p.name for p in (outside / "precious").iterdir()) == ["data"]  # no node-check.json written there
    assert (root / "team-x").is_symlink()
    prepare(root, keep(tmp_path, {}))
    assert (outside / "precious/data").read_text() == "keep me"


def test_a_deleted_tree_is_chowned_back_to_root_before_removal(tmp_path, monkeypatch):
    root = root_with(tmp_path, "team-a/old")
    os.chown(root / "team-a/old/weights", WARMER, WARMER)
    owners = []
    real_rmtree = node_agent.shutil.rmtree
    monkeypatch.setattr(node_agent.shutil, "rmtree",
                        lambda path: owners.append((Path(path) / "weights").stat().st_uid) or real_rmtree(path))
    prepare(root, keep(tmp_path, {}))
    assert owners == [0 if AS_ROOT else os.geteuid()]


def test_a_missing_or_invalid_keep_list_changes_nothing(tmp_path):
    root = root_with(tmp_path, "team-a/llama")
    assert prepare(root, tmp_path / "absent.json") == {"created": [], "deleted": []}
    (tmp_path / "bad.json").write_text(json.dumps({"../etc": {"since": None}}))
    assert prepare(root, tmp_path / "bad.json") == {"created": [], "deleted": []}
    assert (root / "team-a/llama/weights").exists()


def test_node_prepare_once_from_the_command_line(tmp_path):
    root = root_with(tmp_path)
    result = run_agent("node-prepare", "--root", str(root), "--keep-file", str(keep(tmp_path, placed("a/b"))),
                       "--once")
    assert result.code == 0 and result.json == {"created": ["a/b"], "deleted": []}


# -- node-label --------------------------------------------------------------------------------------

class FakeNodes:
    """CoreV1Api's read_node/patch_node with strategic-merge semantics for labels (None deletes)."""

    def __init__(self, labels):
        self.labels = dict(labels)
        self.patches = []

    def read_node(self, name):
        return SimpleNamespace(metadata=SimpleNamespace(labels=dict(self.labels)))

    def patch_node(self, name, body):
        self.patches.append((name, body))
        for key, value in body["metadata"]["labels"].items():
            if value is None:
                self.labels.pop(key, None)
            else:
                self.labels[key] = value


def warm_cache(tmp_path, root, name):
    vol = tmp_path / f"vol-{name.replace('/', '-')}"
    digest = make_volume(vol, model_files())
    assert node_warm(vol, root / name, digest, "--once").code == 0


def test_a_ready_placed_cache_labels_its_own_node_with_the_commit(tmp_path):
    root = root_with(tmp_path)
    warm_cache(tmp_path, root, "team-a/llama")
    api = FakeNodes({"kubernetes.io/hostname": "gpu-1"})
    node_agent.label(root, keep(tmp_path, placed("team-a/llama")), node_agent.NodeLabels(api, "gpu-1"))
    assert api.labels == {"kubernetes.io/hostname": "gpu-1", label_key("team-a", "llama"): COMMIT}
    assert api.patches[0][0] == "gpu-1"


def test_the_label_key_is_the_first_16_hex_of_the_caches_sha256():
    import hashlib

    assert label_key("team-a", "llama") == LABEL_PREFIX + hashlib.sha256(b"team-a/llama").hexdigest()[:16]


def test_labels_of_caches_no_longer_ready_or_placed_are_removed_and_others_untouched(tmp_path):
    root = root_with(tmp_path, "team-a/cold")
    warm_cache(tmp_path, root, "team-a/removed")
    api = FakeNodes({"gpu": "a100", label_key("team-a", "cold"): COMMIT, label_key("team-a", "removed"): COMMIT,
                     label_key("team-z", "unknown"): COMMIT})
    rows = {**placed("team-a/cold"), **removed("team-a/removed", timedelta(minutes=5))}
    node_agent.label(root, keep(tmp_path, rows), node_agent.NodeLabels(api, "gpu-1"))
    assert api.labels == {"gpu": "a100"}


def test_labels_already_right_are_not_patched_again(tmp_path):
    root = root_with(tmp_path)
    warm_cache(tmp_path, root, "team-a/llama")
    api = FakeNodes({label_key("team-a", "llama"): COMMIT})
    assert node_agent.label(root, keep(tmp_path, placed("team-a/llama")), node_agent.NodeLabels(api, "gpu-1")) == {}
    assert api.patches == []


def test_a_marker_without_its_snapshot_sets_no_label(tmp_path):
    import shutil

    root = root_with(tmp_path)
    warm_cache(tmp_path, root, "team-a/llama")
    shutil.rmtree(root / "team-a/llama/hub")
    api = FakeNodes({})
    node_agent.label(root, keep(tmp_path, placed("team-a/llama")), node_agent.NodeLabels(api, "gpu-1"))
    assert api.labels == {}


def test_a_forged_marker_value_is_not_a_label_value(tmp_path):
    root = root_with(tmp_path, "team-a/llama/.fleetcache")
    (root / "team-a/llama/.fleetcache/node-ready.json").write_text(json.dumps({"commit": "x" * 70}))
    api = FakeNodes({})
    node_agent.label(root, keep(tmp_path, placed("team-a/llama")), node_agent.NodeLabels(api, "gpu-1"))
    assert api.labels == {}


def test_node_label_writes_the_labels_file_stand_in(tmp_path):
    root = root_with(tmp_path)
    warm_cache(tmp_path, root, "team-a/llama")
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"fleetcache.dev/node-cache": "enabled"}))
    result = run_agent("node-label", "--root", str(root), "--node", "gpu-1", "--keep-file",
                       str(keep(tmp_path, placed("team-a/llama"))), "--labels-file", str(labels), "--once")
    assert result.code == 0
    assert json.loads(labels.read_text()) == {"fleetcache.dev/node-cache": "enabled",
                                              label_key("team-a", "llama"): COMMIT}


def test_a_root_that_is_not_a_directory_exits_15_naming_root(tmp_path):
    result = run_agent("node-prepare", "--root", str(tmp_path / "absent"), "--keep-file",
                       str(keep(tmp_path, {})), "--once")
    assert result.code == 15 and "--root" in result.stderr
