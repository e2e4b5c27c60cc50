"""What `make package` built, unpacked once per session. Every module here is marked
`package` (pytestmark), so `make test` leaves them out and `make test-package` runs them."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetcache.devtools.package import sandbox

REPO = Path(__file__).resolve().parents[2]
BUILT = REPO / "build" / "package"
IMAGES = {"agent": BUILT / "agent.tar", "function": BUILT / "function-runtime.tar"}
XPKGS = {"function": BUILT / "function-fleetcache.xpkg", "configuration": BUILT / "configuration-fleetcache.xpkg"}


def built(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path.relative_to(REPO)} is missing: run make package (make test-package does)")
    return path


@pytest.fixture(scope="session")
def unpacked() -> Iterator[dict[str, sandbox.Bundle]]:
    """Each image and the Function package's image, unpacked: {"agent", "function", "function-xpkg"}."""
    workspace = sandbox.workspace("fleetcache-images.")

    class Lazy(dict):
        def __missing__(self, name: str) -> sandbox.Bundle:
            archive = XPKGS["function"] if name == "function-xpkg" else IMAGES[name]
            self[name] = sandbox.unpack(built(archive), workspace / name)
            return self[name]

    try:
        yield Lazy()
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


@pytest.fixture
def work() -> Iterator[Path]:
    """A scratch directory the images' user (65532) can reach."""
    path = sandbox.workspace()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
