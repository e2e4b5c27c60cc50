"""`make package`, the images: the agent image and the function runtime image, built with
buildah from `package/*/Dockerfile` into OCI archives beside their digests.

    python -m fleetcache.devtools.package.images [--out build/package]

This machine cannot pull the production bases (distroless to run, debian:12-slim to build), so
the Dockerfiles' build arguments select Debian 12 bases bootstrapped here with mmdebstrap:

- the build base: Debian 12 with python3-venv, as `debian:12-slim` plus what the build stage
  installs;
- the runtime base: distroless `python3-debian12:nonroot` rebuilt from the same installation,
  file for file from the packages distroless takes (no shell, no package manager), with its
  users, CA bundle, directories and configuration.

Both are cached under `build/base/<key>/`, keyed by every input (the suites and their release
dates, the package lists, the recipe's version): a new Debian point or security release, or
a changed list, bootstraps them again. Wheels are built on the host (`pip wheel`, which
trusts this machine's certificate store, where a build inside the chroot does not) with the
project's constraints, and the Dockerfile installs them offline (`WHEELS`).
design/packages.md, "Images", records what the first real build taught.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
OUT = BUILD / "package"
STORAGE = BUILD / "containers"

# The Debian tools `make package` and `make test-package` use, by the command each installs.
TOOLS = {"buildah": "buildah", "mmdebstrap": "mmdebstrap", "skopeo": "skopeo", "umoci": "umoci",
         "bwrap": "bubblewrap", "docker-registry": "docker-registry", "setpriv": "util-linux"}


@dataclass(frozen=True)
class Image:
    name: str  # the folder under package/
    archive: str  # the OCI archive under build/package/
    reference: str  # the name the archive carries (org.opencontainers.image.ref.name)

    @property
    def dockerfile(self) -> Path:
        return REPO / "package" / self.name / "Dockerfile"

    @property
    def local_tag(self) -> str:
        return f"localhost/fleetcache/{self.name}:build"


IMAGES = (Image("agent", "agent.tar", "fleetcache-agent"),
          Image("function", "function-runtime.tar", "function-fleetcache-runtime"))


def log(message: str) -> None:
    print(f"package: {message}", file=sys.stderr, flush=True)


def run(command: Sequence[str | Path], **kwargs) -> subprocess.CompletedProcess:
    """Run a command; on failure, raise with its stderr (the tools are quiet when they work)."""
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(str(c) for c in command[:4])} ... exited {result.returncode}:\n"
                           f"{result.stderr.strip()[-4000:]}")
    return result


# --- the Debian tools ----------------------------------------------------------------------


def ensure_tools(tools: Iterable[str] = TOOLS) -> None:
    """apt-get install whatever of `tools` is missing (quiet, idempotent: nothing when all are there)."""
    missing = sorted({TOOLS[t] for t in tools if shutil.which(t) is None})
    if not missing:
        return
    if os.geteuid() != 0:
        raise RuntimeError(f"install {' '.join(missing)} (apt-get, as root) or run this as root")
    log(f"installing {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-qq"], env=env)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)


# --- buildah with this checkout's own storage ----------------------------------------------


def storage_driver() -> str:
    """overlay where the kernel can stack it on build/ (ext4, xfs: as root, no fuse), else vfs.

    vfs copies the whole root filesystem for every step and every stage, cached or not: an
    image took 107 s cold and 81-97 s with every step cached; overlay, 26 s and 5 s."""
    if forced := os.environ.get("FLEETCACHE_STORAGE_DRIVER"):
        return forced
    BUILD.mkdir(parents=True, exist_ok=True)
    kind = run(["stat", "--file-system", "--format=%T", BUILD]).stdout.strip()
    return "vfs" if kind in ("overlayfs", "tmpfs", "fuseblk", "UNKNOWN (0x794c7630)") else "overlay"


def buildah_command(*args: str | Path) -> list[str]:
    """buildah on storage under build/ (no daemon), so `make clean` clears it and nothing is
    shared with the machine's own containers."""
    driver = storage_driver()
    return [str(a) for a in ("buildah", "--root", STORAGE / driver, "--runroot", STORAGE / f"{driver}-run",
                             "--storage-driver", driver, *args)]


def buildah(*args: str | Path) -> subprocess.CompletedProcess:
    return run(buildah_command(*args))


def has_image(reference: str) -> bool:
    return subprocess.run(buildah_command("inspect", "--type", "image", reference),
                          capture_output=True).returncode == 0


def import_rootfs(rootfs_tar: Path, reference: str, config: Sequence[str]) -> None:
    """A one-layer image from a root filesystem tarball (ownership and modes as the tar has them)."""
    container = buildah("from", "--quiet", "scratch").stdout.strip()
    try:
        buildah("add", "--quiet", container, rootfs_tar, "/")
        buildah("config", *config, container)
        buildah("commit", "--quiet", "--timestamp", "0", container, reference)
    finally:
        buildah("rm", container)


# --- the Debian 12 bases ---------------------------------------------------------------------

SUITE = "bookworm"  # Debian 12: the Python 3.11 distroless python3-debian12 ships
SUITES = (SUITE, f"{SUITE}-updates", f"{SUITE}-security")
APT_SOURCES = Path("/etc/apt")


def host_mirrors(sources: Path = APT_SOURCES) -> dict[str, str]:
    """Each Debian 12 suite's mirror, as this machine's apt sources name it (where its Debian
    tools came from); FLEETCACHE_DEBIAN_MIRROR and FLEETCACHE_DEBIAN_SECURITY override them."""
    found: dict[str, str] = {}
    for file in sorted(sources.glob("sources.list.d/*.sources")):
        for stanza in file.read_text().split("\n\n"):
            fields = {k.strip().lower(): v.split() for k, _, v in
                      (line.partition(":") for line in stanza.splitlines() if line and not line.startswith("#"))}
            if "deb" in fields.get("types", []) and fields.get("uris"):
                for suite in fields.get("suites", []):
                    found.setdefault(suite, fields["uris"][0].rstrip("/"))
    for file in [sources / "sources.list", *sorted(sources.glob("sources.list.d/*.list"))]:
        for line in file.read_text().splitlines() if file.exists() else []:
            words = [w for w in line.split("#", 1)[0].split() if not w.startswith("[")]
            if len(words) >= 3 and words[0] == "deb":
                found.setdefault(words[2], words[1].rstrip("/"))
    for suite, variable in ((SUITE, "FLEETCACHE_DEBIAN_MIRROR"), (f"{SUITE}-updates", "FLEETCACHE_DEBIAN_MIRROR"),
                            (f"{SUITE}-security", "FLEETCACHE_DEBIAN_SECURITY")):
        if os.environ.get(variable):
            found[suite] = os.environ[variable].rstrip("/")
    missing = [suite for suite in SUITES if suite not in found]
    if missing:
        raise RuntimeError(f"no apt source on this machine names {', '.join(missing)}: set "
                           "FLEETCACHE_DEBIAN_MIRROR and FLEETCACHE_DEBIAN_SECURITY to Debian mirror URLs")
    return {suite: found[suite] for suite in SUITES}
# Bumped when the recipe below changes what a base holds for the same inputs.
RECIPE = 1
# The build base: the essential set and apt (what debian:12-slim is), python3-venv (what the
# build stage installs), and every package the runtime base takes files from.
RUNTIME_PACKAGES = (
    # distroless base and cc (GoogleContainerTools/distroless: base/, cc/)
    "base-files", "netbase", "tzdata", "libc6", "libgcc-s1", "libgomp1", "libstdc++6", "libssl3",
    # distroless python3 (python3/python.bzl), Debian 12's packages
    "libbz2-1.0", "libdb5.3", "libexpat1", "liblzma5", "libsqlite3-0", "libuuid1", "libncursesw6",
    "libtinfo6", "python3-distutils", "zlib1g", "libcom-err2", "libcrypt1", "libgssapi-krb5-2",
    "libk5crypto3", "libkeyutils1", "libkrb5-3", "libkrb5support0", "libnsl2", "libreadline8",
    "libtirpc3", "libffi8", "libpython3.11-minimal", "libpython3.11-stdlib", "python3.11-minimal",
)
BUILD_PACKAGES = ("python3-venv", "ca-certificates", *RUNTIME_PACKAGES)
# Files the runtime base takes from the installed system that no package lists (generated by
# maintainer scripts); distroless generates the same ones.
GENERATED = ("etc/ssl/certs/ca-certificates.crt", "etc/ld.so.cache")
MERGED_USR = ("bin", "lib", "lib64", "sbin")  # Debian 12 roots are merged-/usr: /lib -> usr/lib
PASSWD = "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" \
         "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
GROUP = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RUNTIME_CONFIG = ("--env", f"PATH={PATH}", "--env", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
                  "--env", "LANG=C.UTF-8", "--user", "65532", "--workingdir", "/home/nonroot",
                  "--entrypoint", '["/usr/bin/python3.11"]', "--cmd", "")
BUILD_CONFIG = ("--env", f"PATH={PATH}", "--env", "LANG=C.UTF-8", "--cmd", '["/bin/bash"]')


@dataclass(frozen=True)
class Bases:
    key: str
    build: str  # the buildah references the Dockerfiles' BUILD_BASE and BASE take
    runtime: str
    folder: Path


def release_date(mirror: str, suite: str) -> str:
    """The `Date:` of a suite's InRelease: a new one means packages may have changed."""
    with urllib.request.urlopen(f"{mirror}/dists/{suite}/InRelease", timeout=30) as response:
        for line in response.read().decode(errors="replace").splitlines():
            if line.startswith("Date:"):
                return line.split(":", 1)[1].strip()
    raise RuntimeError(f"{mirror}/dists/{suite}/InRelease has no Date")


def architecture() -> str:
    return run(["dpkg", "--print-architecture"]).stdout.strip()


def base_inputs() -> dict:
    mirrors = host_mirrors()
    return {"recipe": RECIPE, "architecture": architecture(),
            "sources": [f"deb {mirror} {suite} main" for suite, mirror in mirrors.items()],
            "releases": {suite: release_date(mirror, suite) for suite, mirror in mirrors.items()},
            "variant": "apt", "build": sorted(BUILD_PACKAGES), "runtime": sorted(RUNTIME_PACKAGES)}


def ensure_bases(cache: Path | None = None) -> Bases:
    """The two bases for these inputs: from the cache, or bootstrapped (about half a minute).
    The cache is build/base/, or FLEETCACHE_BASE_CACHE (to share it between clones of one
    machine: a fresh clone, as CI's, starts without build/)."""
    cache = cache or Path(os.environ.get("FLEETCACHE_BASE_CACHE") or BUILD / "base")
    inputs = base_inputs()
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    folder = cache / key
    if not (folder / "inputs.json").exists():
        log(f"bootstrapping the Debian 12 bases ({key})")
        started = time.monotonic()
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache))
        bootstrap(inputs, staging / "build-base.tar")
        derive_runtime(staging / "build-base.tar", staging / "runtime-base.tar", inputs["architecture"])
        (staging / "inputs.json").write_text(json.dumps(inputs, indent=2, sort_keys=True) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
        for stale in cache.iterdir():  # one base per machine: the inputs of the last build
            if stale != folder:
                shutil.rmtree(stale, ignore_errors=True)
        log(f"bootstrapped in {time.monotonic() - started:.0f}s")
    bases = Bases(key, f"localhost/fleetcache/build-base:{key}", f"localhost/fleetcache/base:{key}", folder)
    if not has_image(bases.build):
        import_rootfs(folder / "build-base.tar", bases.build, BUILD_CONFIG)
    if not has_image(bases.runtime):
        import_rootfs(folder / "runtime-base.tar", bases.runtime, RUNTIME_CONFIG)
    return bases


def bootstrap(inputs: dict, out: Path) -> None:
    epoch = str(int(time.time()) // 86400 * 86400)  # one day's builds share their timestamps
    run(["mmdebstrap", "--quiet", "--mode=root", f"--variant={inputs['variant']}", "--format=tar",
         f"--architectures={inputs['architecture']}", "--components=main",
         f"--include={','.join(inputs['build'])}", "--aptopt=Acquire::Retries \"3\"",
         SUITE, out, *inputs["sources"]], env={**os.environ, "SOURCE_DATE_EPOCH": epoch})


def canonical(path: str) -> str:
    """A path as it is stored in a merged-/usr root (`lib/x` is `usr/lib/x`), without `./`."""
    path = path.strip().removeprefix(".").strip("/")
    head, _, rest = path.partition("/")
    return f"usr/{head}/{rest}".rstrip("/") if head in MERGED_USR and rest else path


def derive_runtime(build_tar: Path, out: Path, arch: str) -> None:
    """The runtime base: the files of RUNTIME_PACKAGES as installed in the build base, plus the
    generated files, the merged-/usr links, users, /tmp, /home/nonroot and `python3`."""
    with tarfile.open(build_tar) as source:
        members = {canonical(m.name): m for m in source.getmembers() if canonical(m.name)}
        wanted = set(GENERATED)
        for package in RUNTIME_PACKAGES:
            listing = members.get(f"var/lib/dpkg/info/{package}:{arch}.list") or \
                members.get(f"var/lib/dpkg/info/{package}.list")
            if listing is None:
                raise RuntimeError(f"the build base lacks {package}")
            data = source.extractfile(listing)
            assert data is not None
            wanted |= {canonical(line) for line in data.read().decode().splitlines() if canonical(line)}
        for name in list(wanted):
            member = members.get(name)
            if member is not None and member.islnk():
                wanted.add(canonical(member.linkname))
        for name in list(wanted):
            parts = name.split("/")
            wanted |= {"/".join(parts[:i]) for i in range(1, len(parts))}
        with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as target:
            for link in MERGED_USR:
                target.addfile(members[link])
            for name in sorted(wanted):
                member = members.get(name)
                if member is None or name in MERGED_USR:
                    continue  # a listed file a maintainer script removed or diverted
                copy = member.replace(name=name, linkname=canonical(member.linkname)
                                      if member.islnk() else member.linkname, deep=False)
                target.addfile(copy, source.extractfile(member) if member.isreg() else None)
            for name, text in (("etc/passwd", PASSWD), ("etc/group", GROUP)):
                add_file(target, name, text.encode(), 0o644)
            add_dir(target, "tmp", 0o1777)
            add_dir(target, "home/nonroot", 0o700, owner=65532)
            add_dir(target, "root", 0o700)
            for alias in ("usr/bin/python3", "usr/bin/python"):
                if alias not in wanted:
                    info = tarfile.TarInfo(alias)
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, "python3.11", 0o777
                    target.addfile(info)


def add_file(target: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    target.addfile(info, io.BytesIO(data))


def add_dir(target: tarfile.TarFile, name: str, mode: int, owner: int = 0) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, mode, owner, owner
    target.addfile(info)


# --- wheels, built on the host -------------------------------------------------------------


def dockerfile_arg(dockerfile: Path, name: str) -> str:
    for line in dockerfile.read_text().splitlines():
        words = line.split(maxsplit=1)
        if words[:1] == ["ARG"] and words[1].startswith(f"{name}="):
            return words[1].split("=", 1)[1].strip()
    raise RuntimeError(f"{dockerfile} declares no ARG {name}=<default>")


def build_context(image: Image, into: Path) -> Path:
    """What the Dockerfile's build stage copies from the repository, laid out as it copies it
    (WORKDIR /src): the distribution's source, which `pip wheel` builds as the image does."""
    for line in image.dockerfile.read_text().splitlines():
        words = line.split()
        if words[:1] != ["COPY"] or any(w.startswith("--") for w in words[1:]):
            continue
        *sources, destination = words[1:]
        for source in sources:
            origin = REPO / source.rstrip("/")
            target = into / destination
            if origin.is_dir():
                shutil.copytree(origin, target, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target = target / origin.name if destination.endswith("/") else target
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target)
    return into


def ensure_wheels(image: Image, cache: Path = BUILD / "wheels") -> Path:
    """Wheels of every dependency of the image's distribution and of its build backend, at the
    versions constraints.txt and the Dockerfile pin; rebuilt when either changes."""
    if sys.version_info[:2] != (3, 11):
        raise RuntimeError("the images run Python 3.11: build their wheels with a Python 3.11 virtualenv")
    backend = dockerfile_arg(image.dockerfile, "BUILD_BACKEND")
    key = hashlib.sha256(b"\0".join([
        (REPO / "constraints.txt").read_bytes(), (REPO / "package" / image.name / "pyproject.toml").read_bytes(),
        backend.encode(), sys.implementation.cache_tag.encode()])).hexdigest()[:16]
    folder = cache / f"{image.name}-{key}"
    if (folder / ".complete").exists():
        return folder
    log(f"building the {image.name} image's wheels")
    for stale in cache.glob(f"{image.name}-*"):
        shutil.rmtree(stale)
    with tempfile.TemporaryDirectory() as staged:
        context = build_context(image, Path(staged))
        run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
             "--wheel-dir", folder, "--constraint", context / "constraints.txt", context, backend])
    for own in folder.glob("fleetcache*.whl"):  # the image builds its own from the source
        own.unlink()
    (folder / ".complete").touch()
    return folder


# --- the images ------------------------------------------------------------------------------


def build_image(image: Image, bases: Bases, wheels: Path, out: Path) -> str:
    """Build one image from its Dockerfile and save it as an OCI archive; returns its digest."""
    started = time.monotonic()
    buildah("build", "--quiet", "--isolation", "chroot", "--layers", "--timestamp", "0",
            "--file", image.dockerfile, "--tag", image.local_tag,
            "--build-arg", f"BUILD_BASE={bases.build}", "--build-arg", f"BASE={bases.runtime}",
            "--build-arg", "WHEELS=/wheels", "--volume", f"{wheels}:/wheels:ro", REPO)
    archive = out / image.archive
    digest_file = out / f"{image.archive}.digest"
    partial, digest = out / f".{image.archive}.partial", out / f".{image.archive}.digest"
    partial.unlink(missing_ok=True)
    buildah("push", "--quiet", "--digestfile", digest, image.local_tag,
            f"oci-archive:{partial}:{image.reference}")
    os.replace(partial, archive)
    value = digest.read_text().strip()
    digest.unlink()
    if archive_digest(archive) != value:
        raise RuntimeError(f"{archive}: its index names {archive_digest(archive)}, buildah pushed {value}")
    digest_file.write_text(value + "\n")
    log(f"{image.archive}: {value} ({archive.stat().st_size / 2**20:.1f} MiB, "
        f"{time.monotonic() - started:.0f}s)")
    return value


def archive_digest(archive: Path) -> str:
    """The manifest digest an OCI archive's index.json names (its only image)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        manifests = json.load(member)["manifests"]
    if len(manifests) != 1:
        raise RuntimeError(f"{archive}: {len(manifests)} manifests, expected one")
    return manifests[0]["digest"]


def build_all(out: Path = OUT) -> dict[str, str]:
    ensure_tools()
    out.mkdir(parents=True, exist_ok=True)
    bases = ensure_bases()
    return {image.archive: build_image(image, bases, ensure_wheels(image), out) for image in IMAGES}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleetcache.devtools.package.images",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=OUT, help="where the archives go (build/package)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        build_all(args.out)
    except RuntimeError as err:
        print(f"package: {err}", file=sys.stderr)
        return 1
    log(f"images built in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
