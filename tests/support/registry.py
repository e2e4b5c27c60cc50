"""Registries for the OCI source's tests: the CNCF distribution registry on loopback, and a small fake.

    with LoopbackRegistry(users={"puller": "secret"}) as registry:    # docker-registry, htpasswd auth
        digest = registry.push_modelpack("models/tiny", "v1", FILES)   # pushed by hand, over the HTTP API
        registry.blob_file(layer_digest).write_bytes(...)               # corrupt what the registry stores

`LoopbackRegistry` runs `/usr/bin/docker-registry` (Debian's build of distribution) with a
throwaway configuration and storage, as devtools/package/registry.py does for packages, and
pushes with the distribution API (POST an upload, PUT it with its digest, PUT the manifest),
never with the code under test. htpasswd entries are bcrypt, made with the system's libcrypt
(libxcrypt), since bcrypt is not in the venv.

`FakeRegistry` serves manifests and blobs from memory with what a test needs to see and
inject: the bearer token flow (a realm on another port that wants basic credentials), blob
redirects to a CDN on a third port, fault statuses, and every request's Authorization header.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import hashlib
import io
import json
import re
import secrets
import subprocess
import tarfile
import tempfile
import threading
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from fleetcache.devtools.package.registry import free_port, wait_until_serving

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY_CONFIG = "application/vnd.oci.image.config.v1+json"


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def bcrypt_hash(password: str) -> str:
    """An htpasswd bcrypt hash from libcrypt (`$2b$`, the form distribution's htpasswd reads)."""
    lib = ctypes.CDLL(ctypes.util.find_library("crypt") or "libcrypt.so.1")
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt_gensalt.restype = ctypes.c_char_p
    salt = lib.crypt_gensalt(b"$2b$", 5, None, 0)
    hashed = lib.crypt(password.encode(), salt)
    assert hashed and hashed.startswith(b"$2b$"), "libcrypt has no bcrypt"
    return hashed.decode()


def tar_of(files: dict[str, bytes], prefix: str = "") -> bytes:
    """An uncompressed tar of `files` under `prefix`, with the directory entries an image layer has."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folders = sorted({f"{prefix}{p}".rsplit("/", 1)[0] for p in files if "/" in f"{prefix}{p}"})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for path, data in files.items():
            info = tarfile.TarInfo(f"{prefix}{path}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def descriptor(media_type: str, data: bytes, annotations: dict | None = None) -> dict:
    found = {"mediaType": media_type, "digest": sha256(data), "size": len(data)}
    return {**found, "annotations": annotations} if annotations else found


def modelpack_layers(files: dict[str, bytes], flavor: str = "cncf") -> list[tuple[dict, bytes]]:
    """One `.raw` layer per file, its path in the `org.<flavor>.model.filepath` annotation."""
    return [(descriptor(f"application/vnd.{flavor}.model.weight.v1.raw", data,
                        {f"org.{flavor}.model.filepath": path}), data) for path, data in files.items()]


def manifest_of(layers: list[tuple[dict, bytes]], config: tuple[str, bytes]) -> bytes:
    body = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": descriptor(config[0], config[1]),
            "layers": [d for d, _ in layers]}
    return json.dumps(body, indent=1).encode()


def modelpack_config(flavor: str = "cncf") -> tuple[str, bytes]:
    return (f"application/vnd.{flavor}.model.config.v1+json",
            json.dumps({"descriptor": {"name": "tiny"}, "modelfs": {"type": "layers"}}).encode())


BLOB_GET = re.compile(r'"GET /v2/\S+/blobs/sha256:[0-9a-f]{64} HTTP/[0-9.]+" (?P<status>\d{3}) (?P<size>\d+)')


class LoopbackRegistry:
    """docker-registry on a free loopback port; `users` turns on htpasswd auth."""

    def __init__(self, users: dict[str, str] | None = None):
        self.users = users or {}
        self.stack = ExitStack()
        self.host = ""
        self.root = Path()
        self.access_log = Path()

    def __enter__(self) -> LoopbackRegistry:
        scratch = Path(self.stack.enter_context(tempfile.TemporaryDirectory(prefix="fleetcache-oci.")))
        self.root = scratch / "data"
        self.host = f"127.0.0.1:{free_port()}"
        self.access_log = scratch / "access.log"
        config = ["version: 0.1", "log:", "  level: error", "  accesslog:", "    disabled: false",
                  "storage:", "  filesystem:", f"    rootdirectory: {self.root}", "  delete:", "    enabled: true",
                  "http:", f"  addr: {self.host}"]
        if self.users:
            htpasswd = scratch / "htpasswd"
            htpasswd.write_text("".join(f"{u}:{bcrypt_hash(p)}\n" for u, p in self.users.items()))
            config += ["auth:", "  htpasswd:", "    realm: fleetcache-test", f"    path: {htpasswd}"]
        (scratch / "config.yml").write_text("\n".join(config) + "\n")
        access_log = self.stack.enter_context(self.access_log.open("wb"))
        process = subprocess.Popen(["docker-registry", "serve", str(scratch / "config.yml")],
                                   stdout=access_log, stderr=subprocess.PIPE)
        self.stack.callback(self._stop, process)
        try:
            self._wait(process)
        except BaseException:
            self.stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stack.close()

    @staticmethod
    def _stop(process: subprocess.Popen) -> None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _wait(self, process: subprocess.Popen) -> None:
        if not self.users:
            wait_until_serving(self.host, process, 30)
            return
        # with auth, /v2/ answers 401: wait until it answers at all
        for _ in range(150):
            try:
                self._call("GET", "/v2/")
                return
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError(f"docker-registry exited {process.returncode}") from None
                threading.Event().wait(0.2)
        raise RuntimeError("docker-registry did not start")

    # -- pushing, by hand --------------------------------------------------------------------
    def _call(self, method: str, path: str, data: bytes | None = None, headers: dict | None = None):
        url = path if path.startswith("http") else f"http://{self.host}{path}"
        request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        if self.users:
            user, password = next(iter(self.users.items()))
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        return urllib.request.urlopen(request, timeout=30)

    def push_blob(self, repository: str, data: bytes) -> str:
        digest = sha256(data)
        with self._call("POST", f"/v2/{repository}/blobs/uploads/") as started:
            location = started.headers["Location"]
        if not location.startswith("http"):
            location = f"http://{self.host}{location}"
        joiner = "&" if "?" in location else "?"
        self._call("PUT", f"{location}{joiner}digest={digest}", data,
                   {"Content-Type": "application/octet-stream"}).close()
        return digest

    def push_manifest(self, repository: str, reference: str, body: bytes, media_type: str = OCI_MANIFEST) -> str:
        with self._call("PUT", f"/v2/{repository}/manifests/{reference}", body,
                        {"Content-Type": media_type}) as answer:
            assert answer.headers["Docker-Content-Digest"] == sha256(body)
        return sha256(body)

    def push_image(self, repository: str, tag: str, layers: list[tuple[dict, bytes]],
                   config: tuple[str, bytes] = (EMPTY_CONFIG, b"{}")) -> str:
        """Push the blobs and the manifest; the manifest's digest."""
        for _, data in layers:
            self.push_blob(repository, data)
        self.push_blob(repository, config[1])
        return self.push_manifest(repository, tag, manifest_of(layers, config))

    def push_modelpack(self, repository: str, tag: str, files: dict[str, bytes], flavor: str = "cncf") -> str:
        return self.push_image(repository, tag, modelpack_layers(files, flavor), modelpack_config(flavor))

    def blob_bytes_served(self) -> int:
        """The body bytes of every blob GET answered so far, from the access log (the combined
        log format: the request, the status, the size)."""
        served = 0
        for line in self.access_log.read_text(errors="replace").splitlines():
            found = BLOB_GET.search(line)
            if found and found["status"] in ("200", "206"):
                served += int(found["size"])
        return served

    def requests_logged(self, method: str, path_part: str) -> int:
        """How many `method` requests whose path holds `path_part` the access log shows so far."""
        pattern = re.compile(rf'"{method} (\S+) HTTP/[0-9.]+" \d{{3}}')
        return sum(1 for line in self.access_log.read_text(errors="replace").splitlines()
                   if (found := pattern.search(line)) and path_part in found[1])

    def manifest(self, repository: str, reference: str) -> tuple[str, dict]:
        """A stored manifest, read by hand: its digest and body."""
        with self._call("GET", f"/v2/{repository}/manifests/{reference}", headers={"Accept": OCI_MANIFEST}) as got:
            body = got.read()
        return sha256(body), json.loads(body)

    def blob(self, repository: str, digest: str) -> bytes:
        with self._call("GET", f"/v2/{repository}/blobs/{digest}") as got:
            return got.read()

    def blob_file(self, digest: str) -> Path:
        """Where the filesystem driver keeps a blob's bytes (registry/storage/paths.go: blobDataPathSpec)."""
        hexa = digest.split(":", 1)[1]
        return self.root / "docker/registry/v2/blobs/sha256" / hexa[:2] / hexa / "data"


# -- the fake ---------------------------------------------------------------------------------

@dataclass
class Seen:
    server: str  # registry | realm | cdn
    method: str
    path: str
    authorization: str | None
    range: str | None


@dataclass
class FakeRegistry:
    """Manifests and blobs of one repository from memory (see the module docstring).

    `token_users`: the registry wants a bearer token from the realm, which wants these basic
    credentials (empty: the realm hands tokens to anyone). `cdn`: blob GETs are redirected to
    another port. `faults`: statuses answered, in turn, to the next manifest or blob requests."""

    repository: str = "models/tiny"
    token_users: dict[str, str] | None = None
    cdn: bool = False
    faults: list[int] = field(default_factory=list)
    retry_after: str = "0"
    manifests: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # by tag and by digest
    blobs: dict[str, bytes] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    token: str = field(default_factory=lambda: "tok-" + secrets.token_hex(16))

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.servers: list[ThreadingHTTPServer] = []

    def add_image(self, tag: str, layers: list[tuple[dict, bytes]], config: tuple[str, bytes]) -> str:
        for data in [*(data for _, data in layers), config[1]]:
            self.blobs[sha256(data)] = data
        body = manifest_of(layers, config)
        self.manifests[tag] = self.manifests[sha256(body)] = (OCI_MANIFEST, body)
        return sha256(body)

    def add_index(self, tag: str, children: list[str]) -> str:
        body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": d, "size": len(self.manifests[d][1])} for d in children]}).encode()
        self.manifests[tag] = self.manifests[sha256(body)] = (OCI_INDEX, body)
        return sha256(body)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.servers[0].server_address[1]}"

    def url(self, number: int) -> str:
        return f"http://127.0.0.1:{self.servers[number].server_address[1]}"

    def __enter__(self) -> FakeRegistry:
        for name in ("registry", "realm", "cdn"):
            server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(name))
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)
        return self

    def __exit__(self, *exc) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()

    def _handler(self, name: str):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                """Quiet."""

            def do_HEAD(self) -> None:
                self.do_GET()

            def do_GET(self) -> None:
                with fake.lock:
                    fake.seen.append(Seen(name, self.command, self.path, self.headers.get("Authorization"),
                                          self.headers.get("Range")))
                getattr(fake, f"_{name}")(self)

            def answer(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

        return Handler

    def _registry(self, req) -> None:
        path = urlsplit(req.path).path
        if self.token_users is not None and req.headers.get("Authorization") != f"Bearer {self.token}":
            challenge = (f'Bearer realm="{self.url(1)}/token",service="fake-registry",'
                         f'scope="repository:{self.repository}:pull"')
            req.answer(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', {"WWW-Authenticate": challenge})
            return
        with self.lock:
            fault = self.faults.pop(0) if self.faults else None
        if fault:
            req.answer(fault, b"{}", {"Retry-After": self.retry_after})
            return
        prefix = f"/v2/{self.repository}/"
        kind, _, name = path.removeprefix(prefix).partition("/")
        if kind == "manifests" and name in self.manifests:
            media_type, body = self.manifests[name]
            req.answer(200, body, {"Content-Type": media_type, "Docker-Content-Digest": sha256(body)})
        elif kind == "blobs" and name in self.blobs:
            if self.cdn:
                req.answer(307, b"", {"Location": f"{self.url(2)}/cdn/{name}?signature=abc"})
            else:
                self._serve_blob(req, name)
        else:
            req.answer(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')

    def _realm(self, req) -> None:
        query = parse_qs(urlsplit(req.path).query)
        allowed = {base64.b64encode(f"{u}:{p}".encode()).decode() for u, p in (self.token_users or {}).items()}
        sent = (req.headers.get("Authorization") or "").removeprefix("Basic ")
        if allowed and sent not in allowed:
            req.answer(401, b"{}")
            return
        assert query.get("scope") == [f"repository:{self.repository}:pull"], query
        req.answer(200, json.dumps({"token": self.token, "expires_in": 300}).encode(),
                   {"Content-Type": "application/json"})

    def _cdn(self, req) -> None:
        self._serve_blob(req, urlsplit(req.path).path.removeprefix("/cdn/"))

    def _serve_blob(self, req, digest: str) -> None:
        data = self.blobs[digest]
        wanted = req.headers.get("Range")
        if not wanted:
            req.answer(200, data)
            return
        start, _, end = wanted.removeprefix("bytes=").partition("-")
        first, last = int(start), min(int(end), len(data) - 1)
        req.answer(206, data[first:last + 1], {"Content-Range": f"bytes {first}-{last}/{len(data)}"})

    def requests(self, server: str) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.server == server]
