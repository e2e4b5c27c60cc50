"""The Hub HTTP API client: listing, ranged reads, error mapping, retries, token pinning.

Redirects are followed by hand so the token is attached only to requests whose origin
(scheme, host, port) is the endpoint's: the Hub redirects LFS files to a CDN host, and
the token must never travel there. Every HTTP failure becomes either a permanent
AgentError (the table's code) or a retryable one; `RetryPolicy.run` retries the latter
with exponential backoff and full jitter, honouring Retry-After for 429.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import urllib3

from fleetcache import reasons
from fleetcache.agent.errors import AgentError

log = logging.getLogger("fleetcache.agent")

MAX_REDIRECTS = 5
MAX_RETRY_AFTER = 60.0
QUICK_ATTEMPTS = 3  # a connection refused or a name that does not resolve: tried again briefly, then the Job's turn
READ_TIMEOUT = 30.0  # seconds without a byte before a stream counts as hung and is retried
CONNECT_TIMEOUT = 10.0


class Retryable(Exception):
    """A transient failure; becomes `final` (17 or 18) once retries are exhausted. A `quick` one
    answered at once and will answer the same for a while (nothing listens, no such name): it
    gets a few short retries, and the Job's next pod is what waits longer."""

    def __init__(self, final: AgentError, retry_after: float | None = None, quick: bool = False):
        super().__init__(final.what)
        self.final = final
        self.retry_after = retry_after
        self.quick = quick


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 8.0
    # Told what is being retried (and None once a retried action succeeded), so a progress
    # record shows a hung or failing endpoint while the agent is still retrying it.
    report: Callable[[str | None], None] | None = field(default=None, compare=False)

    @classmethod
    def from_env(cls) -> RetryPolicy:
        """FLEETCACHE_RETRY_BASE_DELAY shortens backoff (tests; impatient operators)."""
        base = float(os.environ.get("FLEETCACHE_RETRY_BASE_DELAY", cls.base_delay))
        return cls(base_delay=base, max_delay=max(base, cls.max_delay * base / cls.base_delay))

    def delay(self, attempt: int, retry_after: float | None, quick: bool = False) -> float:
        if retry_after is not None:
            return min(retry_after, MAX_RETRY_AFTER)
        return random.uniform(0, self.base_delay if quick else min(self.max_delay, self.base_delay * 2**attempt))

    def run(self, action, what: str, abort: threading.Event | None = None):
        """Call `action()` until it succeeds, raises a permanent error, or attempts run out."""
        for attempt in range(self.attempts):
            try:
                result = action()
            except Retryable as err:
                attempts = min(self.attempts, QUICK_ATTEMPTS) if err.quick else self.attempts
                if attempt >= attempts - 1:
                    raise err.final from None
                pause = self.delay(attempt, err.retry_after, err.quick)
                log.warning("retrying %s in %.2fs after: %s", what, pause, err.final.what)
                if self.report:
                    self.report(f"retrying {what} (attempt {attempt + 2} of {attempts}) after: "
                                f"{err.final.what}")
                if (abort or threading.Event()).wait(pause):  # another worker failed: stop waiting
                    raise err.final from None
                continue
            if attempt and self.report:
                self.report(None)
            return result


def read_timeout_from_env() -> float:
    """FLEETCACHE_READ_TIMEOUT (seconds) shortens how long a silent connection is waited for (tests)."""
    return float(os.environ.get("FLEETCACHE_READ_TIMEOUT", READ_TIMEOUT))


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def classify(status: int, headers, what: str, has_token: bool) -> Exception | None:
    """The Hub's error contract (DESIGN §4) mapped onto the exit-code table."""
    if status < 400:
        return None
    code = headers.get("X-Error-Code", "")
    message = headers.get("X-Error-Message", "")
    detail = f"{what}: HTTP {status}" + (f" {code}" if code else "") + (f" ({message})" if message else "")
    if status == 401 and "Invalid credentials" in message:
        return AgentError(reasons.AuthFailed, f"{detail}; the token was rejected")
    if code == "GatedRepo" or status == 403:
        return AgentError(reasons.AuthFailed, f"{detail}; the token's account has no access (gated model terms?)")
    if status == 401 and has_token and code not in ("RepoNotFound", "RevisionNotFound", "EntryNotFound"):
        return AgentError(reasons.AuthFailed, f"{detail}; the token was rejected")
    if status in (401, 404, 410):
        hint = "" if has_token else " (no token was given)"
        return AgentError(reasons.SourceNotFound, f"{detail}{hint}")
    if status == 429:
        return Retryable(AgentError(reasons.RateLimited, detail), _retry_after(headers.get("Retry-After")))
    return Retryable(AgentError(reasons.SourceUnreachable, detail))


def describe(err: BaseException) -> str:
    """A network failure in a few words: a connection never made says why (refused, the name does
    not resolve) before a timeout says so, as urllib3 files both under its timeouts."""
    if isinstance(err, urllib3.exceptions.NewConnectionError):
        where = f"{err.conn.host}:{err.conn.port}"
        cause = err.__cause__
        if isinstance(err, urllib3.exceptions.NameResolutionError):
            said = cause.strerror if isinstance(cause, OSError) and cause.strerror else "no address"
            return f"the name {err.conn.host} does not resolve ({said})"
        if isinstance(cause, ConnectionRefusedError):
            return f"connection refused by {where}"
        if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
            return f"cannot connect to {where} ({cause.strerror or type(cause).__name__})"
    if isinstance(err, (urllib3.exceptions.TimeoutError, TimeoutError)):
        return f"no answer within the timeout ({type(err).__name__})"
    return type(err).__name__


def refused(err: BaseException) -> bool:
    """A connection refused, or a name that does not resolve: answered at once, not a hung endpoint."""
    return isinstance(err, urllib3.exceptions.NameResolutionError) or (
        isinstance(err, urllib3.exceptions.NewConnectionError) and isinstance(err.__cause__, ConnectionRefusedError))


def unreachable(what: str, err: BaseException) -> Retryable:
    return Retryable(AgentError(reasons.SourceUnreachable, f"{what}: {describe(err)}"), quick=refused(err))


def connection_pool(num_pools: int, pool_size: int, timeout: float) -> urllib3.PoolManager:
    """Connections for one client: no urllib3 retries or redirects of its own (RetryPolicy retries,
    redirects are followed by hand), a read `timeout` that counts a silent stream as hung."""
    return urllib3.PoolManager(
        num_pools=num_pools, maxsize=pool_size, block=False, retries=False,
        timeout=urllib3.Timeout(connect=min(CONNECT_TIMEOUT, timeout), read=timeout),
    )


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


def redact_url(url: str) -> str:
    """Host and path only: signed CDN query strings stay out of logs and messages."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


class HubClient:
    def __init__(self, endpoint: str, token: str | None, policy: RetryPolicy, pool_size: int = 8,
                 timeout: float = READ_TIMEOUT):
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self.policy = policy
        self._origin = _origin(self.endpoint)
        self.http = connection_pool(8, pool_size, timeout)

    def _headers(self, url: str, extra: dict | None = None) -> dict:
        headers = {"User-Agent": "fleetcache-agent/0.1", "Accept-Encoding": "identity", **(extra or {})}
        if self.token and _origin(url) == self._origin:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def request(self, method: str, url: str, headers: dict | None = None, stream: bool = False):
        """One logical request: redirects followed by hand, token only on the endpoint's origin."""
        what = f"{method} {redact_url(url)}"
        for _ in range(MAX_REDIRECTS + 1):
            # Any: urllib3's response, given the `final_url` the Source protocol reads (agent/sources.py)
            resp: Any
            try:
                resp = self.http.request(method, url, headers=self._headers(url, headers), redirect=False,
                                         preload_content=not stream)
            except (urllib3.exceptions.HTTPError, OSError) as err:
                raise unreachable(what, err) from None
            if resp.status in (301, 302, 303, 307, 308) and resp.headers.get("Location"):
                resp.drain_conn()
                resp.release_conn()
                url = urljoin(url, resp.headers["Location"])
                continue
            failure = classify(resp.status, resp.headers, what, bool(self.token))
            if isinstance(failure, AgentError) and _origin(url) != self._origin:
                failure = Retryable(failure)  # a CDN refusal is an expired or bad redirect: resolve again
            if failure is not None:
                resp.drain_conn()
                resp.release_conn()
                raise failure
            resp.final_url = url
            return resp
        raise Retryable(AgentError(reasons.SourceUnreachable, f"{what}: more than {MAX_REDIRECTS} redirects"))

    def listing(self, repo: str, revision: str) -> dict:
        url = f"{self.endpoint}/api/models/{repo}/revision/{quote(revision, safe='')}?blobs=true"

        def get():
            resp = self.request("GET", url)
            try:
                return json.loads(resp.data)
            except ValueError:
                raise AgentError(reasons.InvalidSource, f"the listing of {repo}@{revision} is not JSON") from None

        return self.policy.run(get, f"listing {repo}@{revision}")

    def file_url(self, repo: str, commit: str, path: str) -> str:
        return f"{self.endpoint}/{repo}/resolve/{commit}/{quote(path)}"

    def open_range(self, url: str, start: int, end: int, size: int):
        """A streaming response for bytes [start, end) of a file of `size` bytes."""
        resp = self.request("GET", url, {"Range": f"bytes={start}-{end - 1}"}, stream=True)
        expected = f"bytes {start}-{end - 1}/{size}"
        if resp.status == 206 and resp.headers.get("Content-Range") == expected:
            return resp
        if resp.status == 200 and start == 0 and end == size:
            return resp
        got = resp.headers.get("Content-Range") or f"HTTP {resp.status}"
        resp.release_conn()
        raise Retryable(AgentError(reasons.SourceUnreachable,
                                   f"GET {redact_url(url)}: asked for {expected}, got {got}"))


class Bandwidth:
    """A token bucket shared by all streams: caps the total rate, lets bursts up to 1/4 s through."""

    def __init__(self, bytes_per_second: float):
        self.rate = bytes_per_second
        self.capacity = max(bytes_per_second / 4, 1 << 16)
        self.tokens = self.capacity
        self.stamp = time.monotonic()
        self.lock = threading.Lock()

    def take(self, n: int) -> None:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            self.tokens -= n
            wait = -self.tokens / self.rate if self.tokens < 0 else 0.0
        if wait > 0:
            time.sleep(wait)
