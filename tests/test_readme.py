"""The README's five-minute tour matches what the examples and composers actually do."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fleetcache.devtools import render
from fleetcache.functions import naming, protocol
from fleetcache.functions.composers import model_deployment
from tests.support.deployments import cache_required, cache_row
from tests.support.fleet import fleet_cluster

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
TOUR = README[README.index("## A five-minute tour"):README.index("What happens underneath")]
CROSSPLANE_COLUMNS = ["SYNCED", "READY", "COMPOSITION", "AGE"]


def printed_rows(command: str) -> list[list[str]]:
    """The `# ...` lines the tour shows under `kubectl get <command>`."""
    block = TOUR[TOUR.index(f"kubectl get {command}\n"):].splitlines()[1:]
    rows = []
    for line in block:
        if not line.startswith("# ") or re.match(r"# \d\.", line):
            break
        rows.append(line[2:].split())
    return rows


def example(path: str) -> list[dict]:
    return render.load_documents(ROOT / path)


def test_every_file_the_tour_applies_exists_and_holds_fleetcache_kinds():
    paths = re.findall(r"kubectl apply -f (\S+)", TOUR)
    assert paths
    for path in paths:
        assert all(d["apiVersion"] == naming.API_VERSION for d in example(path)), path


@pytest.mark.parametrize("command, kind", [("fleetclusters", "FleetCluster"),
                                           ("modelcaches", "ModelCache"),
                                           ("modelcachegrants", "ModelCacheGrant"),
                                           ("modelcachehydrations", "ModelCacheHydration"),
                                           ("modeldeployments", "ModelDeployment"),
                                           ("modelreplicas", "ModelReplica")])
def test_the_tours_columns_are_the_xrds_then_crossplanes(command, kind):
    xrd = next(d for d in example("apis") if d["spec"]["names"]["kind"] == kind)
    ours = [c["name"] for c in xrd["spec"]["versions"][0]["additionalPrinterColumns"]]
    header = [c for c in printed_rows(command)[0] if c != "..."]
    expected = ["NAME", *ours, *CROSSPLANE_COLUMNS]
    assert header == expected[:len(header)]


def test_the_tours_fleet_clusters_are_the_example_fleet():
    names = sorted(d["metadata"]["name"] for d in example("examples/fleet/fleetclusters.yaml"))
    assert [row[0] for row in printed_rows("fleetclusters")[1:]] == names


def test_the_tours_hydrations_are_named_like_the_composer_names_them():
    cache = example("examples/fleet/modelcache.yaml")[0]["metadata"]["name"]
    for name, cluster, *_ in printed_rows("modelcachehydrations")[1:]:
        assert name == naming.child_name(cache, cluster)


def test_the_tours_replicas_are_where_and_how_compose_model_deployment_puts_them():
    deployment = example("examples/modeldeployment-cached.yaml")[0]
    deployment["metadata"]["uid"] = "1"
    phases = {row[1]: row[2] for row in printed_rows("modelcachehydrations")[1:]}
    cache = example("examples/fleet/modelcache.yaml")[0]["metadata"]["name"]
    labels = {"fleetcache.dev/tier": "serving", "gpu": "h100"}
    fleet = [fleet_cluster(n, labels=labels) for n in sorted(phases)]
    outcome = model_deployment.compose(protocol.Request(
        composite=deployment, required={
            model_deployment.FLEET_CLUSTERS_KEY: fleet,
            **cache_required(*(cache_row(n, p) for n, p in sorted(phases.items())),
                             name=cache)}))
    composed = sorted((r["metadata"]["name"], r["spec"]["clusterName"], r["spec"]["delivery"])
                      for r, _ in outcome.desired.values())
    shown = sorted((row[0], row[1], row[2]) for row in printed_rows("modelreplicas")[1:])
    assert shown == composed


# --- "Try the agent": the shell session runs and prints what the README shows

TRY_AGENT = README[README.index("## Try the agent"):]
TRY_AGENT = TRY_AGENT[:TRY_AGENT.index("\n## ")]
README_PORT = 8765
# What differs between machines and runs: the log's times, the transfer rate, the volume's size and use.
VARYING = [(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"), "<time>"),
           (re.compile(r'"(bytesPerSecond|capacityBytes|usedBytes)": \d+'), r'"\1": <n>')]
STEP = "@@ fleetcache readme step"


def session(section: str) -> list[tuple[str, list[str]]]:
    """The section's shell session: each `$ ` command with the lines shown under it."""
    block = section[section.index("```sh\n") + len("```sh\n"):]
    steps: list[tuple[str, list[str]]] = []
    for line in block[:block.index("```")].splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_session(commands: list[str], tmp_path: Path) -> list[list[str]]:
    """Each command's output (stdout and stderr), the commands run in turn in one bash from the
    clone, on a free port instead of the README's; the whole session is killed if it hangs."""
    port = free_port()
    script = "exec 2>&1\n" + "".join(
        f"echo '{STEP}'\n" + command.replace(".venv/bin/", f"{Path(sys.executable).parent}/")
        .replace(f"127.0.0.1:{README_PORT}", f"127.0.0.1:{port}").replace(f"--port {README_PORT}", f"--port {port}")
        + "\n" for command in commands)
    proc = subprocess.Popen(["bash", "-c", script], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)},
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [part.replace(f"127.0.0.1:{port}", f"127.0.0.1:{README_PORT}").splitlines()
            for part in out.split(STEP + "\n")[1:]]


def as_shown(shown: str, printed: str) -> str:
    """A printed line as the README would show it: the varying numbers masked, and cut where
    the README's line ends in `…`."""
    for pattern, mask in VARYING:
        shown, printed = pattern.sub(mask, shown), pattern.sub(mask, printed)
    cut = shown[:-1].rstrip()
    return shown if shown.endswith("…") and printed.startswith(cut) else printed


def test_try_the_agent_prints_what_the_readme_shows(tmp_path):
    steps = session(TRY_AGENT)
    printed = run_session([command for command, _ in steps], tmp_path)
    for (command, shown), lines in zip(steps, printed, strict=True):
        masked = [as_shown(s, p) for s, p in zip(shown, lines, strict=False)] + lines[len(shown):]
        assert [as_shown(s, s) for s in shown] == masked, command
