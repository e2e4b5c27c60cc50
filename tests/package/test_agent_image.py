"""The agent image as a cluster runs it: unpacked from build/package/agent.tar and started as
uid 65532 on a read-only root, with only /tmp, the cache volume and the files Kubernetes
mounts writable (devtools/package/sandbox.py). Every command of a Job's life runs against
the test hub and the S3 test server on loopback, and ends as the same command run from the
virtualenv ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetcache.devtools.package.sandbox import Bundle, Mount, writable_dir
from fleetcache.devtools.testhub import TestHub, make_model
from tests.support.s3 import S3Server

pytestmark = pytest.mark.package

VENV_AGENT = str(Path(sys.executable).parent / "fleetcache-agent")
REPO = "acme/tiny"
ENV = {"FLEETCACHE_RETRY_BASE_DELAY": "0.01", "AWS_EC2_METADATA_DISABLED": "true"}


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict:
        return json.loads(self.stdout)


class Places:
    """Where a run's files are: in the image (container paths, host folders mounted there) or
    in the virtualenv (the host folders themselves)."""

    def __init__(self, work: Path, in_image: bool):
        self.in_image = in_image
        self.host = work / ("image" if in_image else "venv")
        self.host.mkdir()
        self.mounts: list[Mount] = []

    def dir(self, name: str, writable: bool = True) -> str:
        """A folder: the cache volume, the node's disk, a mounted Secret..."""
        host = writable_dir(self.host / name) if writable else self.host / name
        host.mkdir(exist_ok=True)
        if not self.in_image:
            return str(host)
        self.mounts.append(Mount(host, f"/{name}", writable))
        return f"/{name}"

    def termination_log(self) -> str:
        host = self.host / "termination-log"
        host.touch()
        os.chown(host, 65532, 65532)
        if not self.in_image:
            return str(host)
        self.mounts.append(Mount(host, "/dev/termination-log", writable=True))
        return "/dev/termination-log"

    def tmp(self, name: str) -> str:
        """A file in /tmp (the pod's emptyDir)."""
        return f"/tmp/{name}" if self.in_image else str(self.host / name)


def agent(bundle: Bundle | None, places: Places, *args: str) -> Ran:
    if bundle is None:
        result = subprocess.run([VENV_AGENT, *args], capture_output=True, text=True, timeout=300,
                                env={**os.environ, **ENV})
    else:
        result = bundle.run(list(args), mounts=places.mounts, env=ENV)
    return Ran(result.returncode, result.stdout, result.stderr)


def both(work: Path, bundle: Bundle, scenario) -> tuple[list[Ran], list[Ran]]:
    """Run `scenario(run, places)` from the image, then from the virtualenv."""
    outcomes = []
    for image in (bundle, None):
        places = Places(work, in_image=image is not None)
        runs: list[Ran] = []

        def run(*args: str, image: Bundle | None = image, places: Places = places, runs: list[Ran] = runs) -> Ran:
            runs.append(agent(image, places, *args))
            return runs[-1]

        scenario(run, places)
        outcomes.append(runs)
    return outcomes[0], outcomes[1]


def assert_same_exits(in_image: list[Ran], in_venv: list[Ran], expected: list[int]) -> None:
    assert [r.code for r in in_venv] == expected, [r.stderr[-2000:] for r in in_venv]
    assert [r.code for r in in_image] == expected, [r.stderr[-2000:] for r in in_image]


@pytest.fixture(scope="module")
def agent_image(unpacked) -> Bundle:
    return unpacked["agent"]


@pytest.fixture(scope="module")
def hub():
    with TestHub() as running:
        running.add_repo(REPO, make_model(2_000_000, shards=2))
        yield running


def test_a_job_s_life_against_the_hub_runs_from_the_image_as_from_the_virtualenv(agent_image, hub, work):
    """resolve, fetch, verify, prune, then node-warm from the volume fetched; and a fetch of a
    repo the hub does not have, which fails with the same code."""

    def scenario(run, places: Places) -> None:
        cache, node = places.dir("cache"), places.dir("node")
        resolved = run("resolve", "--endpoint", hub.endpoint, "--repo", REPO)
        if resolved.code:
            return
        commit, digest = resolved.json["commit"], resolved.json["manifestDigest"]
        run("fetch", "--endpoint", hub.endpoint, "--repo", REPO, "--dest", cache, "--progress-file",
            places.tmp("progress.json"), "--termination-log", places.termination_log())
        run("verify", "--dest", cache, "--repo", REPO)
        run("prune", "--dest", cache, "--repo", REPO, "--keep", commit)
        run("node-warm", "--source", cache, "--dest", node, "--repo", REPO, "--commit", commit,
            "--manifest-digest", digest, "--node", "node-a", "--status-file", places.tmp("status.json"),
            "--once", "--termination-log", places.termination_log())
        run("fetch", "--endpoint", hub.endpoint, "--repo", "acme/missing", "--dest", cache,
            "--termination-log", places.termination_log())

    in_image, in_venv = both(work, agent_image, scenario)
    missing_repo = in_venv[-1].code
    assert missing_repo != 0
    assert_same_exits(in_image, in_venv, [0, 0, 0, 0, 0, missing_repo])
    assert in_image[0].json["commit"] == in_venv[0].json["commit"]
    assert in_image[2].json["manifestDigest"] == in_venv[2].json["manifestDigest"]
    fetched = sorted(p.relative_to(work / "image" / "cache") for p in (work / "image" / "cache").rglob("*"))
    assert fetched == sorted(p.relative_to(work / "venv" / "cache") for p in (work / "venv" / "cache").rglob("*"))
    warmed = work / "image" / "node"
    assert any(warmed.rglob("node-ready.json")), "node-warm wrote no node-ready.json"


S3_FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": os.urandom(700_001),
            "sub/extra.bin": os.urandom(30_000)}


def test_an_s3_resolve_and_fetch_run_from_the_image_as_from_the_virtualenv(agent_image, work):
    with S3Server() as s3:
        s3.make_bucket("models")
        for path, data in S3_FILES.items():
            s3.put("models", f"tiny/{path}", data, sha256=True)
        creds = S3Server.credentials_dir(work / "creds")
        creds.chmod(0o755)
        for file in creds.iterdir():
            file.chmod(0o644)

        def scenario(run, places: Places) -> None:
            cache = places.dir("cache")
            mounted = str(creds)
            if places.in_image:
                places.mounts.append(Mount(creds, "/creds"))
                mounted = "/creds"
            flags = ["--s3-bucket", "models", "--s3-prefix", "tiny", "--s3-endpoint", s3.endpoint,
                     "--credentials-dir", mounted]
            resolved = run("resolve", *flags)
            if resolved.code:
                return
            manifest = places.host / "manifest"
            manifest.mkdir()
            (manifest / "manifest.json").write_text(json.dumps(resolved.json["manifest"]))
            manifest_dir = places.dir("manifest", writable=False)
            run("fetch", *flags, "--dest", cache, "--commit", resolved.json["commit"],
                "--manifest-digest", resolved.json["manifestDigest"],
                "--manifest-file", f"{manifest_dir}/manifest.json", "--termination-log", places.termination_log())
            run("verify", "--dest", cache, "--repo", resolved.json["repo"])

        in_image, in_venv = both(work, agent_image, scenario)
    assert_same_exits(in_image, in_venv, [0, 0, 0])
    assert in_image[0].json["manifestDigest"] == in_venv[0].json["manifestDigest"]
    snapshots = list((work / "image" / "cache").glob("hub/*/snapshots/*"))
    assert len(snapshots) == 1
    assert (snapshots[0] / "model.safetensors").read_bytes() == S3_FILES["model.safetensors"]


# --- what the sandbox holds the image to -------------------------------------------------------


def python(bundle: Bundle, code: str, mounts: list[Mount] | None = None) -> subprocess.CompletedProcess:
    return bundle.run(["-c", code], mounts=mounts or [], entrypoint=["/venv/bin/python3"])


def test_a_write_outside_tmp_and_the_volume_is_refused(agent_image, work):
    cache = writable_dir(work / "cache")
    result = python(agent_image, "\n".join([
        "import os",
        "open('/tmp/ok', 'w').write('x'); open('/cache/ok', 'w').write('x')",
        "for path in ('/venv/x', '/home/nonroot/x', '/etc/x', '/x'):",
        "    try:",
        "        open(path, 'w')",
        "    except OSError as err:",
        "        print(path, err.errno)",
        "    else:",
        "        print(path, 'WRITTEN')",
        "print('uid', os.getuid(), os.getgid())",
    ]), [Mount(cache, "/cache", writable=True)])
    assert result.returncode == 0, result.stderr
    assert "WRITTEN" not in result.stdout
    assert "uid 65532 65532" in result.stdout
    assert (cache / "ok").read_text() == "x"


def test_every_module_of_the_agent_distribution_imports_in_the_image(agent_image):
    result = python(agent_image, "\n".join([
        "import importlib, pkgutil, fleetcache",
        "names = [m.name for m in pkgutil.walk_packages(fleetcache.__path__, 'fleetcache.')]",
        "for name in names: importlib.import_module(name)",
        "others = ('fleetcache.devtools', 'fleetcache.functions', 'fleetcache.apis')",
        "outside = [n for n in names if n.startswith(others)]",
        "assert 'fleetcache.agent.cli' in names and not outside, outside",
        "print(len(names))",
    ]))
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 20
