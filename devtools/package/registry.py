"""The packages and images in a registry: pushed with skopeo and pulled back by digest.

    python -m fleetcache.devtools.package.registry roundtrip [build/package]
    python -m fleetcache.devtools.package.registry push --registry ghcr.io/fleetcache --version v0.1.0

`roundtrip` (the last step of `make package`) starts the CNCF distribution registry
(`docker-registry`) on loopback with a throwaway configuration and storage, pushes the two
image archives and the two xpkgs to it, pulls each back by the digest the push reported, and
checks that the registry serves exactly that manifest, with the archive's own configuration,
at the digest written beside the archive (`<file>.digest`). `push` (`make push-package`)
sends the released artifacts to a real registry, with the credentials of `skopeo login`, and
prints each one's digest.

`loopback_registry` is also the registry of the OCI source's tests and of the demo's OCI act,
with an access log from which `blob_bytes_served` counts what it served.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from fleetcache.devtools.package.images import OUT, ensure_tools, log, run
from fleetcache.devtools.package.oci import read_image_archive
from fleetcache.devtools.package.xpkg import annotated


@dataclass(frozen=True)
class Artifact:
    file: str  # under build/package/
    repository: str  # the repository it is published as
    published: bool  # pushed by `make push-package` (the runtime image travels inside its xpkg)


ARTIFACTS = (
    Artifact("agent.tar", "fleetcache-agent", True),
    Artifact("function-runtime.tar", "function-fleetcache-runtime", False),
    Artifact("function-fleetcache.xpkg", "function-fleetcache", True),
    Artifact("configuration-fleetcache.xpkg", "configuration-fleetcache", True),
)


def transport(archive: Path) -> str:
    """skopeo's name for the archive's format: an OCI layout (index.json) or the tarball
    `docker save` and `crossplane xpkg build` write (manifest.json)."""
    with tarfile.open(archive) as tar:
        names = {name.removeprefix("./") for name in tar.getnames()}
    if "index.json" in names and "oci-layout" in names:
        return "oci-archive"
    if "manifest.json" in names:
        return "docker-archive"
    raise RuntimeError(f"{archive}: neither an OCI archive nor a docker archive")


def archive_config_digest(archive: Path) -> str:
    """The digest of the image configuration an archive holds: the image's identity."""
    with tarfile.open(archive) as tar:
        def read(name: str) -> bytes:
            member = tar.extractfile(name) or tar.extractfile(f"./{name}")
            assert member is not None, name
            return member.read()

        if transport(archive) == "docker-archive":
            manifest = json.loads(read("manifest.json"))
            if len(manifest) != 1:
                raise RuntimeError(f"{archive}: {len(manifest)} images, expected one")
            return "sha256:" + hashlib.sha256(read(manifest[0]["Config"])).hexdigest()
        index = json.loads(read("index.json"))
        blob = json.loads(read(f"blobs/sha256/{index['manifests'][0]['digest'].split(':', 1)[1]}"))
        return blob["config"]["digest"]


def skopeo(*args: str | Path) -> subprocess.CompletedProcess:
    return run(["skopeo", *args])


def push(archive: Path, reference: str, tls_verify: bool = True) -> str:
    """Push an archive to `reference` (registry/repository:tag); the manifest digest pushed.

    An OCI archive goes as it is. A docker tarball (an xpkg) goes as `crossplane xpkg push`
    sends it: its gzip layers byte for byte, each annotated from its config label, in the
    Docker manifest go-containerregistry writes (skopeo's own docker-archive reader would
    recompress the layers and drop the annotations: another digest than the one written
    beside the xpkg)."""
    with tempfile.TemporaryDirectory() as scratch:
        digest_file = Path(scratch) / "digest"
        source = f"oci-archive:{archive}"
        if transport(archive) == "docker-archive":
            source = f"dir:{as_pushed(archive, Path(scratch) / 'image')}"
        skopeo("copy", "--quiet", f"--dest-tls-verify={str(tls_verify).lower()}", "--digestfile", digest_file,
               source, f"docker://{reference}")
        return digest_file.read_text().strip()


def as_pushed(archive: Path, into: Path) -> Path:
    """A docker tarball as skopeo's `dir:` layout (the manifest's own bytes, each blob by its
    hex digest) of the image `crossplane xpkg push` would push."""
    image = annotated(read_image_archive(archive))
    into.mkdir(parents=True)
    (into / "version").write_text("Directory Transport Version: 1.1\n")
    (into / "manifest.json").write_bytes(image.manifest)
    for digest, blob in image.blobs().items():
        (into / digest.split(":", 1)[1]).write_bytes(blob)
    return into


@dataclass(frozen=True)
class Pulled:
    manifest_digest: str  # sha256 of the manifest bytes the registry served
    config_digest: str


def pull(reference: str, tls_verify: bool = True) -> Pulled:
    """Pull `reference` (by digest) into a directory, as it is stored, and read it back."""
    with tempfile.TemporaryDirectory() as scratch:
        skopeo("copy", "--quiet", f"--src-tls-verify={str(tls_verify).lower()}", f"docker://{reference}",
               f"dir:{scratch}")
        raw = (Path(scratch) / "manifest.json").read_bytes()
        config = json.loads(raw)["config"]["digest"]
        config_bytes = (Path(scratch) / config.split(":", 1)[1]).read_bytes()
        if "sha256:" + hashlib.sha256(config_bytes).hexdigest() != config:
            raise RuntimeError(f"{reference}: the configuration pulled does not match its digest")
        return Pulled("sha256:" + hashlib.sha256(raw).hexdigest(), config)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


CONFIG = """version: 0.1
log:
  level: error
  accesslog:
    disabled: {no_access_log}
storage:
  filesystem:
    rootdirectory: {root}
http:
  addr: {address}
"""
HTPASSWD = """auth:
  htpasswd:
    realm: fleetcache
    path: {path}
"""


@contextmanager
def loopback_registry(timeout: float = 30, *, storage: Path | None = None, access_log: Path | None = None,
                      htpasswd: Path | None = None) -> Iterator[str]:
    """The distribution registry on a free loopback port (installed with apt-get when missing),
    its configuration in a temporary directory; yields host:port.

    `storage`: where it keeps what is pushed (default: beside its configuration), for a test
    that changes a stored blob. `access_log`: a file that gets one line per request (the
    combined log format, `blob_bytes_served` reads it), else none is written. `htpasswd`: basic
    auth against that file's bcrypt entries."""
    ensure_tools(["docker-registry"])
    with tempfile.TemporaryDirectory(prefix="fleetcache-registry.") as scratch, ExitStack() as stack:
        address = f"127.0.0.1:{free_port()}"
        config = Path(scratch) / "config.yml"
        config.write_text(CONFIG.format(no_access_log=str(access_log is None).lower(),
                                        root=storage or Path(scratch) / "data", address=address)
                          + (HTPASSWD.format(path=htpasswd) if htpasswd else ""))
        # distribution writes its access log to stdout
        log_to = stack.enter_context(access_log.open("ab")) if access_log else subprocess.DEVNULL
        process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log_to,
                                   stderr=subprocess.PIPE)
        try:
            wait_until_serving(address, process, timeout)
            yield address
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_until_serving(address: str, process: subprocess.Popen, timeout: float) -> None:
    """Until /v2/ answers 200, or 401 (a registry with auth answers, refusing the anonymous)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode() if process.stderr else ""
            raise RuntimeError(f"docker-registry exited {process.returncode}: {err.strip()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as response:
                if response.status == 200:
                    return
        except urllib.error.HTTPError as err:
            if err.code == 401:
                return
            time.sleep(0.2)
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    raise RuntimeError(f"docker-registry did not answer on {address} within {timeout}s")


BLOB_GET = re.compile(r'"GET /v2/\S+/blobs/sha256:[0-9a-f]{64} HTTP/[0-9.]+" (?P<status>\d{3}) (?P<size>\d+)')


def blob_bytes_served(access_log: Path) -> int:
    """The body bytes of every blob GET answered so far (200 or 206), from the access log
    (the combined log format: the request, the status, the size): what a registry served of
    its blobs, manifests and uploads apart."""
    served = 0
    for line in access_log.read_text(errors="replace").splitlines():
        found = BLOB_GET.search(line)
        if found and found["status"] in ("200", "206"):
            served += int(found["size"])
    return served


def requests_logged(access_log: Path, method: str, path_part: str) -> int:
    """How many `method` requests whose path holds `path_part` the access log shows so far."""
    pattern = re.compile(rf'"{method} (\S+) HTTP/[0-9.]+" \d{{3}}')
    return sum(1 for line in access_log.read_text(errors="replace").splitlines()
               if (found := pattern.search(line)) and path_part in found[1])


def expected_digest(archive: Path) -> str | None:
    """The digest written beside an archive (`<file>.digest`), if any."""
    beside = archive.with_name(archive.name + ".digest")
    return beside.read_text().strip() if beside.exists() else None


def roundtrip(folder: Path = OUT, tag: str = "roundtrip") -> dict[str, str]:
    """Push every artifact to a loopback registry and pull each back by digest; raises on any
    difference. Returns each file's pushed digest."""
    ensure_tools(["docker-registry", "skopeo"])
    missing = [a.file for a in ARTIFACTS if not (folder / a.file).exists()]
    if missing:
        raise RuntimeError(f"{folder} lacks {', '.join(missing)}: run make package")
    pushed = {}
    with loopback_registry() as host:
        for artifact in ARTIFACTS:
            archive = folder / artifact.file
            digest = push(archive, f"{host}/fleetcache/{artifact.repository}:{tag}", tls_verify=False)
            pulled = pull(f"{host}/fleetcache/{artifact.repository}@{digest}", tls_verify=False)
            problems = []
            if pulled.manifest_digest != digest:
                problems.append(f"the registry served {pulled.manifest_digest} for {digest}")
            if pulled.config_digest != archive_config_digest(archive):
                problems.append(f"its configuration is {pulled.config_digest}, the archive's "
                                f"{archive_config_digest(archive)}")
            beside = expected_digest(archive)
            if beside != digest:
                problems.append(f"pushed as {digest}, its .digest says {beside}")
            if problems:
                raise RuntimeError(f"{artifact.file}: " + "; ".join(problems))
            pushed[artifact.file] = digest
            log(f"{artifact.file}: pushed and pulled back as {digest}")
    return pushed


def push_release(registry: str, version: str, folder: Path = OUT) -> dict[str, str]:
    """Push the published artifacts as <registry>/<repository>:<version>; their digests."""
    ensure_tools(["skopeo"])
    pushed = {}
    for artifact in ARTIFACTS:
        if artifact.published:
            reference = f"{registry.rstrip('/')}/{artifact.repository}:{version}"
            pushed[reference] = push(folder / artifact.file, reference)
            print(f"{reference}@{pushed[reference]}")
    return pushed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleetcache.devtools.package.registry",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("roundtrip", help="push to a loopback registry and pull back by digest")
    check.add_argument("folder", nargs="?", type=Path, default=OUT)
    release = commands.add_parser("push", help="push the released artifacts to REGISTRY")
    release.add_argument("--registry", required=True, help="e.g. ghcr.io/fleetcache")
    release.add_argument("--version", required=True, help="the tag, e.g. v0.1.0")
    release.add_argument("--folder", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        if args.command == "roundtrip":
            roundtrip(args.folder)
        else:
            push_release(args.registry, args.version, args.folder)
    except RuntimeError as err:
        print(f"package: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
