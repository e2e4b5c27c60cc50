"""The OCI registry client: references, credentials, the distribution API's auth flows, error mapping.

Written on urllib3 like the Hub and S3 clients rather than on `oras` (design/oci.md): the fetch
engine needs ranged blob GETs on its own connection pool, its own digest checks while bytes
stream, and one mapping of every answer onto fleetcache/exitcodes.py:

- 401 / 403 (also from the token realm)                 → AuthFailed (10)
- 404 (MANIFEST_UNKNOWN, NAME_UNKNOWN, BLOB_UNKNOWN)      → SourceNotFound (11)
- a manifest whose bytes do not hash to the digest asked → DigestMismatch (12)
- 429 (Retry-After honoured)                             → retried, then RateLimited (18)
- 5xx, other answers, refused connections                → retried, then SourceUnreachable (17)

It also pushes (the fleet's OCI mirror, agent/oci_mirror.py): HEAD a blob or manifest, a
monolithic blob upload (POST, then PUT with its digest) and a manifest PUT, under the same auth.

Auth follows the distribution token spec (distribution/docs/spec/auth/token.md): a 401 with
`WWW-Authenticate: Bearer realm=…,service=…,scope=…` sends the client to the realm, with the
Docker config's basic credentials if any, for a token it then sends to the registry; a
`Basic` challenge gets the credentials themselves. A token or credential goes only to the
registry's origin and the realm; a redirect to another origin (a blob CDN) carries none.
No token or credential is ever logged (cli_context.hide scrubs them from every line).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

import urllib3

from fleetcache import reasons
from fleetcache.agent.errors import AgentError
from fleetcache.agent.hub import MAX_REDIRECTS, READ_TIMEOUT, Retryable, RetryPolicy, connection_pool, unreachable
from fleetcache.agent.hub import _retry_after as retry_after
from fleetcache.shapes import OCI_DIGEST, OCI_HOST, OCI_REPOSITORY, OCI_TAG, oci_reference_parts
from fleetcache.volume import oci_repo

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_ACCEPT = ", ".join((OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST))
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
MAX_MANIFEST = 4 << 20  # distribution's own limit on a manifest's size

REFERENCE_FIX = "give host[:port]/repository:tag or host[:port]/repository@sha256:<64 hex>"
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


def _bad_reference(why: str, flag: str) -> AgentError:
    return AgentError(reasons.InvalidConfiguration, f"{flag}: {why}; {REFERENCE_FIX}")


@dataclass(frozen=True)
class OciReference:
    """A manifest in a registry: `registry/repository` and a tag or a digest (`sha256:<hex>`)."""

    registry: str  # host[:port]
    repository: str
    tag: str | None
    digest: str | None

    def __str__(self) -> str:
        return f"{self.registry}/{self.repository}" + (f"@{self.digest}" if self.digest else f":{self.tag}")

    @property
    def name(self) -> str:
        """What the manifest is asked for by: the digest when pinned, else the tag."""
        return self.digest or self.tag or ""

    def pinned(self, digest: str) -> OciReference:
        return OciReference(self.registry, self.repository, None, digest)

    @property
    def repo(self) -> str:
        """The name the layouts keep files under (volume.oci_repo, as the composers name it)."""
        return oci_repo(str(self))


def parse_reference(value: str, flag: str = "--oci-reference") -> OciReference:
    """`host[:port]/repository(:tag|@sha256:hex)` as shapes.OCI_REFERENCE (the XRDs' pattern) takes it;
    neither tag nor digest is refused, never read as `latest`. A refusal names `flag`."""
    parts = oci_reference_parts(value)
    if parts is None:
        raise _bad_reference(f"{value!r} {_why_not(value)}", flag)
    return OciReference(*parts)


def _why_not(value: str) -> str:
    """Which part of a reference OCI_REFERENCE refused, told with the grammar's own parts."""
    name, at, digest = value.partition("@")
    host, slash, rest = name.partition("/")
    repository, colon, tag = rest.rpartition(":") if ":" in rest.rpartition("/")[2] else (rest, "", "")
    if not slash or not OCI_HOST.fullmatch(host):
        return "does not start with a registry host (a name with a dot or a port, or localhost)"
    if at and not OCI_DIGEST.fullmatch(digest):
        return "has a digest that is not sha256:<64 lowercase hex>"
    if at and colon:
        return "names both a tag and a digest; give one"
    if colon and not OCI_TAG.fullmatch(tag):
        return f"has a malformed tag {tag!r}"
    if not OCI_REPOSITORY.fullmatch(repository):
        return (f"has a malformed repository {repository!r} (lowercase, digits, separators . _ -, components "
                "joined by /)")
    if not at and not colon:
        return "names neither a tag nor a digest (no tag is assumed, not even latest)"
    return "is not a reference"


# -- credentials ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    @property
    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


def _config_host(key: str) -> str:
    """A Docker config `auths` key as its host: `https://host/v1/` and `host` name the same registry."""
    return urlsplit(key if "://" in key else f"//{key}").netloc.lower()


def read_registry_config(path: str, registry: str, flag: str = "--registry-config") -> Credentials | None:
    """The registry's credentials from a Docker config JSON (a `kubernetes.io/dockerconfigjson` pull
    secret): `auths[host].auth` (base64 of user:password) or `username` and `password`. None when the
    file names no credentials for this host (anonymous access)."""
    try:
        config = json.loads(Path(path).read_text())
    except OSError as err:
        raise AgentError(reasons.InvalidConfiguration, f"{flag}: cannot read it ({type(err).__name__})") from None
    except ValueError:
        raise AgentError(reasons.InvalidConfiguration, f"{flag}: not JSON; pass a Docker config JSON "
                                                       "({\"auths\": {HOST: {\"auth\": …}}})") from None
    auths = config.get("auths") if isinstance(config, dict) else None
    if not isinstance(auths, dict):
        raise AgentError(reasons.InvalidConfiguration, f"{flag}: has no \"auths\" object; pass a Docker config "
                                                       "JSON ({\"auths\": {HOST: {\"auth\": …}}})")
    entry = next((v for k, v in auths.items() if _config_host(k) == registry.lower()), None)
    if entry is None:
        return None
    where = f"{flag}: auths[{registry!r}]"
    if not isinstance(entry, dict):
        raise AgentError(reasons.InvalidConfiguration, f"{where} is not an object")
    if entry.get("auth"):
        try:
            username, colon, password = base64.b64decode(str(entry["auth"]), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            username, colon, password = "", "", ""
        if not colon or not username:
            raise AgentError(reasons.InvalidConfiguration, f"{where}.auth is not base64 of USER:PASSWORD")
        return Credentials(username, password)
    if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str) and entry["username"]:
        return Credentials(entry["username"], entry["password"])
    raise AgentError(reasons.InvalidConfiguration, f"{where} has neither \"auth\" nor \"username\" and "
                                                   "\"password\"")


# -- the client -------------------------------------------------------------------------------

def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc.lower()


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """`Bearer realm="…",service="…",scope="…"` as ("bearer", {realm, service, scope})."""
    scheme, _, params = header.strip().partition(" ")
    return scheme.lower(), dict(_CHALLENGE_PARAM.findall(params))


@dataclass(frozen=True)
class Manifest:
    digest: str  # sha256:<hex> of the bytes served
    media_type: str
    body: dict


class RegistryClient:
    """One repository of one registry: manifests and blobs, authenticated as the registry asks."""

    def __init__(self, reference: OciReference, credentials: Credentials | None, plain_http: bool,
                 policy: RetryPolicy, pool_size: int = 8, timeout: float = READ_TIMEOUT,
                 on_secret: Callable[[tuple[str, ...]], None] | None = None,
                 secret_field: str = "spec.source.oci.pullSecretRef, --registry-config", action: str = "pull"):
        self.reference = reference
        self.secret_field, self.action = secret_field, action  # what a refusal's remedy names
        self.credentials = credentials
        self.policy = policy
        self.base = f"{'http' if plain_http else 'https'}://{reference.registry}/v2/{reference.repository}"
        self.origin = _origin(self.base)
        self.http = connection_pool(4, pool_size, timeout)
        self.lock = threading.Lock()
        self.authorization: str | None = None  # what the registry last accepted: a bearer token or basic
        self.on_secret = on_secret  # told each token received, to keep it out of every log line

    @property
    def secrets(self) -> tuple[str, ...]:
        creds = (self.credentials.password, self.credentials.basic.split(" ", 1)[1]) if self.credentials else ()
        return tuple(s for s in creds if s)

    def _headers(self, url: str, extra: dict | None) -> dict:
        headers = {"User-Agent": "fleetcache-agent/0.1", "Accept-Encoding": "identity", **(extra or {})}
        if self.authorization and _origin(url) == self.origin:
            headers["Authorization"] = self.authorization
        return headers

    def request(self, method: str, url: str, headers: dict | None = None, stream: bool = False,
                body: Callable[[], Any] | None = None) -> Any:
        """One logical request: redirects followed by hand (credentials only on the registry's origin),
        one 401 answered by authenticating as its challenge asks; failures as the table's rows. `body`
        gives the request's body afresh for each send (a 401 is answered by sending it again)."""
        what = f"{method} {urlsplit(url).path}"
        authenticated = False
        for _ in range(MAX_REDIRECTS + 2):
            sent_headers = self._headers(url, headers)
            resp: Any  # urllib3's response, given the `final_url` the Source protocol reads
            try:
                resp = self.http.request(method, url, headers=sent_headers, redirect=False,
                                         preload_content=not stream, body=body() if body else None)
            except (urllib3.exceptions.HTTPError, OSError) as err:
                raise unreachable(what, err) from None
            if resp.status in (301, 302, 303, 307, 308) and resp.headers.get("Location"):
                resp.drain_conn()
                resp.release_conn()
                url = urljoin(url, resp.headers["Location"])
                continue
            if resp.status == 401 and _origin(url) == self.origin and not authenticated:
                authenticated = True
                challenge = resp.headers.get("WWW-Authenticate", "")
                resp.drain_conn()
                resp.release_conn()
                self._authenticate(challenge, sent_headers.get("Authorization", ""), what)
                continue
            if resp.status >= 400:
                resp.drain_conn()
                resp.release_conn()
                raise self._classify(resp.status, resp.headers, what, _origin(url) == self.origin)
            resp.final_url = url
            return resp
        raise Retryable(AgentError(reasons.SourceUnreachable, f"{what}: more than {MAX_REDIRECTS} redirects"))

    def _authenticate(self, challenge: str, rejected: str, what: str) -> None:
        """Answer a 401: a bearer token from the realm, or the basic credentials. What was already
        sent and rejected is not sent again (another thread may have refreshed it meanwhile)."""
        with self.lock:
            if self.authorization and self.authorization != rejected:
                return
            scheme, params = parse_challenge(challenge)
            if scheme == "bearer" and params.get("realm"):
                self.authorization = "Bearer " + self._token(params, what)
                return
            if scheme == "basic" and self.credentials:
                self.authorization = self.credentials.basic
                return
            raise self._auth_failed(what, "HTTP 401")

    def _auth_failed(self, what: str, detail: str) -> AgentError:
        ref = self.reference
        remedy = (f"The Secret ({self.secret_field}) must be a Docker config JSON with credentials for "
                  f"{ref.registry} that may {self.action} {ref.repository}.")
        if self.credentials is None:
            return AgentError(reasons.AuthFailed, f"{what}: {detail}: the registry {ref.registry} wants credentials "
                                                  "and none were given", remedy)
        return AgentError(reasons.AuthFailed, f"{what}: {detail}: the registry {ref.registry} refused the "
                                              "credentials given, or they may not pull this repository", remedy)

    def _token(self, params: dict[str, str], what: str) -> str:
        """The distribution token flow: GET realm?service&scope, with basic credentials if any."""
        realm = params["realm"]
        if urlsplit(realm).scheme not in ("http", "https") or not urlsplit(realm).netloc:
            raise AgentError(reasons.InvalidSource, f"{what}: the registry's token realm {realm!r} is not a URL")
        if urlsplit(realm).scheme == "http" and self.origin[0] == "https" and self.credentials:
            raise AgentError(reasons.InvalidSource, f"{what}: the registry's token realm {realm} is plain http; "
                                                    "credentials are not sent there")
        query = {k: v for k, v in (("service", params.get("service")),
                                   ("scope", params.get("scope") or f"repository:{self.reference.repository}:pull"))
                 if v}
        url = realm + ("&" if "?" in realm else "?") + urlencode(query)
        headers = {"User-Agent": "fleetcache-agent/0.1"}
        if self.credentials:
            headers["Authorization"] = self.credentials.basic
        try:
            resp = self.http.request("GET", url, headers=headers, redirect=False)
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise unreachable(f"GET token from {realm}", err) from None
        if resp.status in (401, 403):
            raise self._auth_failed(f"GET token from {realm}", f"HTTP {resp.status}")
        if resp.status >= 300:
            raise self._classify(resp.status, resp.headers, f"GET token from {realm}", True)
        try:
            answer = json.loads(resp.data)
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise Retryable(AgentError(reasons.SourceUnreachable, f"GET token from {realm}: no token in the answer"))
        if self.on_secret:
            self.on_secret((token,))
        return token

    def _classify(self, status: int, headers, what: str, registry_origin: bool) -> Exception:
        detail = f"HTTP {status}"
        if status in (401, 403):
            failure = self._auth_failed(what, detail)
            # a CDN refusing a redirect is an expired signed URL: ask the registry again
            return failure if registry_origin else Retryable(failure)
        if status == 404:
            return AgentError(reasons.SourceNotFound, f"{what}: {detail}: {self.reference.registry}/"
                                                      f"{self.reference.repository} has no such manifest or blob",
                              "Check spec.source.oci.reference (--oci-reference): the registry, repository and "
                              "tag or digest; a blob deleted since resolve needs the artifact pushed again.")
        if status == 429:
            return Retryable(AgentError(reasons.RateLimited, f"{what}: {detail}: the registry asked the agent to "
                                                             "slow down"), retry_after(headers.get("Retry-After")))
        return Retryable(AgentError(reasons.SourceUnreachable, f"{what}: {detail}"))

    # -- the API ------------------------------------------------------------------------------
    def manifest(self, name: str) -> Manifest:
        """The manifest by tag or digest, its digest the sha256 of the bytes served (checked
        against `name` when that is a digest)."""
        what = f"manifest {self.reference.registry}/{self.reference.repository}:{name}"

        def get() -> Manifest:
            resp = self.request("GET", f"{self.base}/manifests/{name}", {"Accept": MANIFEST_ACCEPT})
            raw = resp.data
            if len(raw) > MAX_MANIFEST:
                raise AgentError(reasons.InvalidSource, f"{what}: {len(raw)} bytes, more than a manifest may be")
            digest = "sha256:" + hashlib.sha256(raw).hexdigest()
            if name.startswith("sha256:") and digest != name:
                raise AgentError(reasons.DigestMismatch, f"{what}: the registry served bytes whose digest is "
                                                         f"{digest}")
            try:
                body = json.loads(raw)
            except ValueError:
                raise AgentError(reasons.InvalidSource, f"{what}: not JSON") from None
            if not isinstance(body, dict):
                raise AgentError(reasons.InvalidSource, f"{what}: not a JSON object")
            media_type = body.get("mediaType") or resp.headers.get("Content-Type", "").split(";")[0]
            return Manifest(digest, str(media_type), body)

        return self.policy.run(get, what)

    def blob_url(self, digest: str) -> str:
        return f"{self.base}/blobs/{digest}"

    def open_blob(self, digest: str, start: int, end: int, size: int) -> Any:
        """A streaming response for bytes [start, end) of a blob of `size` bytes."""
        whole = (start, end) == (0, size)
        headers = {} if whole else {"Range": f"bytes={start}-{end - 1}"}
        resp = self.request("GET", self.blob_url(digest), headers, stream=True)
        expected = f"bytes {start}-{end - 1}/{size}"
        if (resp.status == 206 and resp.headers.get("Content-Range") == expected) or (resp.status == 200 and whole):
            return resp
        got = resp.headers.get("Content-Range") or f"HTTP {resp.status}"
        resp.close()
        total = got.rpartition("/")[2]
        if resp.status == 206 and total.isdigit() and int(total) != size:
            raise AgentError(reasons.DigestMismatch, f"blob {digest}: the registry holds {total} bytes, its "
                                                     f"descriptor says {size}")
        raise Retryable(AgentError(reasons.SourceUnreachable, f"GET blob {digest}: asked for {expected}, got {got}"))

    # -- pushing ------------------------------------------------------------------------------
    def present(self, kind: str, name: str) -> str | None:
        """HEAD a blob or manifest (`kind` blobs | manifests): its Docker-Content-Digest when the
        registry holds it (the name itself when it does not say), None when it does not."""
        def head() -> str | None:
            try:
                resp = self.request("HEAD", f"{self.base}/{kind}/{name}",
                                    {"Accept": MANIFEST_ACCEPT} if kind == "manifests" else None)
            except AgentError as err:
                if err.reason == reasons.SourceNotFound:
                    return None
                raise
            return resp.headers.get("Docker-Content-Digest") or name

        return self.policy.run(head, f"HEAD {kind} {name}")

    def upload_blob(self, digest: str, size: int, opened: Callable[[], Any]) -> None:
        """A monolithic upload (distribution spec: POST /blobs/uploads/, then PUT its Location with
        ?digest=): `opened()` gives the bytes as a file, read from its start on every attempt; the
        registry checks them against `digest`."""
        what = f"upload blob {digest}"

        def attempt() -> None:
            started = self.request("POST", f"{self.base}/blobs/uploads/", {"Content-Length": "0"})
            location = started.headers.get("Location")
            if started.status != 202 or not location:
                raise Retryable(AgentError(reasons.SourceUnreachable, f"{what}: HTTP {started.status} without an "
                                                                      "upload location"))
            url = urljoin(self.base, location)
            url += ("&" if "?" in url else "?") + urlencode({"digest": digest})
            with opened() as stream:
                def body() -> Any:
                    stream.seek(0)
                    return stream

                done = self.request("PUT", url, {"Content-Type": "application/octet-stream",
                                                 "Content-Length": str(size)}, body=body)
            if done.status != 201:
                raise Retryable(AgentError(reasons.SourceUnreachable, f"{what}: HTTP {done.status}, not 201"))

        self.policy.run(attempt, what)

    def put_manifest(self, name: str, body: bytes, media_type: str) -> str:
        """PUT a manifest by digest or tag; the digest the registry says it stored."""
        what = f"PUT manifest {self.reference.registry}/{self.reference.repository}:{name}"

        def put() -> str:
            resp = self.request("PUT", f"{self.base}/manifests/{name}", {"Content-Type": media_type},
                                body=lambda: body)
            stored = resp.headers.get("Docker-Content-Digest") or "sha256:" + hashlib.sha256(body).hexdigest()
            if stored != "sha256:" + hashlib.sha256(body).hexdigest():
                raise AgentError(reasons.DigestMismatch, f"{what}: the registry stored {stored}")
            return stored

        return self.policy.run(put, what)
