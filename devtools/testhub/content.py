"""File contents for the test hub: literal bytes, or deterministic bytes generated on the fly.

Generated content lets a test or the benchmark serve a 2 GiB repository without holding
2 GiB in memory: bytes at any offset are a slice of one pseudo-random pattern whose
period (1 MiB + 7) is coprime with every power-of-two part size, so a range written at
the wrong offset changes the digest.
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
from dataclasses import dataclass, field
from typing import Any, Protocol

PATTERN_PERIOD = (1 << 20) + 7


class Content(Protocol):
    size: int

    def read(self, offset: int, length: int) -> memoryview:
        """Up to `length` bytes starting at `offset` (shorter only at the end)."""
        ...


@dataclass
class BytesContent:
    data: bytes
    size: int = field(init=False)

    def __post_init__(self) -> None:
        self.size = len(self.data)

    def read(self, offset: int, length: int) -> memoryview:
        return memoryview(self.data)[offset : offset + length]


_PATTERNS: dict[int, bytes] = {}


def _pattern(seed: int) -> bytes:
    """Twice the period, so any window up to one period is a single zero-copy slice."""
    if seed not in _PATTERNS:
        one = random.Random(seed).randbytes(PATTERN_PERIOD)
        _PATTERNS[seed] = one + one
    return _PATTERNS[seed]


@dataclass
class PatternContent:
    size: int
    seed: int = 0

    def read(self, offset: int, length: int) -> memoryview:
        length = min(length, self.size - offset, PATTERN_PERIOD)
        start = offset % PATTERN_PERIOD
        return memoryview(_pattern(self.seed))[start : start + max(length, 0)]


@dataclass
class ConcatContent:
    """A header followed by a body, e.g. a safetensors JSON header then generated tensor bytes."""

    head: bytes
    body: PatternContent
    size: int = field(init=False)

    def __post_init__(self) -> None:
        self.size = len(self.head) + self.body.size

    def read(self, offset: int, length: int) -> memoryview:
        if offset < len(self.head):
            return memoryview(self.head)[offset : min(len(self.head), offset + length)]
        return self.body.read(offset - len(self.head), length)


def iter_content(content: Content, offset: int = 0, end: int | None = None, block: int = 1 << 20):
    """Yield the bytes of [offset, end) in blocks."""
    end = content.size if end is None else end
    while offset < end:
        chunk = content.read(offset, min(block, end - offset))
        if not len(chunk):
            return
        yield chunk
        offset += len(chunk)


def sha256_of(content: Content) -> str:
    digest = hashlib.sha256()
    for chunk in iter_content(content, block=PATTERN_PERIOD):
        digest.update(chunk)
    return digest.hexdigest()


def git_blob_sha1_of(content: Content) -> str:
    digest = hashlib.sha1(b"blob %d\0" % content.size)
    for chunk in iter_content(content, block=PATTERN_PERIOD):
        digest.update(chunk)
    return digest.hexdigest()


def safetensors_content(tensor_bytes: int, seed: int, name: str = "weight") -> ConcatContent:
    """A safetensors file whose header parses: u64 little-endian length, JSON header, data."""
    elements = tensor_bytes // 2
    header = {
        "__metadata__": {"format": "pt"},
        name: {"dtype": "BF16", "shape": [elements], "data_offsets": [0, elements * 2]},
    }
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8 bytes
    return ConcatContent(struct.pack("<Q", len(raw)) + raw, PatternContent(elements * 2, seed))


def make_model(total_size: int, shards: int = 4, seed: int = 1) -> dict[str, Content]:
    """A small realistic model repo of about `total_size` bytes: shards plus config/tokenizer JSON."""
    config = {
        "architectures": ["FleetcacheForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "torch_dtype": "bfloat16",
    }
    vocab = {f"tok{i}": i for i in range(2000)}
    tokenizer = {"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    files: dict[str, Content] = {
        "config.json": BytesContent(json.dumps(config, indent=2).encode()),
        "generation_config.json": BytesContent(b'{"max_new_tokens": 32}\n'),
        "tokenizer.json": BytesContent(json.dumps(tokenizer).encode()),
        "tokenizer_config.json": BytesContent(b'{"model_max_length": 4096}\n'),
        "README.md": BytesContent(b"# fleetcache test model\n"),
    }
    small = sum(c.size for c in files.values())
    per_shard = max((total_size - small) // shards, 64)
    index: dict[str, Any] = {"metadata": {"total_size": 0}, "weight_map": {}}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        files[name] = safetensors_content(per_shard, seed=seed * 1000 + i, name=f"layers.{i}.weight")
        index["weight_map"][f"layers.{i}.weight"] = name
        index["metadata"]["total_size"] += per_shard
    files["model.safetensors.index.json"] = BytesContent(json.dumps(index, indent=2).encode())
    return files
