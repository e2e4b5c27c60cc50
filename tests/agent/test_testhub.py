"""The test hub is faithful enough that a real client written by others downloads from it."""

from __future__ import annotations

import json
import struct

import pytest
import urllib3
from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

from fleetcache.devtools.testhub import BytesContent, Fault, PatternContent, TestHub, make_model
from tests.agent.conftest import REPO, TOKEN, expected_bytes

http = urllib3.PoolManager(retries=False)


def test_snapshot_download_fetches_every_file_byte_identical(hub, tiny, tmp_path):
    folder = snapshot_download(REPO, cache_dir=tmp_path, endpoint=hub.endpoint, token=False)
    for path, data in expected_bytes(hub).items():
        assert (tmp_path / folder / path).read_bytes() == data


def test_tree_listing_pages_with_a_link_header(tiny, tmp_path):
    with TestHub(tree_page_size=3) as paged:
        paged.add_repo(REPO, make_model(100_000, shards=3))
        files = HfApi(endpoint=paged.endpoint, token=False).list_repo_files(REPO)
        tree_calls = [r for r in paged.requests() if "/tree/" in r.path]
    expected = sorted(paged.repos[REPO].commits[paged.repos[REPO].refs["main"]])
    assert sorted(files) == expected and len(expected) > 6
    assert len(tree_calls) == -(-len(expected) // 3)


def test_lfs_resolve_redirects_to_the_cdn_with_linked_etag_and_size(hub, tiny):
    commit = hub.repos[REPO].refs["main"]
    shard = hub.repos[REPO].commits[commit]["model-00001-of-00002.safetensors"]
    resp = http.request("HEAD", f"{hub.endpoint}/{REPO}/resolve/main/{shard.path}", redirect=False)
    assert resp.status == 302
    assert resp.headers["Location"].startswith(hub.cdn_endpoint)
    assert resp.headers["X-Linked-Etag"] == f'"{shard.sha256}"'
    assert resp.headers["X-Linked-Size"] == str(shard.content.size)
    assert resp.headers["X-Repo-Commit"] == commit


def test_cdn_serves_ranges(hub, tiny):
    shard = hub.repos[REPO].commits[hub.repos[REPO].refs["main"]]["model-00001-of-00002.safetensors"]
    url = f"{hub.cdn_endpoint}/lfs/{shard.sha256}"
    resp = http.request("GET", url, headers={"Range": "bytes=100-199"})
    assert resp.status == 206 and resp.data == expected_bytes(hub)[shard.path][100:200]
    assert resp.headers["Content-Range"] == f"bytes 100-199/{shard.content.size}"


def test_generated_safetensors_header_parses(hub, tiny):
    data = expected_bytes(hub)["model-00001-of-00002.safetensors"]
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    (start, end) = next(v for k, v in header.items() if k != "__metadata__")["data_offsets"]
    assert 8 + length + end == len(data) and start == 0


def test_generated_content_is_not_periodic_at_power_of_two_offsets():
    content = PatternContent(64 << 20, seed=1)
    assert bytes(content.read(0, 64)) != bytes(content.read(32 << 20, 64))


def test_wrong_token_is_401_invalid_credentials(hub, tiny):
    resp = http.request("GET", f"{hub.endpoint}/api/models/{REPO}/revision/main",
                        headers={"Authorization": "Bearer nope"})
    assert resp.status == 401 and resp.headers["X-Error-Message"] == "Invalid credentials in Authorization header"


def test_private_repo_without_token_looks_like_not_found(hub, tmp_path):
    hub.add_repo("acme/secret", {"a.json": b"{}"}, private=True)
    with pytest.raises(RepositoryNotFoundError):
        snapshot_download("acme/secret", cache_dir=tmp_path, endpoint=hub.endpoint, token=False)
    assert hub.requests()[-1].status == 401


def test_gated_repo_with_a_token_that_did_not_accept_is_403_gated(hub, tmp_path):
    hub.add_repo("acme/gated", {"a.json": b"{}"}, gated=True)
    hub.add_token(TOKEN)
    with pytest.raises(GatedRepoError):
        snapshot_download("acme/gated", cache_dir=tmp_path, endpoint=hub.endpoint, token=TOKEN)


def test_private_repo_with_a_granted_token_downloads(hub, tmp_path):
    hub.add_repo("acme/secret", {"a.json": b"{}"}, private=True)
    hub.add_token(TOKEN, repos=("acme/secret",))
    folder = snapshot_download("acme/secret", cache_dir=tmp_path, endpoint=hub.endpoint, token=TOKEN)
    assert (tmp_path / folder / "a.json").read_bytes() == b"{}"


def test_status_fault_answers_429_with_retry_after_then_recovers(hub, tiny):
    hub.inject(Fault("status", status=429, retry_after="3", times=1))
    url = f"{hub.endpoint}/api/models/{REPO}/revision/main"
    first = http.request("GET", url)
    assert first.status == 429 and first.headers["Retry-After"] == "3"
    assert http.request("GET", url).status == 200


def test_truncate_fault_sends_fewer_bytes_than_content_length(hub, tiny):
    hub.inject(Fault("truncate", path="*.json", after_bytes=10))
    resp = http.request("GET", f"{hub.endpoint}/{REPO}/resolve/main/tokenizer.json", preload_content=False)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        resp.read()


def test_corrupt_fault_flips_exactly_one_byte(hub, tiny):
    hub.inject(Fault("corrupt", path="*config.json", offset=5))
    good = expected_bytes(hub)["config.json"]
    got = http.request("GET", f"{hub.endpoint}/{REPO}/resolve/main/config.json").data
    assert len(got) == len(good) and [i for i in range(len(good)) if got[i] != good[i]] == [5]


def test_records_count_body_bytes_per_request(hub, tiny):
    hub.reset_records()
    data = http.request("GET", f"{hub.endpoint}/{REPO}/resolve/main/config.json").data
    assert hub.bytes_sent() == len(data) and hub.requests()[0].headers["Host"].startswith("127.0.0.1")


def test_bytes_sent_for_a_repo_counts_its_cdn_downloads_and_no_other_repo(hub, tiny):
    hub.add_repo("acme/other", {"config.json": BytesContent(b'{"model_type": "llama"}')})
    hub.reset_records()
    shard = http.request("GET", f"{hub.endpoint}/{REPO}/resolve/main/model-00001-of-00002.safetensors").data
    other = http.request("GET", f"{hub.endpoint}/acme/other/resolve/main/config.json").data
    assert hub.bytes_sent(repo=REPO) == len(shard)
    assert hub.bytes_sent(repo="acme/other") == len(other)
