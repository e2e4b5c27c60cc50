"""The agent image (no Docker engine here): read its Dockerfile, and prove the agent writes
nothing outside /tmp, the volume and its report files when run with the image's environment."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.agent.conftest import fetch_args

DOCKERFILE = Path(__file__).resolve().parents[2] / "package" / "agent" / "Dockerfile"


def stages() -> list[list[tuple[str, str]]]:
    """Instructions per stage, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        if keyword.upper() == "FROM":
            result.append([])
        if result:  # a global ARG (before the first FROM) belongs to no stage
            result[-1].append((keyword.upper(), rest.strip()))
    return result


def image_env() -> dict[str, str]:
    env = {}
    for keyword, rest in stages()[-1]:
        if keyword == "ENV":
            env.update(pair.split("=", 1) for pair in shlex.split(rest))
    return env


def test_the_image_is_multi_stage_and_the_runtime_copies_from_the_build():
    all_stages = stages()
    assert len(all_stages) >= 2
    assert any(k == "COPY" and rest.startswith("--from=build") for k, rest in all_stages[-1])


def test_the_runtime_runs_as_uid_65532_and_runs_no_commands():
    runtime = stages()[-1]
    assert ("USER", "65532:65532") in runtime
    assert not [rest for keyword, rest in runtime if keyword == "RUN"]


def test_the_runtime_environment_never_writes_bytecode_and_points_home_at_tmp():
    assert image_env() | {"PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp", "TMPDIR": "/tmp"} == image_env()


def test_the_entrypoint_is_the_agent():
    runtime = dict(stages()[-1])
    assert json.loads(runtime["ENTRYPOINT"]) == ["/venv/bin/fleetcache-agent"]


AUDIT = """
import json, os, sys
writes = []
def hook(event, args):
    if event == "open" and args[0] is not None and not isinstance(args[0], int):
        mode, flags = args[1], args[2]
        if (mode and any(c in mode for c in "wax+")) or (flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)):
            writes.append(os.fspath(args[0]))
    elif event == "os.symlink":  # (target, link path, dir_fd): the link path is what is written
        writes.append(os.fspath(args[1]))
    elif event in ("os.rename", "os.replace"):
        writes.extend([os.fspath(args[0]), os.fspath(args[1])])
    elif event in ("os.mkdir", "os.remove", "os.truncate") and not isinstance(args[0], int):
        writes.append(os.fspath(args[0]))
sys.addaudithook(hook)
from fleetcache.agent.cli import main
code = main(sys.argv[2:])
seen = json.dumps(writes)  # before the harness's own write below
with open(sys.argv[1], "w") as f:
    f.write(seen)
sys.exit(code)
"""


def test_a_fetch_writes_only_to_tmp_the_volume_and_its_report_files(hub, tiny, tmp_path):
    """What readOnlyRootFilesystem plus an emptyDir /tmp needs: every write lands in an allowed place."""
    dest, report, home, cwd = tmp_path / "volume", tmp_path / "report", tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    progress = tmp_path / "reports" / "progress.json"
    env = {**os.environ, **image_env(), "HOME": str(home), "TMPDIR": str(home), "FLEETCACHE_RETRY_BASE_DELAY": "0"}
    argv = fetch_args(hub, dest, "--progress-file", str(progress))
    proc = subprocess.run([sys.executable, "-c", AUDIT, str(report), *argv], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    writes = json.loads(report.read_text())
    assert writes, "the audit hook saw no writes at all"
    def allowed(path: str) -> bool:
        path = os.path.abspath(path)
        return path == "/dev/null" or any(path == str(root) or path.startswith(str(root) + os.sep)
                                          for root in (dest, progress.parent))

    assert [w for w in writes if not allowed(w)] == []
    assert not any(home.iterdir()) and not any(cwd.iterdir())
