"""The one S3 client wrapper (boto3): listing, pinned presigned ranged GETs, mirror writes, error mapping.

Everything that talks to S3 (the S3 source, the fleet mirror, the test fixtures' helpers) goes
through `S3Client`, so signing (boto3's SigV4, never hand-written), credentials and the
mapping of S3's answers onto fleetcache/exitcodes.py live in one place:

- 403 InvalidAccessKeyId / SignatureDoesNotMatch / AccessDenied (any 401/403) → AuthFailed (10)
- 404 NoSuchBucket / NoSuchKey / NoSuchVersion → SourceNotFound (11)
- 412 PreconditionFailed, 416 InvalidRange, another size (the object changed since resolve) → DigestMismatch (12)
- 301 / AuthorizationHeaderMalformed (wrong region) → InvalidConfiguration (15)
- 503 SlowDown (429) → retried, then RateLimited (18)
- resets, timeouts, 5xx, other 4xx → retried, then SourceUnreachable (17)

Public API (used by agent/sources.py, agent/mirror.py and tests/support/s3.py):

    loc = S3Location(bucket, prefix="", region="us-east-1", endpoint=None, credentials_dir=None)
    client = S3Client(loc, RetryPolicy(), pool_size=8, timeout=30.0)
    client.secrets                       # the credential strings, for log redaction
    client.list_objects()                # [S3Listed(key, path, size, version_id, etag, checksums)], pinned
    client.checksum_sha256(obj)          # hex sha256 from S3's full-object ChecksumSHA256, or None
    client.stream_sha256(obj)            # hex sha256 of the pinned object, read once
    client.open_range(key, version_id, etag, start, end, size)   # urllib3 response, `.final_url`
    client.presign(method, key, version_id)
    client.head_size(key) / client.get_small(key) / client.put_file(key, path, sha256) / client.put_bytes(key, data)

Reads are pinned: a versionId when the bucket is versioned, else `If-Match: <ETag>`, so an
object overwritten after resolve answers 412 and becomes a DigestMismatch, never new content.
GET URLs are presigned per request (a local computation), so a long fetch never holds an
expired URL. Credentials come from the files AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY in
`credentials_dir` (a mounted Secret), never from flags; without a directory boto3's default
chain (IRSA, instance profile) is used, and without any credentials requests are unsigned
(public buckets). No URL with its query string and no credential is ever logged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import botocore.exceptions
import urllib3

from fleetcache import reasons
from fleetcache.agent.errors import AgentError
from fleetcache.agent.hub import (
    CONNECT_TIMEOUT,
    READ_TIMEOUT,
    Retryable,
    RetryPolicy,
    connection_pool,
    describe,
    redact_url,
    unreachable,
)
from fleetcache.shapes import S3_BUCKET

log = logging.getLogger("fleetcache.agent")

ACCESS_KEY_FILE = "AWS_ACCESS_KEY_ID"
SECRET_KEY_FILE = "AWS_SECRET_ACCESS_KEY"
PRESIGN_SECONDS = 3600
READ_BLOCK = 8 << 20
SINGLE_PUT_LIMIT = 5 << 30  # S3's largest single PUT; bigger blobs go up in parts
_ERROR_CODE = re.compile(rb"<Code>([^<]{1,100})</Code>")

AUTH_CODES = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken",
                        "InvalidToken", "AllAccessDisabled", "AccountProblem", "InvalidSecurity"})
NOT_FOUND_CODES = frozenset({"NoSuchBucket", "NoSuchKey", "NoSuchVersion", "NotFound", "404"})
RATE_CODES = frozenset({"SlowDown", "TooManyRequests", "RequestLimitExceeded", "Throttling",
                        "ThrottlingException"})
REGION_CODES = frozenset({"PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException"})


@dataclass(frozen=True)
class S3Location:
    """Where objects are: a bucket, a folder-like prefix in it, and how to reach and sign for it."""

    bucket: str
    prefix: str = ""
    region: str = "us-east-1"
    endpoint: str | None = None
    credentials_dir: str | None = None

    @property
    def folder(self) -> str:
        """The listing prefix: `prefix` as a folder (`a/b` lists `a/b/...`, never `a/bc`)."""
        prefix = self.prefix.strip("/")
        return prefix + "/" if prefix else ""

    @property
    def repo(self) -> str:
        """The name the layouts use: `s3/<bucket>/<prefix>` → folder `models--s3--<bucket>--<prefix, / as -->`."""
        return "/".join(p for p in ("s3", self.bucket, self.prefix.strip("/")) if p)

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.folder}"


@dataclass(frozen=True)
class S3Listed:
    """One object as listed, with what pins it: its version (versioned bucket) or its ETag."""

    key: str
    path: str  # the key below the prefix: the file's path in the model
    size: int
    version_id: str | None
    etag: str | None
    checksums: tuple[str, ...]  # the algorithms S3 keeps for it (ChecksumAlgorithm), () when not reported


def read_credentials(directory: str) -> tuple[str, str]:
    """The access key pair from a mounted Secret's files; read once, never logged."""
    values = []
    for name in (ACCESS_KEY_FILE, SECRET_KEY_FILE):
        try:
            value = (Path(directory) / name).read_text().strip()
        except OSError as err:
            raise AgentError(reasons.InvalidConfiguration, f"credentials directory {directory}: cannot read {name} "
                                                     f"({type(err).__name__}): mount the Secret with keys "
                                                     f"{ACCESS_KEY_FILE} and {SECRET_KEY_FILE}") from None
        if not value or any(c.isspace() for c in value):
            raise AgentError(reasons.InvalidConfiguration, f"credentials directory {directory}: {name} is empty or "
                                                     "not a single value")
        values.append(value)
    return values[0], values[1]


def classify(status: int, code: str, what: str) -> Exception:
    """An S3 error answer as the table's row: a permanent AgentError or a Retryable."""
    detail = f"{what}: HTTP {status}" + (f" {code}" if code and code != str(status) else "")
    if status == 412 or code == "PreconditionFailed":
        return AgentError(reasons.DigestMismatch, f"{detail}: the object changed since resolve (its pinned ETag "
                                            "no longer matches); resolve again to pin the new content")
    if status == 416 or code == "InvalidRange":  # only ranges inside the pinned size are asked for
        return AgentError(reasons.DigestMismatch, f"{detail}: the object is shorter than when it was resolved")
    if code in REGION_CODES or status == 301:
        return AgentError(reasons.InvalidConfiguration, f"{detail}: the bucket is in another region; "
                                                  "check spec.source.s3.region (or the mirror's region)")
    if code in AUTH_CODES or status in (401, 403):
        return AgentError(reasons.AuthFailed, f"{detail}: check the S3 credentials (credentialsSecretRef) and "
                                        "that they may read the bucket")
    if code in NOT_FOUND_CODES or status == 404:
        return AgentError(reasons.SourceNotFound, f"{detail}: check the bucket, prefix and endpoint; a pinned version "
                                            "deleted since resolve needs a new resolve")
    if code in RATE_CODES or status == 429:
        return Retryable(AgentError(reasons.RateLimited, f"{detail}: S3 asked the agent to slow down"))
    return Retryable(AgentError(reasons.SourceUnreachable, detail))


def classify_boto(err: Exception, what: str) -> Exception:
    """A boto3 exception as the table's row (permanent) or a Retryable."""
    if isinstance(err, botocore.exceptions.ClientError):
        error = err.response.get("Error", {})
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return classify(int(status or 0), str(error.get("Code", "")), what)
    if isinstance(err, botocore.exceptions.NoCredentialsError):
        return AgentError(reasons.AuthFailed, f"{what}: no S3 credentials; set credentialsSecretRef")
    if isinstance(err, botocore.exceptions.ParamValidationError):
        return AgentError(reasons.InvalidConfiguration, f"{what}: {err}")
    if isinstance(err, botocore.exceptions.EndpointConnectionError):  # says why through urllib3's error
        return unreachable(what, err.kwargs.get("error", err))
    return unreachable(what, err)


def sha256_from_checksum(value: str | None) -> str | None:
    """S3's ChecksumSHA256 as hex, only when it is a full-object checksum (not `…-N` of parts)."""
    if not value or "-" in value:
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == 32 else None


class S3Client:
    def __init__(self, location: S3Location, policy: RetryPolicy, pool_size: int = 8,
                 timeout: float = READ_TIMEOUT):
        if not S3_BUCKET.fullmatch(location.bucket) or ".." in location.bucket:
            raise AgentError(reasons.InvalidConfiguration, f"bucket {location.bucket!r} is not an S3 bucket name")
        if location.prefix.startswith("/") or ".." in location.prefix.split("/"):
            raise AgentError(reasons.InvalidConfiguration, f"prefix {location.prefix!r} starts with '/' or has '..'")
        self.location = location
        self.policy = policy
        self.secrets: tuple[str, ...] = ()
        # boto3 is imported here, when a client is made: every other agent command (a readiness probe
        # runs every few seconds on every node) is spared its ~0.2 s of CPU at start.
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config

        session_args = {}
        if location.credentials_dir:
            key_id, secret = read_credentials(location.credentials_dir)
            self.secrets = (key_id, secret)
            session_args = {"aws_access_key_id": key_id, "aws_secret_access_key": secret}
        session = boto3.session.Session(region_name=location.region, **session_args)
        signed = session_args or session.get_credentials() is not None
        config = Config(
            signature_version="s3v4" if signed else UNSIGNED,
            s3={"addressing_style": "path" if location.endpoint else "auto"},
            retries={"max_attempts": 1, "mode": "standard"},  # RetryPolicy retries, with the table's rows
            connect_timeout=min(CONNECT_TIMEOUT, timeout), read_timeout=timeout,
            max_pool_connections=max(pool_size, 10),
            request_checksum_calculation="when_required", response_checksum_validation="when_required",
        )
        self.s3 = session.client("s3", endpoint_url=location.endpoint, config=config)
        self.http = connection_pool(4, pool_size, timeout)

    def _call(self, what: str, fn, **params):
        """One S3 API call through the retry policy, its failures mapped onto the table."""
        def attempt():
            try:
                return fn(**params)
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as err:
                raise classify_boto(err, what) from None
        return self.policy.run(attempt, what)

    # -- listing ----------------------------------------------------------------------------
    def versioned(self) -> bool:
        """Versioning Enabled or Suspended: versions pin objects (a Suspended bucket still keeps old ones).

        Credentials allowed only s3:ListBucket and s3:GetObject (a common read-only policy) may not
        ask: then objects are pinned by ETag, which is as safe (If-Match) and needs no more rights."""
        try:
            answer = self._call(f"GetBucketVersioning {self.location.describe()}", self.s3.get_bucket_versioning,
                                Bucket=self.location.bucket)
        except AgentError as err:
            if err.reason != reasons.AuthFailed:
                raise
            log.warning("may not read the versioning of %s (%s); pinning objects by ETag",
                        self.location.describe(), err.what)
            return False
        return answer.get("Status") in ("Enabled", "Suspended")

    def list_objects(self) -> list[S3Listed]:
        """Every current object under the prefix, pinned: ListObjectVersions on a versioned bucket
        (latest, not deleted), else ListObjectsV2 with ETags. Folder markers (`dir/`) are skipped."""
        loc = self.location
        if self.versioned():
            pages = self._pages("list_object_versions", "Versions")
            items = [(o, o.get("VersionId")) for o in pages if o.get("IsLatest")]
        else:
            items = [(o, None) for o in self._pages("list_objects_v2", "Contents")]
        listed = []
        for obj, version in items:
            key = obj["Key"]
            if key.endswith("/"):
                continue
            listed.append(S3Listed(key, key[len(loc.folder):], int(obj["Size"]),
                                   version if version not in (None, "null") else None,
                                   obj.get("ETag"), tuple(obj.get("ChecksumAlgorithm") or ())))
        return sorted(listed, key=lambda o: o.path)

    def _pages(self, operation: str, field: str) -> list[dict]:
        what = f"listing {self.location.describe()}"
        params = {"Bucket": self.location.bucket, "Prefix": self.location.folder}
        found: list[dict] = []
        while True:
            answer = self._call(what, getattr(self.s3, operation), **params)
            found += answer.get(field, [])
            if not answer.get("IsTruncated"):
                return found
            if operation == "list_objects_v2":
                params["ContinuationToken"] = answer["NextContinuationToken"]
            else:
                params["KeyMarker"] = answer["NextKeyMarker"]
                params["VersionIdMarker"] = answer.get("NextVersionIdMarker", "")

    def _pin(self, obj_version: str | None, etag: str | None) -> tuple[dict, dict]:
        """Request parameters and headers that pin one object's content."""
        if obj_version:
            return {"VersionId": obj_version}, {}
        return {}, ({"If-Match": etag} if etag else {})

    def checksum_sha256(self, obj: S3Listed) -> str | None:
        """S3's own full-object SHA-256 of the pinned object (HeadObject ChecksumMode), or None."""
        params, headers = self._pin(obj.version_id, obj.etag)
        if headers:
            params["IfMatch"] = headers["If-Match"]
        answer = self._call(f"HeadObject {self.location.describe()}{obj.path}", self.s3.head_object,
                            Bucket=self.location.bucket, Key=obj.key, ChecksumMode="ENABLED", **params)
        if answer.get("ChecksumType", "FULL_OBJECT") != "FULL_OBJECT":
            return None
        return sha256_from_checksum(answer.get("ChecksumSHA256"))

    def stream_sha256(self, obj: S3Listed) -> str:
        """Read the pinned object once and hash it (objects without a usable S3 checksum)."""
        what = f"hashing {self.location.describe()}{obj.path}"

        def attempt():
            hasher = hashlib.sha256()
            resp = self.open_range(obj.key, obj.version_id, obj.etag, 0, obj.size, obj.size)
            try:
                while chunk := resp.read(READ_BLOCK):
                    hasher.update(chunk)
            except (urllib3.exceptions.HTTPError, OSError) as err:
                resp.close()
                raise Retryable(AgentError(reasons.SourceUnreachable,
                                           f"{what}: interrupted, {describe(err)}")) from None
            resp.release_conn()
            return hasher.hexdigest()

        return self.policy.run(attempt, what) if obj.size else hashlib.sha256().hexdigest()

    # -- data path --------------------------------------------------------------------------
    def presign(self, method: str, key: str, version_id: str | None = None) -> str:
        """A URL for one GET or HEAD of `key` (at `version_id`); signing is local, so one per request."""
        params = {"Bucket": self.location.bucket, "Key": key}
        if version_id:
            params["VersionId"] = version_id
        operation = "get_object" if method == "GET" else "head_object"
        return self.s3.generate_presigned_url(operation, Params=params, ExpiresIn=PRESIGN_SECONDS)

    def request(self, method: str, key: str, version_id: str | None = None, headers: dict | None = None,
                stream: bool = False):
        """One presigned request; an error answer raises its row (permanent) or a Retryable."""
        url = self.presign(method, key, version_id)
        what = f"{method} {redact_url(url)}"
        try:
            resp = self.http.request(method, url, headers={"Accept-Encoding": "identity", **(headers or {})},
                                     redirect=False, preload_content=not stream)
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise unreachable(what, err) from None
        if resp.status >= 300:
            body = b"" if method == "HEAD" else resp.read(4096) if stream else resp.data
            resp.close()  # an error body is small, but never hand a half-read connection back to the pool
            match = _ERROR_CODE.search(body or b"")
            raise classify(resp.status, match.group(1).decode() if match else "", what)
        return resp

    def open_range(self, key: str, version_id: str | None, etag: str | None, start: int, end: int, size: int):
        """A streaming response for bytes [start, end) of the pinned object of `size` bytes."""
        _, pin = self._pin(version_id, etag)
        headers = {**pin, "Range": f"bytes={start}-{end - 1}"} if (start, end) != (0, size) else pin
        resp = self.request("GET", key, version_id, headers, stream=True)
        expected = f"bytes {start}-{end - 1}/{size}"
        content_range = resp.headers.get("Content-Range", "")
        total = content_range.rpartition("/")[2] if resp.status == 206 else resp.headers.get("Content-Length")
        if (resp.status == 206 and content_range == expected) or \
                (resp.status == 200 and (start, end) == (0, size) and total in (None, str(size))):
            resp.final_url = key
            return resp
        resp.close()  # unread object bytes: the connection cannot go back to the pool
        if total not in (None, str(size)):
            raise AgentError(reasons.DigestMismatch, f"{self.location.describe()}{key}: the object is {total} bytes, "
                                               f"pinned {size}: it changed since resolve")
        got = content_range or f"HTTP {resp.status}"
        raise Retryable(AgentError(reasons.SourceUnreachable, f"GET {key}: asked for {expected}, got {got}"))

    # -- mirror writes and small reads --------------------------------------------------------
    def _unless_missing(self, method: str, key: str):
        """One request through the retry policy; None when there is no such object."""
        try:
            return self.policy.run(lambda: self.request(method, key), f"{method} {key}")
        except AgentError as err:
            if err.reason == reasons.SourceNotFound:
                return None
            raise

    def head_size(self, key: str) -> int | None:
        """The object's size, or None when there is none."""
        resp = self._unless_missing("HEAD", key)
        return None if resp is None else int(resp.headers.get("Content-Length", "0"))

    def get_small(self, key: str) -> bytes | None:
        """A small object's bytes (a mirror manifest), or None when there is none."""
        resp = self._unless_missing("GET", key)
        return None if resp is None else resp.data

    def put_bytes(self, key: str, data: bytes) -> None:
        self._call(f"PutObject {key}", self.s3.put_object, Bucket=self.location.bucket, Key=key, Body=data)

    def put_file(self, key: str, path: Path, sha256: str | None = None) -> None:
        """Upload a verified file; with `sha256`, S3 itself checks the bytes against it (single PUT)."""
        size = path.stat().st_size
        what = f"PutObject {key}"
        if size > SINGLE_PUT_LIMIT:
            from boto3.exceptions import S3UploadFailedError  # loaded with the client already

            def upload():
                try:
                    self.s3.upload_file(Filename=str(path), Bucket=self.location.bucket, Key=key)
                except S3UploadFailedError:  # a part failed (boto3 wraps S3's answer): upload again
                    raise Retryable(AgentError(reasons.SourceUnreachable,
                                               f"{what}: the multipart upload failed")) from None
            self._call(what, upload)
            return

        def put():
            extra = {"ChecksumSHA256": base64.b64encode(bytes.fromhex(sha256)).decode()} if sha256 else {}
            with open(path, "rb") as body:
                return self.s3.put_object(Bucket=self.location.bucket, Key=key, Body=body, ContentLength=size,
                                          **extra)

        self._call(what, put)
