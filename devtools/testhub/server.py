"""A local Hugging Face Hub look-alike over real HTTP, with a second "CDN" host and faults.

It honours the Hub facts the agent depends on (DESIGN §4): repo listing with sizes and
digests, tree paging via `Link`, resolve with `X-Repo-Commit`/`X-Linked-Etag`/`X-Linked-Size`
and a 302 to another host for LFS files, Range and HEAD, token checks with the Hub's
error codes. Faults are injected per request so tests can prove retries and refusals,
and every request is recorded (headers, status, body bytes) so tests can measure
transfer and prove the token never reaches the CDN.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import socket
import struct
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from fleetcache.devtools.testhub.content import BytesContent, Content, git_blob_sha1_of, iter_content, sha256_of

SEND_BLOCK = 1 << 20
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf", ".onnx")


@dataclass
class HubFile:
    path: str
    content: Content
    lfs: bool

    @cached_property
    def sha256(self) -> str:
        return sha256_of(self.content)

    @cached_property
    def pointer(self) -> bytes:
        return (
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\n"
            f"size {self.content.size}\n"
        ).encode()

    @cached_property
    def blob_id(self) -> str:
        """The git blob sha1: of the content for plain files, of the LFS pointer for LFS files."""
        if self.lfs:
            return hashlib.sha1(b"blob %d\0" % len(self.pointer) + self.pointer).hexdigest()
        return git_blob_sha1_of(self.content)

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.blob_id


@dataclass
class Repo:
    name: str
    private: bool = False
    gated: bool = False
    commits: dict[str, dict[str, HubFile]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    # Raw listing overrides, to serve malformed listings the agent must refuse.
    raw_siblings: dict[str, list] = field(default_factory=dict)

    def resolve(self, revision: str) -> str | None:
        if revision in self.refs:
            return self.refs[revision]
        return revision if revision in self.commits else None


@dataclass
class Fault:
    """One injected failure, applied to the next `times` matching requests (None = all)."""

    kind: str  # reset | truncate | corrupt | status | slow | hang
    path: str = "*"  # fnmatch against the decoded request path
    host: str = "any"  # hub | cdn | any
    times: int | None = 1
    after_bytes: int = 0  # reset/truncate: body bytes sent before failing
    status: int = 503  # status: the status code
    retry_after: str | None = None  # status: Retry-After header
    offset: int = 0  # corrupt: absolute file offset of the flipped byte
    rate: float = 0.0  # slow: body bytes per second
    seconds: float = 0.0  # hang: how long the request is held without a byte of answer

    def matches(self, host: str, path: str) -> bool:
        return (self.host in ("any", host)) and fnmatch.fnmatchcase(path, self.path)


@dataclass
class RequestRecord:
    host: str
    method: str
    path: str
    headers: dict[str, str]
    status: int = 0
    bytes_sent: int = 0
    repo: str = ""  # the repo a request was for: in its path, or a CDN link's ?repo=


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(self, hub: TestHub, role: str, port: int = 0):
        self.hub = hub
        self.role = role
        super().__init__(("127.0.0.1", port), _Handler)

    def handle_error(self, request, client_address) -> None:
        """A client hanging up (a killed agent, a reset test) is normal here, not worth a traceback."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format, *args):  # noqa: A002 - quiet: tests read records instead
        pass

    def do_GET(self):
        self.server.hub._handle(self, "GET")

    def do_HEAD(self):
        self.server.hub._handle(self, "HEAD")


class _Abort(Exception):
    """The connection was deliberately broken by a fault; stop handling the request."""


_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class TestHub:
    """Start with `with TestHub() as hub:`; add repos with `add_repo`; point clients at `hub.endpoint`."""

    __test__ = False  # not a pytest test class

    def __init__(self, tree_page_size: int = 1000, port: int = 0):
        self.port = port  # the hub's (0: any free one); the CDN always takes any free one
        self.repos: dict[str, Repo] = {}
        self.tokens: dict[str, set[str]] = {}
        self.faults: list[Fault] = []
        self.records: list[RequestRecord] = []
        self.tree_page_size = tree_page_size
        self._lock = threading.Lock()
        self._servers: list[_Server] = []
        self._commit_counter = 0

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> TestHub:
        for role, port in (("hub", self.port), ("cdn", 0)):
            server = _Server(self, role, port)
            threading.Thread(target=server.serve_forever, args=(0.05,), name=f"testhub-{role}", daemon=True).start()
            self._servers.append(server)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def __enter__(self) -> TestHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._servers[0].server_address[1]}"

    @property
    def cdn_endpoint(self) -> str:
        return f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    # -- content ---------------------------------------------------------------------------
    def add_repo(
        self,
        name: str,
        files: Mapping[str, Content | bytes],
        revision: str = "main",
        private: bool = False,
        gated: bool = False,
        lfs: set[str] | None = None,
    ) -> str:
        """Add (or push a new commit to) a repo; returns the commit sha. LFS by suffix unless `lfs` given."""
        repo = self.repos.setdefault(name, Repo(name))
        repo.private, repo.gated = private, gated
        entries = {}
        for path, content in files.items():
            if isinstance(content, bytes):
                content = BytesContent(content)
            is_lfs = path in lfs if lfs is not None else path.endswith(LFS_SUFFIXES)
            entries[path] = HubFile(path, content, is_lfs)
        self._commit_counter += 1
        seed = f"{name}\n{revision}\n{self._commit_counter}\n" + "\n".join(
            f"{p} {f.etag}" for p, f in sorted(entries.items())
        )
        commit = hashlib.sha1(seed.encode()).hexdigest()
        repo.commits[commit] = entries
        repo.refs[revision] = commit
        return commit

    def set_raw_siblings(self, name: str, commit: str, siblings: list) -> None:
        """Serve `siblings` verbatim in the listing of `commit` (malformed-listing tests)."""
        self.repos[name].raw_siblings[commit] = siblings

    def add_token(self, token: str, repos: tuple[str, ...] = ()) -> None:
        """A valid token; `repos` are the private repos it reads and gated repos whose terms it accepted."""
        self.tokens[token] = set(repos)

    def inject(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    # -- measurements ----------------------------------------------------------------------
    def bytes_sent(self, host: str = "any", repo: str = "") -> int:
        """Bytes served by `host` ("hub", "cdn", "any"), for `repo` only if one is named."""
        with self._lock:
            return sum(r.bytes_sent for r in self.records
                       if host in ("any", r.host) and repo in ("", r.repo))

    def requests(self, host: str = "any") -> list[RequestRecord]:
        with self._lock:
            return [r for r in self.records if host in ("any", r.host)]

    def reset_records(self) -> None:
        with self._lock:
            self.records.clear()

    # -- request handling ------------------------------------------------------------------
    def _repo_of(self, path: str, query: str) -> str:
        linked = parse_qs(query).get("repo", [""])[0]
        if linked:
            return linked
        with self._lock:
            return next((name for name in self.repos if f"/{name}/" in f"{path}/"), "")

    def _take_fault(self, host: str, path: str, kinds: tuple[str, ...]) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.kind in kinds and fault.matches(host, path) and fault.times != 0:
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    def _handle(self, handler: _Handler, method: str) -> None:
        url = urlsplit(handler.path)
        path = unquote(url.path)
        record = RequestRecord(handler.server.role, method, path, dict(handler.headers.items()),
                               repo=self._repo_of(path, url.query))
        with self._lock:
            self.records.append(record)
        try:
            hang = self._take_fault(record.host, path, ("hang",))
            if hang:  # an endpoint that accepted the connection and went silent
                time.sleep(hang.seconds)
                raise _Abort()
            fault = self._take_fault(record.host, path, ("status",))
            if fault:
                headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
                return self._error(handler, record, fault.status, None, "injected fault", headers)
            if record.host == "cdn":
                return self._cdn(handler, record, method, url.path)
            return self._hub(handler, record, method, url)
        except _Abort:
            handler.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True

    def _hub(self, handler, record, method, url) -> None:
        raw = url.path.split("/")
        query = parse_qs(url.query)
        if raw[1:3] == ["api", "models"] and len(raw) >= 5:
            name = unquote(raw[3]) + "/" + unquote(raw[4])
            action = raw[5] if len(raw) > 5 else "revision"
            revision = unquote(raw[6]) if len(raw) > 6 else "main"
            repo = self._authorize(handler, record, name)
            if repo is None:
                return
            commit = repo.resolve(revision)
            if commit is None:
                return self._error(handler, record, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
            if action == "revision":
                return self._json(handler, record, self._info(repo, commit, "blobs" in query))
            if action == "tree":
                prefix = "/".join(unquote(p) for p in raw[7:])
                return self._tree(handler, record, url, repo, commit, prefix, query)
        elif len(raw) >= 6 and raw[3] == "resolve":
            name = unquote(raw[1]) + "/" + unquote(raw[2])
            repo = self._authorize(handler, record, name)
            if repo is None:
                return
            commit = repo.resolve(unquote(raw[4]))
            if commit is None:
                return self._error(handler, record, 404, "RevisionNotFound", "Invalid rev id")
            file = repo.commits[commit].get(unquote("/".join(raw[5:])))
            if file is None:
                return self._error(handler, record, 404, "EntryNotFound", "Entry not found")
            headers = {"X-Repo-Commit": commit, "ETag": f'"{file.etag}"'}
            if file.lfs:
                headers.update({
                    "X-Linked-Etag": f'"{file.sha256}"',
                    "X-Linked-Size": str(file.content.size),
                    "Location": f"{self.cdn_endpoint}/lfs/{file.sha256}?repo={quote(name, safe='')}",
                })
                return self._send(handler, record, 302, headers, b"")
            return self._serve_content(handler, record, method, file.content, headers)
        return self._error(handler, record, 404, None, "Not Found")

    def _cdn(self, handler, record, method, raw_path) -> None:
        sha = raw_path.rsplit("/", 1)[-1]
        for repo in self.repos.values():
            for files in repo.commits.values():
                for file in files.values():
                    if file.lfs and file.sha256 == sha:
                        return self._serve_content(handler, record, method, file.content, {"ETag": f'"{sha}"'})
        return self._error(handler, record, 404, None, "Not Found")

    def _authorize(self, handler, record, name: str) -> Repo | None:
        auth = handler.headers.get("Authorization")
        token = auth[len("Bearer "):] if auth and auth.startswith("Bearer ") else None
        if auth is not None and token not in self.tokens:
            self._error(handler, record, 401, None, "Invalid credentials in Authorization header")
            return None
        repo = self.repos.get(name)
        granted = token is not None and name in self.tokens[token]
        if repo is None or (repo.private and not granted) or (repo.gated and token is None):
            status = 401 if token is None else 404
            self._error(handler, record, status, "RepoNotFound", "Repository not found")
            return None
        if repo.gated and not granted:
            message = f"Access to model {name} is restricted and you are not in the authorized list."
            self._error(handler, record, 403, "GatedRepo", message)
            return None
        return repo

    def _info(self, repo: Repo, commit: str, blobs: bool) -> dict:
        if commit in repo.raw_siblings:
            siblings = repo.raw_siblings[commit]
        else:
            siblings = []
            for path, file in sorted(repo.commits[commit].items()):
                entry: dict[str, Any] = {"rfilename": path}
                if blobs:
                    entry.update({"blobId": file.blob_id, "size": file.content.size})
                    if file.lfs:
                        entry["lfs"] = {"sha256": file.sha256, "size": file.content.size,
                                        "pointerSize": len(file.pointer)}
                siblings.append(entry)
        return {
            "_id": hashlib.md5(repo.name.encode()).hexdigest()[:24], "id": repo.name, "modelId": repo.name,
            "author": repo.name.split("/")[0], "sha": commit, "private": repo.private,
            "gated": "manual" if repo.gated else False, "disabled": False, "downloads": 0, "likes": 0,
            "tags": [], "lastModified": "2026-01-01T00:00:00.000Z", "siblings": siblings,
        }

    def _tree(self, handler, record, url, repo, commit, prefix, query) -> None:
        entries, dirs = [], set()
        for path, file in sorted(repo.commits[commit].items()):
            if prefix and not path.startswith(prefix + "/"):
                continue
            parts = path.split("/")
            for depth in range(1, len(parts)):
                dirs.add("/".join(parts[:depth]))
            entry = {"type": "file", "oid": file.blob_id, "size": file.content.size, "path": path}
            if file.lfs:
                entry["lfs"] = {"oid": file.sha256, "size": file.content.size, "pointerSize": len(file.pointer)}
            entries.append(entry)
        entries += [{"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
                    for d in sorted(dirs) if not prefix or d.startswith(prefix + "/")]
        entries.sort(key=lambda e: e["path"])
        cursor = int(query.get("cursor", ["0"])[0])
        page = entries[cursor : cursor + self.tree_page_size]
        headers = {}
        if cursor + self.tree_page_size < len(entries):
            nxt = f"{self.endpoint}{url.path}?recursive=true&cursor={cursor + self.tree_page_size}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        return self._json(handler, record, page, headers)

    # -- responses -------------------------------------------------------------------------
    def _json(self, handler, record, body, headers=None) -> None:
        data = json.dumps(body).encode()
        self._send(handler, record, 200, {"Content-Type": "application/json", **(headers or {})}, data)

    def _error(self, handler, record, status, code, message, headers=None) -> None:
        extra = {"X-Error-Message": message, **(headers or {})}
        if code:
            extra["X-Error-Code"] = code
        self._json_status(handler, record, status, {"error": message}, extra)

    def _json_status(self, handler, record, status, body, headers) -> None:
        data = json.dumps(body).encode()
        self._send(handler, record, status, {"Content-Type": "application/json", **headers}, data)

    def _send(self, handler, record, status, headers, body: bytes) -> None:
        record.status = status
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if body and handler.command != "HEAD":
            self._count(record, len(body))
            handler.wfile.write(body)

    def _count(self, record: RequestRecord, n: int) -> None:
        """Counted before the send, so a client that has its bytes always sees them counted
        (a send a killed client never reads is counted too: measurements err high)."""
        with self._lock:
            record.bytes_sent += n

    def _serve_content(self, handler, record, method, content: Content, headers) -> None:
        size = content.size
        start, end, status = 0, size, 200
        spec = handler.headers.get("Range")
        if spec:
            match = _RANGE.match(spec.strip())
            if match and match.group(1):
                start = int(match.group(1))
                end = min(size, int(match.group(2)) + 1) if match.group(2) else size
            elif match and match.group(2):
                start = max(0, size - int(match.group(2)))
            if not match or start >= size or end <= start:
                return self._send(handler, record, 416, {"Content-Range": f"bytes */{size}"}, b"")
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end - 1}/{size}"}
        record.status = status
        handler.send_response(status)
        for key, value in {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream", **headers}.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(end - start))
        handler.end_headers()
        if method == "HEAD":
            return
        handler.wfile.flush()
        self._stream(handler, record, content, start, end)

    def _stream(self, handler, record, content, start, end) -> None:
        sock = handler.connection
        breaker = self._take_fault(record.host, record.path, ("reset", "truncate"))
        corrupt = self._take_fault(record.host, record.path, ("corrupt",))
        slow = self._take_fault(record.host, record.path, ("slow",))
        began, sent, offset = time.monotonic(), 0, start
        block = 64 << 10 if slow else SEND_BLOCK
        for chunk in iter_content(content, start, end, block):
            if corrupt and offset <= corrupt.offset < offset + len(chunk):
                chunk = bytearray(chunk)
                chunk[corrupt.offset - offset] ^= 0xFF
            if breaker and sent + len(chunk) >= breaker.after_bytes:
                head = memoryview(chunk)[: max(0, breaker.after_bytes - sent)]
                self._count(record, len(head))
                sock.sendall(head)
                self._break(sock, breaker.kind)
            self._count(record, len(chunk))
            sock.sendall(chunk)
            sent += len(chunk)
            offset += len(chunk)
            if slow:
                ahead = sent / slow.rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)

    @staticmethod
    def _break(sock: socket.socket, kind: str) -> None:
        if kind == "reset":  # RST instead of FIN: the client sees ECONNRESET
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        raise _Abort()
