"""The fetch engine's byte path: whole blocks direct, everything else through the page cache,
and the same verified snapshot either way."""

from __future__ import annotations

import errno
import fcntl
import os

from fleetcache.devtools.testhub import PatternContent
from tests.agent.conftest import REPO, expected_bytes, fetch_args, published_files_verify, repo_dir

ODD_SIZE = (3 << 20) + 12345  # ends mid-block


def fetch_in_process(hub, dest) -> int:
    from fleetcache.agent import cli

    return cli.main(fetch_args(hub, dest, "--concurrency", "4"))


def test_a_filesystem_that_refuses_o_direct_gets_every_byte_through_the_page_cache(hub, tmp_path, monkeypatch):
    from fleetcache.agent import fetch

    commit = hub.add_repo(REPO, {"w.safetensors": PatternContent(ODD_SIZE, 4), "config.json": b"{}"})
    real_open = os.open

    def no_direct(path, flags, *args, **kwargs):
        if flags & fetch.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(fetch.os, "open", no_direct)
    assert fetch_in_process(hub, tmp_path) == 0
    assert published_files_verify(tmp_path, hub) == [f"{commit}/config.json", f"{commit}/w.safetensors"]


def test_direct_writes_refused_after_opening_fall_back_to_the_page_cache(hub, tmp_path, monkeypatch):
    from fleetcache.agent import fetch

    commit = hub.add_repo(REPO, {"w.safetensors": PatternContent(ODD_SIZE, 5)})
    real_pwrite, refused = os.pwrite, []

    def refuse_direct(fd, data, offset):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & fetch.O_DIRECT:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(fetch.os, "pwrite", refuse_direct)
    assert fetch_in_process(hub, tmp_path) == 0
    assert refused  # the direct path was tried, refused, and every byte still arrived
    assert published_files_verify(tmp_path, hub) == [f"{commit}/w.safetensors"]


def test_a_resume_from_a_journal_that_ends_mid_block_fetches_only_the_rest(hub, tmp_path):
    commit = hub.add_repo(REPO, {"w.safetensors": PatternContent(ODD_SIZE, 6)})
    sha = hub.repos[REPO].commits[commit]["w.safetensors"].sha256
    kept = (1 << 20) + 777  # a block's tail written through the page cache before a crash
    blobs = repo_dir(tmp_path) / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f".{sha}.fleetcache-part").write_bytes(expected_bytes(hub)["w.safetensors"][:kept])
    (blobs / f".{sha}.fleetcache-journal").write_text(f"0 {kept}\n")
    assert fetch_in_process(hub, tmp_path) == 0
    assert hub.bytes_sent("cdn") == ODD_SIZE - kept
    assert published_files_verify(tmp_path, hub) == [f"{commit}/w.safetensors"]


def test_a_response_without_a_zero_copy_reader_is_read_through_read1():
    from fleetcache.agent.fetch import body_reader

    class Wrapped:  # a source's wrapper, like the mirror's byte counter
        def __init__(self, data: bytes):
            self.data = data

        def read1(self, n: int) -> bytes:
            chunk, self.data = self.data[:n], self.data[n:]
            return chunk

    buffer = memoryview(bytearray(8))
    readinto = body_reader(Wrapped(b"abcdefghij"))
    assert [readinto(buffer), bytes(buffer)] == [8, b"abcdefgh"]
    assert [readinto(buffer), bytes(buffer[:2])] == [2, b"ij"]
    assert readinto(buffer) == 0
