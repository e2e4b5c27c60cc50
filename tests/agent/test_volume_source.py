"""An existing volume (spec.source.volume), as the agent checks it: `resolve --manifest-file`
pins the manifest the volume ships, `verify --layout flat` re-hashes every file in place
(against that manifest, or the Hub listing of a pinned commit), and a mismatch is
SourceVolumeMismatch (21) naming at most 5 files. Nothing is ever written to the volume."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from fleetcache import exitcodes
from tests.agent.conftest import REPO, expected_bytes, run_agent

FILES = {"config.json": b'{"model_type": "tiny"}', "model.safetensors": b"w" * 40_000,
         "tokenizer/vocab.txt": b"a\nb\nc\n"}


def fill(root: Path, files: dict[str, bytes]) -> Path:
    for path, content in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(content)
    return root


def manifest_of(files: dict[str, bytes]) -> list[dict]:
    return [{"path": p, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()}
            for p, b in sorted(files.items())]


def ship_manifest(root: Path, files: dict[str, bytes]) -> Path:
    path = root / ".fleetcache" / "manifest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest_of(files)))
    return path


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root with its size and mtime: what "never written" is checked by."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_resolve_pins_the_volumes_manifest_file_as_a_vol_commit(tmp_path):
    manifest = ship_manifest(fill(tmp_path, FILES), FILES)
    run = run_agent("resolve", "--manifest-file", str(manifest))
    assert run.code == 0, run.stderr
    record = run.json
    assert record["commit"].startswith("vol-") and len(record["commit"]) == 44
    assert record["manifest"] == manifest_of(FILES)
    assert (record["files"], record["bytes"]) == (3, sum(len(b) for b in FILES.values()))


def test_resolve_applies_the_patterns_to_the_manifest_and_changes_the_commit(tmp_path):
    manifest = ship_manifest(fill(tmp_path, FILES), FILES)
    every = run_agent("resolve", "--manifest-file", str(manifest)).json
    some = run_agent("resolve", "--manifest-file", str(manifest), "--allow", "*.json").json
    assert [r["path"] for r in some["manifest"]] == ["config.json"]
    assert some["commit"] != every["commit"]


def test_a_volume_without_its_manifest_file_is_source_not_found(tmp_path):
    run = run_agent("resolve", "--manifest-file", str(tmp_path / ".fleetcache/manifest.json"))
    assert run.code == exitcodes.BY_REASON["SourceNotFound"].code
    assert "spec.source.volume.manifest.file" in run.stderr


def test_a_malformed_manifest_file_is_refused_as_invalid_source(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps([{"path": "../etc/passwd", "size": 1, "sha256": "0" * 64}]))
    assert run_agent("resolve", "--manifest-file", str(path)).code == \
        exitcodes.BY_REASON["InvalidSource"].code


def test_verify_in_place_passes_when_every_byte_matches_and_writes_nothing(tmp_path):
    root = fill(tmp_path / "vol", FILES)
    manifest = ship_manifest(tmp_path, FILES)
    digest = run_agent("resolve", "--manifest-file", str(manifest)).json["manifestDigest"]
    before = snapshot(root)
    run = run_agent("verify", "--dest", str(root), "--layout", "flat", "--manifest-file",
                    str(manifest), "--manifest-digest", digest)
    assert run.code == 0, run.stderr
    assert run.json == {"files": 3, "bytes": sum(len(b) for b in FILES.values()),
                        "manifestDigest": digest}
    assert snapshot(root) == before


def test_verify_in_place_refuses_a_volume_whose_files_and_manifest_were_replaced_since_resolve(tmp_path):
    manifest = ship_manifest(tmp_path, FILES)
    pinned = run_agent("resolve", "--manifest-file", str(manifest)).json["manifestDigest"]
    replaced = {**FILES, "model.safetensors": b"r" * 40_000}
    root = fill(tmp_path / "vol", replaced)
    ship_manifest(tmp_path, replaced)  # shard and manifest.json agree with each other, not with the pin
    run = run_agent("verify", "--dest", str(root), "--layout", "flat", "--manifest-file",
                    str(manifest), "--manifest-digest", pinned)
    assert run.code == exitcodes.BY_REASON["InvalidConfiguration"].code, run.stderr
    assert f"--manifest-digest {pinned} is not the manifest's digest" in run.stderr
    assert run.stdout == ""


def test_a_mismatch_is_source_volume_mismatch_naming_the_files(tmp_path):
    root = fill(tmp_path / "vol", {**FILES, "model.safetensors": b"x" * 40_000})
    (root / "tokenizer/vocab.txt").unlink()
    manifest = ship_manifest(tmp_path, FILES)
    progress = tmp_path / "progress.json"
    run = run_agent("verify", "--dest", str(root), "--layout", "flat", "--manifest-file",
                    str(manifest), "--progress-file", str(progress))
    assert run.code == exitcodes.BY_REASON["SourceVolumeMismatch"].code == 21
    record = json.loads(progress.read_text())
    assert record["reason"] == "SourceVolumeMismatch"
    assert "model.safetensors (digest mismatch)" in record["message"]
    assert "tokenizer/vocab.txt" in record["message"]
    assert "config.json" not in record["message"]


def test_a_mismatch_names_at_most_five_files(tmp_path):
    files = {f"shard-{i}.bin": bytes([i]) * 10 for i in range(8)}
    root = fill(tmp_path / "vol", {p: b"?" * 10 for p in files})
    manifest = ship_manifest(tmp_path, files)
    run = run_agent("verify", "--dest", str(root), "--layout", "flat", "--manifest-file",
                    str(manifest))
    assert run.code == 21
    assert "8 of 8 files" in run.stderr and "and 3 more" in run.stderr
    assert sum(f"shard-{i}.bin" in run.stderr for i in range(8)) == 5


def test_a_symlink_out_of_the_volume_is_no_copy(tmp_path):
    outside = fill(tmp_path / "elsewhere", {"config.json": FILES["config.json"]})
    root = fill(tmp_path / "vol", {p: b for p, b in FILES.items() if p != "config.json"})
    os.symlink(outside / "config.json", root / "config.json")
    manifest = ship_manifest(tmp_path, FILES)
    run = run_agent("verify", "--dest", str(root), "--layout", "flat", "--manifest-file",
                    str(manifest))
    assert run.code == 21 and "config.json (outside the volume)" in run.stderr


def test_verify_in_place_against_the_hub_listing_of_a_pinned_commit(tmp_path, hub, tiny):
    root = fill(tmp_path / "vol", expected_bytes(hub))
    run = run_agent("verify", "--dest", str(root), "--layout", "flat", "--endpoint",
                    hub.endpoint, "--repo", REPO, "--revision", tiny)
    assert run.code == 0, run.stderr
    first = sorted(expected_bytes(hub))[0]
    (root / first).write_bytes(b"tampered")
    run = run_agent("verify", "--dest", str(root), "--layout", "flat", "--endpoint",
                    hub.endpoint, "--repo", REPO, "--revision", tiny)
    assert run.code == 21 and first in run.stderr
