"""Real loaders read a fetched cache offline and read-only, as Cache replicas run them.

A tiny Llama repository (config, a tokenizer built with `tokenizers`, two safetensors
shards and their index) is generated here and served by the test hub; the agent fetches it
by commit, as the hydration Job does, with `--ref main`; the tree is made read-only; then
transformers and huggingface_hub load it with HF_HUB_OFFLINE=1 and HF_HUB_CACHE=DEST/hub,
by snapshot path and by repo id with and without a revision.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from fleetcache.devtools.testhub import TestHub
from tests.agent.conftest import fetch_args, run_agent, snapshot_dir

LLAMA = "acme/tiny-llama"
HIDDEN, LAYERS, HEADS, INTERMEDIATE = 16, 2, 2, 32
TEXT = ["hello world", "the cache is read only", "engines load weights offline", "fleetcache warms caches"]


def tokenizer_json() -> bytes:
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(TEXT, trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>"]))
    return tokenizer.to_str().encode()


def llama_repo() -> dict[str, bytes]:
    """The files a Llama checkpoint on the Hub has, small enough to generate per test run."""
    vocab = Tokenizer.from_str(tokenizer_json().decode()).get_vocab_size()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
              "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "num_key_value_heads": HEADS, "vocab_size": vocab, "max_position_embeddings": 64,
              "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    rng = np.random.default_rng(0)
    weights = {"model.embed_tokens.weight": (vocab, HIDDEN), "model.norm.weight": (HIDDEN,),
               "lm_head.weight": (vocab, HIDDEN)}
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}."
        weights.update({prefix + f"self_attn.{p}_proj.weight": (HIDDEN, HIDDEN) for p in "qkvo"})
        weights.update({prefix + "mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
                        prefix + "mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
                        prefix + "mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
                        prefix + "input_layernorm.weight": (HIDDEN,),
                        prefix + "post_attention_layernorm.weight": (HIDDEN,)})
    names = sorted(weights)
    shards = {f"model-0000{i + 1}-of-00002.safetensors": names[i::2] for i in range(2)}
    files = {"config.json": json.dumps(config).encode(), "tokenizer.json": tokenizer_json(),
             "tokenizer_config.json": json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                  "unk_token": "<unk>", "bos_token": "<s>",
                                                  "eos_token": "</s>"}).encode()}
    weight_map = {}
    for shard, members in shards.items():
        files[shard] = save({n: rng.standard_normal(weights[n]).astype(np.float32) for n in members},
                            metadata={"format": "pt"})
        weight_map.update({n: shard for n in members})
    total = sum(int(np.prod(weights[n])) * 4 for n in names)
    files["model.safetensors.index.json"] = json.dumps({"metadata": {"total_size": total},
                                                        "weight_map": weight_map}).encode()
    return files


# Runs in a fresh interpreter: huggingface_hub reads HF_HUB_OFFLINE and HF_HUB_CACHE at import.
LOADER = r"""
import json, sys
from huggingface_hub import snapshot_download
from safetensors import safe_open
from transformers import AutoConfig, AutoTokenizer

target, revision = sys.argv[1], sys.argv[2] or None
kwargs = {"revision": revision} if revision else {}
try:
    config = AutoConfig.from_pretrained(target, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(target, **kwargs)
    # vLLM's get_model_path for a repo id: snapshot_download(..., local_files_only=True)
    folder = target if target.startswith("/") else snapshot_download(target, local_files_only=True, **kwargs)
    index = json.load(open(f"{folder}/model.safetensors.index.json"))
    tensors = 0
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(f"{folder}/{shard}", "np") as f:
            tensors += len(list(f.keys()))
    print(json.dumps({"model_type": config.model_type, "hidden_size": config.hidden_size, "folder": folder,
                      "ids": tokenizer("hello world")["input_ids"], "tensors": tensors,
                      "mapped": len(index["weight_map"])}))
except Exception as err:
    print(json.dumps({"error": type(err).__name__}))
"""


def tree_state(root: Path) -> dict[str, tuple]:
    return {str(p.relative_to(root)): (p.lstat().st_mode, p.lstat().st_mtime_ns, p.lstat().st_size)
            for p in sorted(root.rglob("*"))}


def make_read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            mode = path.stat().st_mode
            path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def load(dest: Path, home: Path, target: str, revision: str = "") -> dict:
    env = {**os.environ, "HF_HUB_CACHE": str(dest / "hub"), "HF_HUB_OFFLINE": "1", "HF_HOME": str(home),
           "TRANSFORMERS_VERBOSITY": "error"}
    proc = subprocess.run([sys.executable, "-c", LOADER, target, revision], capture_output=True, text=True,
                          timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """DEST after a fetch by commit with --ref main, read-only, with what loaders saw."""
    root = tmp_path_factory.mktemp("engines")
    with TestHub() as hub:
        commit = hub.add_repo(LLAMA, llama_repo())
        dest = root / "volume"
        result = run_agent(*fetch_args(hub, dest, "--revision", commit, "--ref", "main", repo=LLAMA))
        assert result.code == 0, result.stderr
        unreferenced = root / "no-ref"
        assert run_agent(*fetch_args(hub, unreferenced, "--revision", commit, repo=LLAMA)).code == 0
    make_read_only(dest)
    before = tree_state(dest)
    home = root / "home"
    loads = {
        "snapshot path": load(dest, home, str(snapshot_dir(dest, commit, LLAMA))),
        "repo id": load(dest, home, LLAMA),
        "repo id at main": load(dest, home, LLAMA, "main"),
        "repo id at the commit": load(dest, home, LLAMA, commit),
        "repo id without a ref": load(unreferenced, home, LLAMA),
    }
    yield {"commit": commit, "dest": dest, "loads": loads, "unchanged": tree_state(dest) == before}
    make_writable = [p for p in [dest, *dest.rglob("*")] if not p.is_symlink()]
    for path in make_writable:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


@pytest.mark.parametrize("way", ["snapshot path", "repo id", "repo id at main", "repo id at the commit"])
def test_transformers_and_huggingface_hub_load_the_read_only_cache_offline(cache, way):
    loaded = cache["loads"][way]
    assert loaded.get("error") is None, loaded
    assert loaded["model_type"] == "llama" and loaded["hidden_size"] == HIDDEN
    assert loaded["ids"] and loaded["tensors"] == loaded["mapped"] == 3 + 9 * LAYERS
    assert loaded["folder"] == str(snapshot_dir(cache["dest"], cache["commit"], LLAMA))


def test_without_ref_a_repo_id_does_not_resolve_offline(cache):
    assert cache["loads"]["repo id without a ref"]["error"] in ("OSError", "LocalEntryNotFoundError")


def test_loading_writes_nothing_on_the_cache(cache):
    assert cache["unchanged"]
