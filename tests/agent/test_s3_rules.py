"""The S3 rules that need no server: S3's answers as rows of the exit-code table, which checksums are
file digests, the names an S3 source is kept under, and the pinned manifest's refusals and identity."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys

import pytest

from fleetcache.agent.errors import AgentError
from fleetcache.agent.hub import Retryable
from fleetcache.agent.s3 import S3Location, classify, sha256_from_checksum
from fleetcache.agent.sources import manifest_commit, parse_manifest
from fleetcache.volume import repo_folder

ANSWERS = {
    # status, S3 code: the row, and whether the agent retries before giving it
    (403, "InvalidAccessKeyId"): ("AuthFailed", False),
    (403, "SignatureDoesNotMatch"): ("AuthFailed", False),
    (403, "AccessDenied"): ("AuthFailed", False),
    (400, "ExpiredToken"): ("AuthFailed", False),
    (404, "NoSuchBucket"): ("SourceNotFound", False),
    (404, "NoSuchKey"): ("SourceNotFound", False),
    (404, "NoSuchVersion"): ("SourceNotFound", False),
    (404, ""): ("SourceNotFound", False),  # a HEAD's 404 has no body
    (412, "PreconditionFailed"): ("DigestMismatch", False),
    (416, "InvalidRange"): ("DigestMismatch", False),
    (301, "PermanentRedirect"): ("InvalidConfiguration", False),
    (400, "AuthorizationHeaderMalformed"): ("InvalidConfiguration", False),
    (503, "SlowDown"): ("RateLimited", True),
    (429, ""): ("RateLimited", True),
    (503, "ServiceUnavailable"): ("SourceUnreachable", True),
    (500, "InternalError"): ("SourceUnreachable", True),
    (400, "RequestTimeout"): ("SourceUnreachable", True),
}


@pytest.mark.parametrize("answer,expected", ANSWERS.items(), ids=[f"{s}-{c or 'nocode'}" for s, c in ANSWERS])
def test_each_s3_answer_is_its_row_of_the_exit_code_table(answer, expected):
    failure = classify(*answer, "GET s3://models/tiny/x")
    reason, retried = expected
    assert isinstance(failure, Retryable) == retried
    assert (failure.final if retried else failure).reason == reason
    assert isinstance(failure.final if retried else failure, AgentError)


SHA = hashlib.sha256(b"weights").digest()


@pytest.mark.parametrize("value,expected", [
    (base64.b64encode(SHA).decode(), SHA.hex()),  # a full-object checksum is the file's sha256
    (base64.b64encode(SHA).decode() + "-3", None),  # a checksum of 3 parts' checksums is not
    (base64.b64encode(SHA[:20]).decode(), None),  # not 32 bytes
    ("not base64!", None),
    (None, None),
])
def test_only_a_full_object_sha256_checksum_is_taken_as_the_files_digest(value, expected):
    assert sha256_from_checksum(value) == expected


@pytest.mark.parametrize("bucket,prefix,folder,repo,directory", [
    ("models", "", "", "s3/models", "models--s3--models"),
    ("models", "tiny", "tiny/", "s3/models/tiny", "models--s3--models--tiny"),
    ("models", "llama/8b-instruct/", "llama/8b-instruct/", "s3/models/llama/8b-instruct",
     "models--s3--models--llama--8b-instruct"),
])
def test_a_prefix_is_a_folder_and_names_the_cache_directory(bucket, prefix, folder, repo, directory):
    location = S3Location(bucket, prefix)
    assert (location.folder, location.repo, repo_folder(location.repo)) == (folder, repo, directory)


ITEM = {"path": "model.safetensors", "size": 7, "sha256": SHA.hex(), "etag": '"abc"'}


@pytest.mark.parametrize("manifest", [
    {"path": "a"},  # not a list
    [{"path": "a", "size": 1}],  # no sha256
    [{**ITEM, "path": "../x"}],
    [{**ITEM, "path": "/etc/passwd"}],
    [{**ITEM, "size": -1}],
    [{**ITEM, "size": True}],
    [{**ITEM, "sha256": "XYZ"}],
    [{**ITEM, "owner": "me"}],  # an unknown field
    [ITEM, ITEM],  # a path twice
    [{**ITEM, "path": "a"}, {**ITEM, "path": "a/b"}],  # a file that is also a folder
], ids=["not-a-list", "no-sha256", "dotdot", "absolute", "negative-size", "bool-size", "bad-sha256",
        "unknown-field", "duplicate", "file-and-folder"])
def test_a_malformed_manifest_is_refused_not_sanitized(manifest):
    with pytest.raises(AgentError) as refused:
        parse_manifest(manifest)
    assert refused.value.reason == "InvalidSource"


def test_the_commit_changes_with_a_pin_even_when_the_bytes_do_not():
    pinned = [ITEM]
    repinned = [{**ITEM, "etag": '"def"'}]
    assert manifest_commit(pinned) != manifest_commit(repinned)
    assert manifest_commit(pinned) == manifest_commit([dict(ITEM)])
    assert manifest_commit(pinned).startswith("s3-") and len(manifest_commit(pinned)) == 43


def test_the_agent_imports_boto3_only_when_it_makes_an_s3_client():
    """node-ready runs as a readiness probe on every node: its start-up must not pay for boto3."""
    probe = "import sys, fleetcache.agent.cli; print('boto3' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"
