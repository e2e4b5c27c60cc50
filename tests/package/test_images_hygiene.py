"""What each built image holds and how it starts: a numeric non-root user, an exec-form
entrypoint that needs no shell (the production base has none, and neither has the local one),
no compiler, no test or demo code, and a size within 10% of the bound design/packages.md
records ("Images")."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from fleetcache.devtools.package.sandbox import Bundle
from tests.package.conftest import IMAGES, REPO, built

pytestmark = pytest.mark.package

NOTE = REPO / "design" / "packages.md"
SHELLS = ("sh", "bash", "dash", "ash", "busybox", "zsh", "ksh", "mksh")
COMPILERS = re.compile(r"^(cc|c\+\+|gcc|g\+\+|cpp|clang|clang\+\+|tcc|ld|as|[\w-]*-gcc|[\w-]*-g\+\+)(-[\d.]+)?$")
GROWTH = 1.10


def inside(bundle: Bundle, path: str) -> Path:
    """`path` as the image resolves it (absolute symlinks stay in the root filesystem)."""
    current = bundle.rootfs
    parts = [p for p in path.split("/") if p]
    hops = 0
    while parts:
        current = current / parts.pop(0)
        if current.is_symlink():
            hops += 1
            assert hops < 40, f"{path}: a symlink loop"
            target = str(current.readlink())
            base = bundle.rootfs if target.startswith("/") else current.parent
            rest = [p for p in target.split("/") if p] + parts
            current, parts = base, rest
    return current


@pytest.fixture(scope="module", params=sorted(IMAGES))
def image(request, unpacked) -> tuple[str, Bundle]:
    return request.param, unpacked[request.param]


def test_the_user_is_numeric_and_not_root(image):
    _, bundle = image
    user = str(bundle.config.get("User"))
    assert re.fullmatch(r"\d+(:\d+)?", user), f"USER {user!r}: runAsNonRoot can only verify a numeric uid"
    assert bundle.user == (65532, 65532)


def test_the_entrypoint_is_exec_form_and_needs_no_shell(image):
    name, bundle = image
    entrypoint = bundle.entrypoint
    assert entrypoint and entrypoint[0].startswith("/"), entrypoint
    assert entrypoint[0] not in {f"/bin/{s}" for s in SHELLS} | {f"/usr/bin/{s}" for s in SHELLS}
    script = inside(bundle, entrypoint[0])
    assert script.is_file(), f"{entrypoint[0]} is not in the image"
    first = script.read_bytes()[:128].split(b"\n", 1)[0]
    if first.startswith(b"#!"):
        interpreter = first[2:].decode().split()[0]
        assert Path(interpreter).name.startswith("python"), f"{entrypoint[0]} runs {interpreter}"
        assert inside(bundle, interpreter).read_bytes()[:4] == b"\x7fELF", f"{interpreter} is not a binary"
    else:
        assert first[:4] == b"\x7fELF"


def test_the_image_has_no_shell(image):
    _, bundle = image
    found = [f"{d}/{s}" for d in ("/bin", "/usr/bin", "/sbin", "/usr/sbin", "/usr/local/bin")
             for s in SHELLS if inside(bundle, f"{d}/{s}").exists()]
    assert found == [], "nothing at run time may need a shell: the production base has none"


def test_the_image_has_no_compiler(image):
    _, bundle = image
    found = [str(p.relative_to(bundle.rootfs)) for d in ("usr/bin", "usr/local/bin", "venv/bin")
             if (bundle.rootfs / d).is_dir() for p in (bundle.rootfs / d).iterdir() if COMPILERS.match(p.name)]
    assert found == []


def test_the_image_has_no_test_or_demo_code(image):
    _, bundle = image
    site = next((bundle.rootfs / "venv" / "lib").glob("python3*/site-packages"))
    ours = site / "fleetcache"
    assert ours.is_dir()
    assert not (ours / "devtools").exists(), "the developer tools (test hub, demo, render) are in no image"
    assert [p.name for p in site.iterdir() if p.name in ("tests", "test", "bench", "examples", "demo")] == []
    assert [str(p.relative_to(site)) for p in ours.rglob("*.py")
            if p.name.startswith("test_") or p.name == "conftest.py"] == []


def test_the_source_is_compiled_for_a_read_only_root(image):
    """Every module of ours has bytecode valid whatever the files' timestamps (the layers carry
    none): nothing is compiled, or written, at run time."""
    _, bundle = image
    site = next((bundle.rootfs / "venv" / "lib").glob("python3*/site-packages"))
    for source in (site / "fleetcache").rglob("*.py"):
        cached = list((source.parent / "__pycache__").glob(f"{source.stem}.cpython-3*.pyc"))
        assert cached, f"{source.relative_to(site)} has no bytecode"
        flags = int.from_bytes(cached[0].read_bytes()[4:8], "little")
        assert flags == 0b01, f"{cached[0].relative_to(site)}: not an unchecked hash-based pyc"


# --- sizes ---------------------------------------------------------------------------------------


def compressed_size(archive: Path) -> int:
    """What a node pulls: the manifest's config and layers."""
    with tarfile.open(archive) as tar:
        def read(name: str) -> bytes:
            member = tar.extractfile(name)
            assert member is not None
            return member.read()

        index = json.loads(read("index.json"))
        manifest = json.loads(read(f"blobs/sha256/{index['manifests'][0]['digest'].split(':', 1)[1]}"))
    return manifest["config"]["size"] + sum(layer["size"] for layer in manifest["layers"])


def recorded_bound(archive: str) -> float:
    """The compressed size design/packages.md records for `archive`, in MiB."""
    for line in NOTE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 2 and cells[0] == f"`{archive}`":
            return float(cells[2].split()[0])
    raise AssertionError(f"design/packages.md records no size for {archive} (a row starting | `{archive}` |)")


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_the_image_stays_within_ten_percent_of_its_recorded_size(name):
    archive = built(IMAGES[name])
    size = compressed_size(archive) / 2**20
    bound = recorded_bound(archive.name)
    assert size <= bound * GROWTH, (f"{archive.name} is {size:.1f} MiB, more than 10% past the {bound} MiB "
                                    "design/packages.md records: find what grew, or record the new size")
