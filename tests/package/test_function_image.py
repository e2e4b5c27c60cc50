"""The function as Crossplane runs it: the runtime image, and the Function package's own image
(what Crossplane actually starts), unpacked and started as uid 65532 on a read-only root with
mTLS certificates mounted where TLS_SERVER_CERTS_DIR says, as the function runtime mounts
them. `fleetcache render` of every example through it prints byte for byte what it prints
through the virtualenv."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner

from fleetcache.devtools import cli, render
from fleetcache.devtools.package import sandbox
from fleetcache.devtools.package.sandbox import Bundle, Mount
from tests.support.tls import make_pki

pytestmark = pytest.mark.package

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "render"
COMPOSITION_OF = {"FleetCluster": "fleetclusters", "ModelCache": "modelcaches",
                  "ModelCacheGrant": "modelcachegrants", "ModelDeployment": "modeldeployments"}
EXAMPLES = sorted(p.relative_to(ROOT / "examples") for p in (ROOT / "examples").glob("*.yaml")) + \
    [Path("fleet/modelcache.yaml")]


@pytest.fixture(scope="module")
def certificates() -> Iterator[dict[str, Path]]:
    """A CA, the server's certificate (mounted into the image) and Crossplane's client one."""
    pki = make_pki()
    workspace = sandbox.workspace("fleetcache-tls.")
    folders = {}
    for side, pair in (("server", pki.server), ("client", pki.client)):
        folder = workspace / side
        folder.mkdir(mode=0o755)
        for name, data in (("ca.crt", pki.ca), ("tls.crt", pair.cert), ("tls.key", pair.key)):
            (folder / name).write_bytes(data)
            (folder / name).chmod(0o644)  # a Secret volume readable by the function's user
        folders[side] = folder
    try:
        yield folders
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


def wait_serving(address: str, process: subprocess.Popen, client: Path, timeout: float = 60) -> None:
    tls = render.TLSFiles.from_dir(client)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the function exited {process.returncode}: "
                                 f"{process.stderr.read().decode()[-3000:] if process.stderr else ''}")
        with render.channel_to(address, tls) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=1)
                return
            except grpc.FutureTimeoutError:
                continue
    raise AssertionError(f"the function did not serve on {address} within {timeout}s")


@contextmanager
def serving(process: subprocess.Popen, address: str, client: Path) -> Iterator[str]:
    try:
        wait_serving(address, process, client)
        yield address
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module", params=["function", "function-xpkg"])
def image_function(request, unpacked, certificates) -> Iterator[str]:
    """The image's entrypoint with the certificates mounted as Crossplane mounts them; only
    the address differs from the image's command (a free loopback port, not 0.0.0.0:9443)."""
    bundle: Bundle = unpacked[request.param]
    address = f"127.0.0.1:{render.free_port()}"
    process = bundle.start([f"--address={address}"],
                           mounts=[Mount(certificates["server"], "/tls/server")],
                           env={"TLS_SERVER_CERTS_DIR": "/tls/server"})
    with serving(process, address, certificates["client"]) as served:
        yield served


@pytest.fixture(scope="module")
def venv_function(certificates) -> Iterator[str]:
    """The same server from the virtualenv, with the same certificates."""
    address = f"127.0.0.1:{render.free_port()}"
    process = subprocess.Popen([str(Path(sys.executable).parent / "fleetcache-function"), f"--address={address}",
                                "--tls-certs-dir", str(certificates["server"])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with serving(process, address, certificates["client"]) as served:
        yield served


# render stamps each condition when it runs, as Crossplane's reconciler does (metav1.Now): two
# renders a second apart differ there and nowhere else the function decides
STAMP = re.compile(rb"lastTransitionTime: '[^']*'")


def render_example(example: Path, *flags: str) -> tuple[int, bytes, str]:
    kind = render.load_documents(ROOT / "examples" / example)[0]["kind"]
    result = CliRunner().invoke(cli.main, [
        "render", str(ROOT / "examples" / example),
        "--composition", str(ROOT / "compositions" / f"{COMPOSITION_OF[kind]}.yaml"),
        "--xrd", str(ROOT / "apis"), "--required", str(FIXTURES / "required"),
        "--required", str(FIXTURES / "modelcache-partly-warm"), *flags])
    return result.exit_code, STAMP.sub(b"lastTransitionTime: <stamped>", result.stdout_bytes), result.stderr


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_render_through_the_image_prints_what_render_through_the_virtualenv_prints(
        example, image_function, venv_function, certificates):
    tls = ("--tls-certs-dir", str(certificates["client"]))
    through_image = render_example(example, "--address", image_function, *tls)
    through_venv = render_example(example, "--address", venv_function, *tls)
    assert through_image[0] == 0, through_image[2]
    assert through_image == through_venv


def test_the_default_render_prints_what_the_image_serves(image_function, certificates):
    """The virtualenv's default render (a fleetcache-function process it starts, no TLS)."""
    example = Path("fleet/modelcache.yaml")
    assert render_example(example) == render_example(
        example, "--address", image_function, "--tls-certs-dir", str(certificates["client"]))


def test_without_certificates_the_image_refuses_to_serve(unpacked):
    """Crossplane always mounts them; a runtime that does not gets a usage error, not a
    server without TLS."""
    result = unpacked["function"].run(["--address=127.0.0.1:0"], timeout=60)
    assert result.returncode == 2
    assert "--tls-certs-dir" in result.stderr


def test_every_module_of_the_function_distribution_imports_in_the_image(unpacked):
    result = unpacked["function"].run(["-c", "\n".join([
        "import importlib, pkgutil, fleetcache",
        "names = [m.name for m in pkgutil.walk_packages(fleetcache.__path__, 'fleetcache.')]",
        "for name in names: importlib.import_module(name)",
        "assert not [n for n in names if n.startswith(('fleetcache.devtools', 'fleetcache.agent'))], names",
        "print(len(names))",
    ])], entrypoint=["/venv/bin/python3"])
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 50
