# ruff: noqa: E501  (log lines are rendered verbatim)
"""A pinned, large, multi-rank SGLang log for the benchmarks (issue 7).

The mix is fixed: 8 ranks, lines of about 150 bytes, 2 % phase/figure lines, 8 % tqdm progress
redraws, 90 % serving lines. The log is a service that restarts: each boot of 4,000 lines loads,
sizes its pool, captures graphs, becomes ready and serves until systemd restarts it (in the
journal shapes) or a new ``server_args`` line starts the next boot (raw). Same seed, same bytes.

    python bench/gen_log.py OUT_DIR [--lines N] [--shapes raw,short,short-iso,json]
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

RANKS = 8
BOOT_LINES = 4000
SHAPES = ("raw", "short", "short-iso", "json")


def _boot(
    boot: int, t0: datetime, rng: random.Random, boot_lines: int = BOOT_LINES
) -> Iterator[tuple[datetime, str, str]]:
    """(time, syslog identifier, engine line) for one boot of ``boot_lines`` lines."""
    t = t0
    ranks = [f"TP{r}" for r in range(RANKS)]
    phase_lines: list[str] = []
    frac = 0.85 if boot % 5 else 0.88

    def stamp() -> str:
        return t.strftime("%Y-%m-%d %H:%M:%S")

    def tick(s: float) -> None:
        nonlocal t
        t += timedelta(seconds=s)

    out: list[tuple[datetime, str, str]] = []

    def eng(msg: str, rank: str = "") -> None:
        out.append((t, "python3", f"[{stamp()} {rank}] {msg}" if rank else f"[{stamp()}] {msg}"))

    def raw(msg: str) -> None:
        out.append((t, "python3", msg))

    out.append((t, "systemd", "Started sglang.service - SGLang server (DeepSeek-V3, TP8)."))
    eng(
        "server_args=ServerArgs(model_path='/models/DeepSeek-V3', tokenizer_mode='auto', "
        f"mem_fraction_static={frac}, max_running_requests=128, chunked_prefill_size=8192, tp_size=8, "
        "page_size=1, context_length=163840, cuda_graph_max_bs=128, disable_cuda_graph=False)"
    )
    tick(6)
    for r in ranks:
        eng("Init torch distributed begin.", r)
    tick(3)
    for i, r in enumerate(ranks):
        eng(f"Init torch distributed ends. elapsed={3.2 + i / 100:.2f} s, mem usage=0.88 GB", r)
    for i, r in enumerate(ranks):
        eng(f"Load weight begin. avail mem={138.21 + i / 50:.2f} GB", r)
    # 160 shard progress redraws (tqdm, no prefix)
    for k in range(160):
        tick(1.5)
        raw(
            f"Loading safetensors checkpoint shards: {k * 100 // 159:3d}% Completed | {k * 163 // 159}/163 [{k // 60:02d}:{k % 60:02d}<00:00,  1.52it/s] (rank-local IO)"
        )
    for i, r in enumerate(ranks):
        eng(
            f"Load weight end. elapsed=300.00 s, type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem={53.90 + i / 50:.2f} GB, mem usage=84.30 GB.",
            r,
        )
    eng("Using KV cache dtype: torch.bfloat16", "TP0")
    for r in ranks:
        eng("KV Cache is allocated. dtype: torch.bfloat16, #tokens: 570180, KV size: 37.32 GB", r)
    tick(1)
    for i, r in enumerate(ranks):
        eng(f"Memory pool end. avail mem={16.51 + i / 50:.2f} GB", r)
    sizes = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128]
    for i, r in enumerate(ranks):
        eng(f"Capture cuda graph begin. This can take up to several minutes. avail mem={16.50 + i / 50:.2f} GB", r)
    eng(f"Capture cuda graph bs {sizes}", "TP0")
    # 160 capture redraws: 8 per batch size
    avail = 16.50
    for k in range(160):
        bs = sizes[len(sizes) - 1 - k // 8]
        if k % 8 == 0:
            avail -= 0.15
        tick(0.3)
        raw(
            f"Capturing batches (bs={bs} avail_mem={avail:.2f} GB):  {k * 100 // 160:2d}%|████      | {k // 8}/20 [00:{k // 4:02d}<00:30,  1.10it/s] [worker]"
        )
    for i, r in enumerate(ranks):
        eng(f"Capture cuda graph end. Time elapsed: 52.00 s. mem usage=3.05 GB. avail mem={13.46 + i / 50:.2f} GB.", r)
    eng(
        "max_total_num_tokens=570180, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=128, context_len=163840, available_gpu_mem=13.46 GB",
        "TP0",
    )
    tick(1)
    eng("INFO:     Started server process [880]")
    eng("INFO:     Waiting for application startup.")
    eng("INFO:     Application startup complete.")
    eng("INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    eng("The server is fired up and ready to roll!")
    phase_lines = [x for x in out]
    serving = boot_lines - len(phase_lines) - 2
    for k in range(serving):
        tick(0.25)
        running = rng.randint(1, 128)
        usage = min(0.99, running / 160 + rng.random() / 20)
        if k % 10 == 0:
            eng(
                f"Prefill batch, #new-seq: {rng.randint(1, 8)}, #new-token: {rng.randint(100, 8192)}, #cached-token: "
                f"{rng.randint(0, 4096)}, token usage: {usage:.2f}, #running-req: {running}, #queue-req: {rng.randint(0, 9)}",
                "TP0",
            )
        else:
            eng(
                f"Decode batch, #running-req: {running}, #token: {int(usage * 570180)}, token usage: {usage:.2f}, "
                f"cuda graph: True, gen throughput (token/s): {rng.uniform(900, 4000):.2f}, #queue-req: {rng.randint(0, 9)}",
                "TP0",
            )
    tick(2)
    out.append((t, "systemd", "Stopping sglang.service - SGLang server (DeepSeek-V3, TP8)..."))
    out.append((t, "systemd", "Stopped sglang.service - SGLang server (DeepSeek-V3, TP8)."))
    yield from out


def records(lines: int, seed: int = 7, boot_lines: int = BOOT_LINES) -> Iterator[tuple[datetime, str, str]]:
    rng = random.Random(seed)
    t = datetime(2026, 3, 4, 9, 0, 0)
    n = 0
    boot = 0
    while n < lines:
        last = t
        for rec in _boot(boot, t, rng, boot_lines):
            yield rec
            last = rec[0]
            n += 1
            if n >= lines:
                return
        boot += 1
        t = last + timedelta(seconds=30)


def render(shape: str, recs: Iterator[tuple[datetime, str, str]]) -> Iterator[str]:
    cursor = 0
    for t, ident, msg in recs:
        pid = 1 if ident == "systemd" else 7001
        if shape == "raw":
            if ident == "systemd":
                continue  # raw engine output has no service-manager lines
            yield msg
        elif shape == "short":  # journalctl's default: year-less syslog stamps
            yield f"{t.strftime('%b %d %H:%M:%S')} h200-x8 {ident}[{pid}]: {msg}"
        elif shape == "short-iso":
            yield f"{t.strftime('%Y-%m-%dT%H:%M:%S')}+0000 h200-x8 {ident}[{pid}]: {msg}"
        elif shape == "json":
            cursor += 1
            usec = int((t - datetime(1970, 1, 1)).total_seconds() * 1_000_000)
            yield json.dumps(
                {
                    "__CURSOR": f"s=6f1c;i={cursor:x};b=9a1e;m={cursor:x};t={usec:x};x=1eef",
                    "__REALTIME_TIMESTAMP": str(usec),
                    "_PID": str(pid),
                    "SYSLOG_IDENTIFIER": ident,
                    "PRIORITY": "6",
                    "MESSAGE": msg,
                }
            )
        else:  # pragma: no cover - argparse restricts the choices
            raise ValueError(shape)


def write(path: Path, shape: str, lines: int, seed: int = 7, boot_lines: int = BOOT_LINES) -> int:
    """Write one shape; returns the number of lines written. ``boot_lines``: the lines of one
    boot (a larger one is a journal of long serving stretches: 20,000 -> 98 % serving lines)."""
    n = 0
    with path.open("w", encoding="utf-8", newline="\n") as f:
        buf: list[str] = []
        for line in render(shape, records(lines, seed, boot_lines)):
            buf.append(line)
            n += 1
            if len(buf) >= 20000:
                f.write("\n".join(buf) + "\n")
                buf.clear()
        if buf:
            f.write("\n".join(buf) + "\n")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    for shape in a.shapes.split(","):
        p = a.out_dir / f"bench-{shape}.log"
        n = write(p, shape, a.lines, a.seed)
        print(f"{p}: {n:,} lines, {p.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
