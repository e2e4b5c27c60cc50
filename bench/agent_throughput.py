"""Agent throughput, side by side in one run on the same data (issue 3, item 11).

A 2 GiB repository (four safetensors shards plus small JSON files) on the local test hub,
over loopback:
  (a) `fleetcache-agent fetch` (verifies every byte, fsyncs, publishes atomically),
  (b) huggingface_hub `snapshot_download` into a fresh directory (what `hf download` does),
  (c) the floor: one plain sequential GET per file into a file, no hashing, no fsync;
      also reported with an fsync per file, to show what durability alone costs.
Then a warm rerun of (a) and `fleetcache-agent verify`. Each runs as a child process, so
wall time, CPU time and peak RSS (wait4 rusage) are its own, and the hub's CPU (this
process) is never counted. The machine is shared and noisy: compare ratios within a run,
not absolute figures across runs.

CPU per verified GiB (issue 12, item 5): (a)'s user+sys CPU against the floor of the same
bytes, measured in the same round: `transfer` (the agent's HTTP client, urllib3, reading
every file from the same hub into one reused 4 MiB buffer and discarding it, a whole
process like the agent) plus `sha256` (the CPU of hashing the same bytes from memory,
timed around the hash calls alone).

    .venv/bin/python bench/agent_throughput.py [--size-gib 2] [--rounds 1] [--stream-rate B/s] [--json out.json]

--stream-rate caps every connection, as a CDN edge or a long round trip does; then
parallel ranged streams, not CPU, decide the wall time.

    .venv/bin/python bench/agent_throughput.py --sizes-gib 1,3 [--rounds 3] [--json out.json]

The marginal cost per GiB, for models of 100s of GB where start-up and first touch of the
buffers vanish: the agent, the transfer and sha256 of two sizes in every round, and the
slope between them, (CPU at the larger - CPU at the smaller) / (GiB between them), for the
agent and for the floor.

    .venv/bin/python bench/agent_throughput.py --smoke [--json out.json]

Every mode above once, at a few MiB and one round (single size uncapped, the same capped at
--stream-rate or 25 MB/s, and the marginal cost between two sizes), in seconds: it checks
that the bench runs and prints its ratio lines; its figures mean nothing.

Each mode ends with its ratio lines ("ratio agent/floor, ...", "ratio hf/agent, ..."): the
medians over the rounds of figures measured side by side in the same round.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleetcache.devtools.testhub import Fault, TestHub, make_model

REPO = "bench/model"
BIN = Path(sys.executable).parent
MiB = 1 << 20
GiB = 1 << 30
SMOKE_SIZE = 8 * MiB
SMOKE_SIZES = (8 * MiB, 24 * MiB)
SMOKE_STREAM_RATE = 25e6

SNAPSHOT_DOWNLOAD = """
import sys
from huggingface_hub import snapshot_download
snapshot_download(sys.argv[1], cache_dir=sys.argv[2], endpoint=sys.argv[3], token=False)
"""

# The least any client must do - read every byte once over the same loopback into a file.
SEQUENTIAL_READ = """
import json, os, sys, urllib3
endpoint, repo, dest = sys.argv[1:4]
http = urllib3.PoolManager()
info = json.loads(http.request("GET", f"{endpoint}/api/models/{repo}/revision/main").data)
for sibling in info["siblings"]:
    path = os.path.join(dest, sibling["rfilename"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    resp = http.request("GET", f"{endpoint}/{repo}/resolve/main/{sibling['rfilename']}", preload_content=False)
    buffer = memoryview(bytearray(1 << 20))
    with open(path, "wb") as f:
        while n := resp.readinto(buffer):
            f.write(buffer[:n])
        if len(sys.argv) > 4:  # the "floor + fsync" variant: the same bytes, made durable
            f.flush()
            os.fsync(f.fileno())
    resp.release_conn()
"""

# Floor, part one: the same client reads the same bytes and discards them. urllib3's own
# readinto copies through a new bytes object; the http.client response under it fills the
# buffer straight from the socket, as the agent reads.
TRANSFER = """
import json, sys, urllib3
endpoint, repo = sys.argv[1:3]
http = urllib3.PoolManager()
info = json.loads(http.request("GET", f"{endpoint}/api/models/{repo}/revision/main").data)
buffer = memoryview(bytearray(4 << 20))
for sibling in info["siblings"]:
    resp = http.request("GET", f"{endpoint}/{repo}/resolve/main/{sibling['rfilename']}", preload_content=False)
    while resp._fp.readinto(buffer):
        pass
    resp.release_conn()
"""

# Floor, part two: sha256 of the same bytes (the hub's content, generated in memory); only
# the hash calls are timed, so neither start-up nor generating the bytes counts.
SHA256 = """
import hashlib, sys, time
from fleetcache.devtools.testhub.content import iter_content, make_model
spent = 0.0
for content in make_model(int(sys.argv[1]), shards=4).values():
    digest = hashlib.sha256()
    for chunk in iter_content(content, block=4 << 20):
        began = time.thread_time()
        digest.update(chunk)
        spent += time.thread_time() - began
print(spent)
"""


def run(argv: list[str], prime: tuple[Path, int] | None = None) -> dict:
    """Wall, user+sys CPU and peak RSS of one child process (and its last stdout line)."""
    if prime:
        prime_memory(*prime)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env={**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{argv[:3]} failed: {err.read().decode(errors='replace')[-2000:]}")
        last = out.read().decode(errors="replace").strip().rsplit("\n", 1)[-1]
    return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "user_s": round(usage.ru_utime, 3), "sys_s": round(usage.ru_stime, 3),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "out": last}


def ratio(numerator: float, denominator: float, digits: int = 3) -> float | None:
    """numerator / denominator, or None when the denominator is not positive (at smoke sizes
    a slope between two sizes can be noise around zero)."""
    return round(numerator / denominator, digits) if denominator > 0 else None


def cpu_per_gib(row: dict, total: int) -> dict:
    """CPU-seconds per GiB of the agent's fetch and of its floor (transfer + sha256), and their ratio."""
    gib = total / GiB
    transfer = row["transfer"]["cpu_s"] / gib
    sha256 = float(row["sha256"]["out"]) / gib
    agent = row["agent"]["cpu_s"] / gib
    return {"agent": round(agent, 3), "transfer": round(transfer, 3), "sha256": round(sha256, 3),
            "floor": round(transfer + sha256, 3), "agent_over_floor": ratio(agent, transfer + sha256)}


def median(values: list) -> float | None:
    """The median of the values that exist (a ratio is None when its denominator was not positive)."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def shown(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def ratio_line(label: str, values: list, digits: int = 3) -> str:
    """One ratio: its median over the rounds, then every round's figure."""
    rounds = f"{len(values)} round{'s' if len(values) != 1 else ''}"
    return (f"ratio {label}: {shown(median(values), digits)} median of {rounds} "
            f"({', '.join(shown(v, digits) for v in values)})")


def size_label(size: int) -> str:
    return f"{size / GiB:g} GiB" if size >= GiB else f"{size / MiB:g} MiB"


def summary(rounds: list[dict]) -> dict:
    """The median of each figure the issue's targets name, over the rounds."""
    return {
        **{f"cpu_per_gib_{key}": median([r["cpu_per_gib"][key] for r in rounds])
           for key in ("agent", "transfer", "sha256", "floor", "agent_over_floor")},
        **{f"wall_s_{key}": median([r[key]["wall_s"] for r in rounds]) for key in ("agent", "hf")},
        "hf_over_agent": median([r["ratios"]["hf_over_agent"] for r in rounds]),
    }


def drop_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def prime_memory(work: Path, size: int) -> None:
    """Write and delete a scratch file as big as the run will write.

    On this VM, page-cache memory the host has reclaimed costs seconds of system time on
    first touch; priming right before each measured run gives every client the same start.
    """
    scratch = work / "prime"
    block = b"\0" * (8 << 20)
    with open(scratch, "wb") as f:
        for _ in range(size // len(block) + 1):
            f.write(block)
    scratch.unlink()


def slope(small: dict, big: dict) -> dict:
    """CPU-seconds per GiB between two sizes of one round: the agent's, the floor's, and their ratio."""
    gib = (big["bytes"] - small["bytes"]) / (1 << 30)

    def per_gib(key: str) -> float:
        return (big["cpu_s"][key] - small["cpu_s"][key]) / gib

    agent, floor = per_gib("agent"), per_gib("transfer") + per_gib("sha256")
    return {"agent": round(agent, 3), "transfer": round(per_gib("transfer"), 3),
            "sha256": round(per_gib("sha256"), 3), "floor": round(floor, 3),
            "agent_over_floor": ratio(agent, floor)}


def hashed_up_front(files: dict) -> None:
    """Compute every file's digests once, before any timing (the hub caches them)."""
    for f in files.values():
        _ = f.sha256


def marginal(args: argparse.Namespace, sizes: list[int], rounds: int) -> dict:
    """Agent, transfer and sha256 of each size (bytes), every round, and the slope between the
    smallest and the largest size: what one more GiB costs."""
    work = Path(tempfile.mkdtemp(prefix="fleetcache-bench-", dir=args.workdir))
    results: dict = {"sizes_gib": [size / GiB for size in sizes], "rounds": []}
    with TestHub() as hub:
        repos = {}
        for size in sizes:
            repo = f"{REPO}-{size / GiB:g}"
            hub.add_repo(repo, make_model(size, shards=4))
            files = hub.repos[repo].commits[hub.repos[repo].refs["main"]]
            hashed_up_front(files)
            repos[size] = (repo, sum(f.content.size for f in files.values()))
        for _ in range(rounds):
            row: dict = {"sizes": []}
            for size in sizes:
                repo, total = repos[size]
                dest = work / "agent"
                agent = run([str(BIN / "fleetcache-agent"), "fetch", "--endpoint", hub.endpoint, "--repo", repo,
                             "--concurrency", str(args.concurrency), "--dest", str(dest)], (work, total + total // 4))
                drop_tree(dest)
                transfer = run([sys.executable, "-c", TRANSFER, hub.endpoint, repo])
                sha256 = run([sys.executable, "-c", SHA256, str(size)])
                cpu = {"agent": agent["cpu_s"], "transfer": transfer["cpu_s"], "sha256": float(sha256["out"])}
                per = cpu_per_gib({"agent": agent, "transfer": transfer, "sha256": sha256}, total)
                row["sizes"].append({"gib": size / GiB, "bytes": total, "cpu_s": cpu, "cpu_per_gib": per,
                                     "agent_wall_s": agent["wall_s"], "agent_peak_rss_mb": agent["peak_rss_mb"]})
            row["slope"] = slope(row["sizes"][0], row["sizes"][-1])
            results["rounds"].append(row)
            print(json.dumps(row), flush=True)
    drop_tree(work)
    results["median"] = {
        **{f"slope_{key}": median([r["slope"][key] for r in results["rounds"]])
           for key in ("agent", "transfer", "sha256", "floor", "agent_over_floor")},
        **{f"cpu_per_gib_{size / GiB:g}_{key}": median([r["sizes"][i]["cpu_per_gib"][key]
                                                        for r in results["rounds"]])
           for i, size in enumerate(sizes) for key in ("agent", "floor", "agent_over_floor")},
    }
    print(json.dumps({"median": results["median"]}), flush=True)
    small, big = (size_label(size) for size in (sizes[0], sizes[-1]))
    print(ratio_line(f"agent/floor, marginal CPU per GiB from {small} to {big}",
                     [r["slope"]["agent_over_floor"] for r in results["rounds"]]))
    for i, size in enumerate(sizes):
        print(ratio_line(f"agent/floor, CPU per verified GiB at {size_label(size)}",
                         [r["sizes"][i]["cpu_per_gib"]["agent_over_floor"] for r in results["rounds"]]))
    return results


def write_json(path: str, results: dict) -> None:
    """The results file, its folder made if missing (bench/out is not in the repository)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(results, indent=2))


def single(args: argparse.Namespace, size: int, rounds: int, stream_rate: float) -> dict:
    """Every client on one model of `size` bytes, side by side in each round; connections
    capped at `stream_rate` bytes/s when it is not 0."""
    work = Path(tempfile.mkdtemp(prefix="fleetcache-bench-", dir=args.workdir))
    results: dict = {"bytes": 0, "stream_rate": stream_rate, "rounds": []}
    with TestHub() as hub:
        hub.add_repo(REPO, make_model(size, shards=4))
        if stream_rate:
            hub.inject(Fault("slow", rate=stream_rate, times=None))
        files = hub.repos[REPO].commits[hub.repos[REPO].refs["main"]]
        results["bytes"] = total = sum(f.content.size for f in files.values())
        hashed_up_front(files)
        agent = [str(BIN / "fleetcache-agent"), "fetch", "--endpoint", hub.endpoint, "--repo", REPO,
                 "--concurrency", str(args.concurrency)]
        floor_dir, agent_dir, hf_dir = work / "floor", work / "agent", work / "hf"
        prime = (work, total + total // 4)
        for _ in range(rounds):
            row = {}
            row["floor"] = run([sys.executable, "-c", SEQUENTIAL_READ, hub.endpoint, REPO, str(floor_dir)], prime)
            drop_tree(floor_dir)
            row["floor_fsync"] = run([sys.executable, "-c", SEQUENTIAL_READ, hub.endpoint, REPO, str(floor_dir),
                                      "fsync"], prime)
            drop_tree(floor_dir)
            row["agent"] = run(agent + ["--dest", str(agent_dir)], prime)
            row["agent_warm"] = run(agent + ["--dest", str(agent_dir)])
            row["verify"] = run([str(BIN / "fleetcache-agent"), "verify", "--dest", str(agent_dir), "--repo", REPO])
            drop_tree(agent_dir)
            row["hf"] = run([sys.executable, "-c", SNAPSHOT_DOWNLOAD, REPO, str(hf_dir), hub.endpoint], prime)
            drop_tree(hf_dir)
            row["transfer"] = run([sys.executable, "-c", TRANSFER, hub.endpoint, REPO])
            row["sha256"] = run([sys.executable, "-c", SHA256, str(size)])
            row["cpu_per_gib"] = cpu_per_gib(row, total)
            row["ratios"] = {
                "hf_over_agent": round(row["hf"]["wall_s"] / row["agent"]["wall_s"], 2),
                "agent_over_floor": round(row["agent"]["wall_s"] / row["floor"]["wall_s"], 2),
                "agent_over_floor_fsync": round(row["agent"]["wall_s"] / row["floor_fsync"]["wall_s"], 2),
                "verify_gb_per_s": round(total / row["verify"]["wall_s"] / 1e9, 2),
                "agent_gb_per_s": round(total / row["agent"]["wall_s"] / 1e9, 2),
            }
            results["rounds"].append(row)
            print(json.dumps(row), flush=True)
    drop_tree(work)
    results["median"] = summary(results["rounds"])
    print(json.dumps({"median": results["median"]}), flush=True)
    print(ratio_line("agent/floor, CPU per verified GiB", [r["cpu_per_gib"]["agent_over_floor"]
                                                           for r in results["rounds"]]))
    print(ratio_line("hf/agent, wall", [r["ratios"]["hf_over_agent"] for r in results["rounds"]], 2))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--sizes-gib", default=None,
                        help="two or more sizes, e.g. 1,3: the marginal cost per GiB between the smallest and largest")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--workdir", default=None, help="on the disk to measure (default: a temp dir)")
    parser.add_argument("--stream-rate", type=float, default=0,
                        help="cap each connection at this many bytes/s, like a real CDN (default: none)")
    parser.add_argument("--smoke", action="store_true",
                        help="every mode once at a few MiB, one round, in seconds: checks the bench runs "
                             "(--size-gib, --sizes-gib and --rounds are ignored)")
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    if args.smoke:
        print(f"== smoke: {size_label(SMOKE_SIZE)}, uncapped", flush=True)
        results = {"single": single(args, SMOKE_SIZE, 1, 0)}
        rate = args.stream_rate or SMOKE_STREAM_RATE
        print(f"== smoke: {size_label(SMOKE_SIZE)}, each connection capped at {rate:g} B/s", flush=True)
        results["capped"] = single(args, SMOKE_SIZE, 1, rate)
        print(f"== smoke: marginal, {' and '.join(size_label(s) for s in SMOKE_SIZES)}", flush=True)
        results["marginal"] = marginal(args, list(SMOKE_SIZES), 1)
    elif args.sizes_gib:
        sizes = sorted(int(float(v) * GiB) for v in args.sizes_gib.split(","))
        if len(sizes) < 2 or sizes[0] == sizes[-1]:
            parser.error("--sizes-gib needs two different sizes, e.g. 1,3")
        results = marginal(args, sizes, args.rounds)
    else:
        results = single(args, int(args.size_gib * GiB), args.rounds, args.stream_rate)
    if args.json_out:
        write_json(args.json_out, results)


if __name__ == "__main__":
    main()
