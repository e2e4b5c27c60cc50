"""A real S3 API (moto's server) on loopback, behind a WSGI layer that injects faults and counts bytes.

    with S3Server() as s3:
        s3.make_bucket("models", versioned=True)
        s3.put("models", "tiny/model.safetensors", data, sha256=True)   # with S3's ChecksumSHA256
        creds = s3.credentials_dir(tmp_path)                             # AWS_ACCESS_KEY_ID / _SECRET_ files
        s3.inject(S3Fault("slowdown", key="tiny/*", times=None))
        s3.bytes_served("models")                                        # object bytes sent, per bucket
        s3.requests("models")                                            # every request to the bucket

Faults (`S3Fault(kind, bucket, key, method, times, after_bytes, ...)`, applied to the next `times`
matching requests, None = all): `slowdown` (503 SlowDown), `status` (any status and code),
`auth` (403 with `code`, e.g. SignatureDoesNotMatch), `reset` (RST after `after_bytes` body bytes),
`hang` (hold the request `seconds` without answering, then reset it unprocessed: a client killed
meanwhile never completes it),
`overwrite` (after `after_bytes` body bytes, the object is overwritten with `data`, then the
connection is reset: an object changed mid-fetch). Requests signed with an access key other than
the server's are refused 403 InvalidAccessKeyId, as S3 does. Requests are path-style
(`/bucket/key`), which the agent uses for any custom endpoint.
"""

from __future__ import annotations

import fnmatch
import re
import socket
import struct
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import boto3
from botocore.config import Config
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

ACCESS_KEY = "AKIAFLEETCACHETEST01"
SECRET_KEY = "fleetcache/S3cr3t+Key/ForTests0123456789"
REGION = "us-east-1"
SEND_BLOCK = 64 << 10
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


@dataclass
class S3Fault:
    kind: str  # slowdown | status | auth | reset | overwrite | hang
    bucket: str = "*"
    key: str = "*"  # fnmatch on the object key ("" for bucket-level calls such as listing)
    method: str = "*"
    times: int | None = 1
    after_bytes: int = 0  # reset / overwrite: object bytes sent before the fault acts
    status: int = 503  # status
    code: str = "SlowDown"  # status / auth: the S3 error code
    data: bytes = b""  # overwrite: the object's new content
    seconds: float = 0.0  # hang: how long the request is held

    def matches(self, method: str, bucket: str, key: str) -> bool:
        return (self.method in ("*", method) and fnmatch.fnmatchcase(bucket, self.bucket)
                and fnmatch.fnmatchcase(key, self.key))


@dataclass(frozen=True)
class S3Request:
    """What the server was asked: `seen` is the query and every header value, to look for a secret in."""

    method: str
    bucket: str
    key: str
    seen: str


def _error(status: int, code: str, start_response) -> list[bytes]:
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>injected by the test server</Message></Error>").encode()
    start_response(f"{status} {code}", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
    return [body]


def _reset(sock: socket.socket) -> None:
    """RST instead of FIN: the client sees ECONNRESET."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    raise ConnectionResetError("reset injected by the test server")


class _Layer:
    """WSGI middleware in front of moto: credentials check, faults, byte counters."""

    def __init__(self, server: S3Server, app):
        self.server, self.app = server, app

    def __call__(self, environ, start_response):
        method = environ["REQUEST_METHOD"]
        bucket, _, key = unquote(environ.get("PATH_INFO", "")).lstrip("/").partition("/")
        auth = environ.get("HTTP_AUTHORIZATION", "") + " " + unquote(environ.get("QUERY_STRING", "")).replace(
            "X-Amz-Credential=", "Credential=")
        self.server._record(S3Request(method, bucket, key, " ".join(
            [environ.get("QUERY_STRING", "")] + [v for k, v in environ.items() if k.startswith("HTTP_")])))
        found = _CREDENTIAL.search(auth)
        if found and found.group(1) != ACCESS_KEY:
            return _error(403, "InvalidAccessKeyId", start_response)
        fault = self.server._take(method, bucket, key)
        if fault and fault.kind == "slowdown":
            return _error(503, "SlowDown", start_response)
        if fault and fault.kind == "status":
            return _error(fault.status, fault.code, start_response)
        if fault and fault.kind == "auth":
            return _error(403, fault.code, start_response)
        if fault and fault.kind == "hang":
            self.server._stopping.wait(fault.seconds)
            _reset(environ["werkzeug.socket"])
        body = self.app(environ, start_response)
        if method != "GET" or not key:
            return body
        return self._stream(body, bucket, key, fault, environ["werkzeug.socket"])

    def _stream(self, body, bucket: str, key: str, fault: S3Fault | None, sock: socket.socket):
        sent = 0
        try:
            for piece in body:
                for start in range(0, len(piece), SEND_BLOCK):
                    chunk = piece[start:start + SEND_BLOCK]
                    if fault and sent + len(chunk) >= fault.after_bytes:
                        head = chunk[: max(0, fault.after_bytes - sent)]
                        self.server._count(bucket, len(head))
                        yield head
                        if fault.kind == "overwrite":
                            self.server.put(bucket, key, fault.data)
                        _reset(sock)
                    self.server._count(bucket, len(chunk))
                    sent += len(chunk)
                    yield chunk
        finally:
            if hasattr(body, "close"):
                body.close()


class _QuietHandler(MotoRequestHandler):
    def log_request(self, *args, **kwargs) -> None:
        """Quiet: tests read counters, not access logs (whose URLs carry signed queries)."""


class S3Server:
    """One at a time per process: moto keeps its buckets in process-global state, which start() resets."""

    def __init__(self):
        self._lock = threading.Lock()
        self._faults: list[S3Fault] = []
        self._served: dict[str, int] = {}
        self._requests: list[S3Request] = []
        self._stopping = threading.Event()
        self._server = None
        self._thread = None
        self.endpoint = ""

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> S3Server:
        app = _Layer(self, DomainDispatcherApplication(create_backend_app))
        self._server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=_QuietHandler)
        host, port = self._server.server_address[:2]
        self.endpoint = f"http://{host}:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")).close()
        self.client = boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                          request_checksum_calculation="when_required"))
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- content -----------------------------------------------------------------------------
    def make_bucket(self, name: str, versioned: bool = False) -> None:
        self.client.create_bucket(Bucket=name)
        if versioned:
            self.client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})

    def put(self, bucket: str, key: str, data: bytes, sha256: bool = False) -> None:
        """Store an object; with `sha256`, S3 keeps its full-object ChecksumSHA256."""
        extra = {"ChecksumAlgorithm": "SHA256"} if sha256 else {}
        self.client.put_object(Bucket=bucket, Key=key, Body=data, **extra)

    def get(self, bucket: str, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def delete(self, bucket: str, key: str) -> None:
        self.client.delete_object(Bucket=bucket, Key=key)

    @staticmethod
    def credentials_dir(directory: Path, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> Path:
        """The files a mounted credentials Secret gives the agent."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "AWS_ACCESS_KEY_ID").write_text(access_key + "\n")
        (directory / "AWS_SECRET_ACCESS_KEY").write_text(secret_key + "\n")
        return directory

    # -- faults and counters -----------------------------------------------------------------
    def inject(self, fault: S3Fault) -> S3Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def _take(self, method: str, bucket: str, key: str) -> S3Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.times != 0 and fault.matches(method, bucket, key):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    def _count(self, bucket: str, n: int) -> None:
        with self._lock:
            self._served[bucket] = self._served.get(bucket, 0) + n

    def bytes_served(self, bucket: str) -> int:
        """Object bytes handed to the socket for GETs of `bucket` (listings and errors not counted)."""
        with self._lock:
            return self._served.get(bucket, 0)

    def _record(self, request: S3Request) -> None:
        with self._lock:
            self._requests.append(request)

    def requests(self, bucket: str = "*") -> list[S3Request]:
        """Every request received (for `bucket`), faults and refusals included."""
        with self._lock:
            return [r for r in self._requests if fnmatch.fnmatchcase(r.bucket, bucket)]

    def reset_counts(self) -> None:
        with self._lock:
            self._served.clear()
            self._requests.clear()
