"""Registries for the OCI source's tests: the CNCF distribution registry on loopback, and a small fake.

    with LoopbackRegistry(users={"puller": "secret"}) as registry:    # docker-registry, htpasswd auth
        digest = registry.push_modelpack("models/tiny", "v1", FILES)   # pushed by hand, over the HTTP API
        registry.blob_file(layer_digest).write_bytes(...)               # corrupt what the registry stores

`LoopbackRegistry` runs `/usr/bin/docker-registry` (Debian's build of distribution, installed
with apt-get when missing) with a throwaway configuration, storage and access log, through
devtools' `loopback_registry` (devtools/package/registry.py), and pushes by hand with
devtools' `Pusher` (devtools/package/modelpack.py: the distribution API, never the code under
test), which the demo's OCI act uses too; the ModelPack vocabulary (`descriptor`,
`modelpack_layers`, ...) is that module's, named here for the tests. htpasswd entries are
bcrypt, made with the system's libcrypt (libxcrypt), since bcrypt is not in the venv.

`FakeRegistry` serves manifests and blobs from memory with what a test needs to see and
inject: the bearer token flow (a realm on another port that wants basic credentials), blob
redirects to a CDN on a third port, fault statuses, and every request's Authorization header.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import io
import json
import secrets
import tarfile
import tempfile
import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from fleetcache.devtools.package.modelpack import (  # noqa: F401 - the tests' vocabulary, from here
    EMPTY_CONFIG,
    OCI_MANIFEST,
    Pusher,
    descriptor,
    manifest_of,
    modelpack_config,
    modelpack_layers,
    sha256,
)
from fleetcache.devtools.package.registry import blob_bytes_served, loopback_registry, requests_logged

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
USER, PASSWORD = "puller", "pull-Pa55word"  # the one account of a private LoopbackRegistry in the tests


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


class LoopbackRegistry(Pusher):
    """docker-registry on a free loopback port (devtools' loopback_registry) with its storage
    and access log in a temporary directory; `users` turns on htpasswd auth, and pushes go as
    the first user."""

    def __init__(self, users: dict[str, str] | None = None):
        super().__init__("", users)
        self.stack = ExitStack()
        self.root = Path()
        self.access_log = Path()

    def __enter__(self) -> LoopbackRegistry:
        scratch = Path(self.stack.enter_context(tempfile.TemporaryDirectory(prefix="fleetcache-oci.")))
        self.root, self.access_log = scratch / "data", scratch / "access.log"
        htpasswd = None
        if self.users:
            htpasswd = scratch / "htpasswd"
            htpasswd.write_text("".join(f"{u}:{bcrypt_hash(p)}\n" for u, p in self.users.items()))
        try:
            self.host = self.stack.enter_context(loopback_registry(
                storage=self.root, access_log=self.access_log, htpasswd=htpasswd))
        except BaseException:
            self.stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stack.close()

    def blob_bytes_served(self) -> int:
        return blob_bytes_served(self.access_log)

    def requests_logged(self, method: str, path_part: str) -> int:
        return requests_logged(self.access_log, method, path_part)

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
