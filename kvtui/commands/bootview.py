"""How the commands show a boot: ``render_boot`` (the human summary of ``replay``, ``wait``,
``apply --restart`` and a deployment's merged boot) and ``to_json`` (``replay --json``'s document,
also inside an incident bundle)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from kvtui import fmt, longrun
from kvtui.boot import Boot, BootStatus, PhaseSpan
from kvtui.engines.events import Engine, Fact
from kvtui.engines.unknown import UnrecognisedShape

T = TypeVar("T")

# the flags worth a line in the human summary, in this order (engine names)
_KEY_FLAGS: dict[Engine, tuple[str, ...]] = {
    Engine.SGLANG: (
        "model_path",
        "mem_fraction_static",
        "tp_size",
        "dp_size",
        "pp_size",
        "ep_size",
        "context_length",
        "max_running_requests",
        "max_total_tokens",
        "chunked_prefill_size",
        "cuda_graph_max_bs",
        "page_size",
        "kv_cache_dtype",
        "speculative_algorithm",
    ),
    Engine.VLLM: (
        "model",
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "kv_cache_dtype",
        "block_size",
        "enforce_eager",
    ),
}


def _dur(seconds: float | None) -> str:
    return "" if seconds is None else fmt.duration(seconds)


def _when(dt: datetime | None) -> str:
    if dt is None:
        return "—"
    text = dt.strftime("%Y-%m-%d %H:%M:%S")
    if dt.utcoffset() is not None:
        text += dt.strftime("%z")
    return text


_gib = fmt.gib
_n = fmt.tokens


def _ranks(ranks: list[str]) -> str:
    if not ranks:
        return "1 process"
    if len(ranks) <= 4:
        return ", ".join(ranks)
    return f"{len(ranks)} ranks ({ranks[0]} … {ranks[-1]})"


def _phase_row(span: PhaseSpan, failed_phase: bool, engine_s: float | None = None) -> str:
    dur = _dur(span.seconds) if span.end is not None else ("" if span.name.value == "ready" else "running")
    prog = ""
    if span.progress_total:
        prog = f"  {span.progress_done}/{span.progress_total}"
    mark = "  ✗" if failed_phase else ""
    own = f"  (engine: {engine_s:.2f}s)" if engine_s is not None else ""
    return f"    {span.name.value:<14} {span.model.value:<7} {_when(span.start):<25} {dur:>9}{prog}{mark}{own}"


_ENGINE_TOTALS = (("a scheduler's start to ready", Fact.ENGINE_SCHEDULER_SECONDS),
                  ("launch to every scheduler ready", Fact.ENGINE_STARTUP_SECONDS))


def _engine_note(boot: Boot) -> list[str]:
    """What the ``(engine: …)`` beside a phase's duration is, and the engine's own totals: only
    for a boot whose engine printed its startup timings (SGLang ≥ 0.5.17)."""
    if not boot.engine_timings():
        return []
    totals = " · ".join(f"{label} {boot.facts[f]:.2f}s" for label, f in _ENGINE_TOTALS if f in boot.facts)
    return ["    (engine: SGLang's own `Engine startup timings`, the slowest rank's; load_weight counts the "
            "draft's too" + (f"; {totals}" if totals else "") + ")"]


def render_boot(boot: Boot, index: int, total: int, *, title: str | None = None) -> list[str]:
    """The boot in full; its first line starts with ``title`` (``Boot #13 of HOST``: the
    history's number, ``kvtui.history.ident``), by default ``Boot INDEX of TOTAL``."""
    out: list[str] = []
    version = boot.version_hint or "version not printed"
    status = boot.status.value.upper()
    where = f" in {boot.failure.phase.value}" if boot.failure is not None and boot.failure.phase else ""
    head = title or f"Boot {index} of {total}"
    out.append(f"{head} · {boot.engine.value} ({version}) · {status}{where} · {_ranks(boot.ranks)}")
    said = longrun.summary(boot)
    if said:  # a server up for days: what kvtui did not read, where its figures came from
        out.append("  Not read whole (a server up for days)")
        out += [f"    {line}" for line in said]
        if boot.start_missing is not None:
            out.append("    phases: not in the log")
        for where in boot.skipped_where[:4]:
            out.append(f"    unread range: {where}")
    if boot.phases:
        out.append(f"    {'phase':<14} {'model':<7} {'start':<25} {'duration':>9}")
        last_failed = boot.failure.phase if boot.failure is not None else None
        for i, span in enumerate(boot.phases):
            is_last_of_phase = span.name is last_failed and all(s.name is not last_failed for s in boot.phases[i + 1 :])
            out.append(_phase_row(span, boot.status is BootStatus.FAILED and is_last_of_phase,
                                  boot.engine_seconds(span)))
        out += _engine_note(boot)
    m = boot.metrics
    figures: list[str] = []  # under their heading only when there are any
    est = boot.live.pool_tokens_est if m.max_total_num_tokens is None else None
    figures += _row("KV pool", _item(m.max_total_num_tokens, "{:,} tokens"),
                    _item(est, "~{:,} tokens (estimated from serving lines)"), _item(m.kv_cache_gib, conv=_gib),
                    _item(m.cell_bytes, "≈{:,} B/token (printed KV size ÷ tokens)"), _item(boot.pool_from, "{}"))
    figures += _row("memory", _item(m.avail_before_load_gib, "free before weights {}", _gib),
                    _item(m.weights_gib, "weights {}", _gib),
                    _item(m.avail_after_load_gib, "free after weights {}", _gib),
                    _item(m.avail_after_pool_gib, "free after pool {}", _gib))
    figures += _row("CUDA graphs", _item(m.graph_mem_gib, conv=_gib),
                    _item(m.available_gpu_mem_gib, "free after start-up {}", _gib))
    figures += _row("limits", _item(m.context_len, "context {:,} tokens"),
                    _item(m.max_running_requests, "max running {:,}"),
                    _item(m.max_concurrency, "{} full-context requests fit", fmt.capacity))
    d = boot.draft_facts
    figures += _row("draft model", _item(d.get(Fact.WEIGHTS_GIB), "weights {}", _gib),
                    _item(d.get(Fact.KV_CACHE_GIB), "KV {}", _gib), _item(d.get(Fact.GRAPH_MEM_GIB), "graphs {}", _gib))
    live = boot.live
    if live.token_usage is not None or live.running_reqs is not None:
        usage = f"{live.token_usage:.0%}" if live.token_usage is not None else "—"
        figures.append(
            f"    {'serving':<16} KV usage {usage} · running {_fmt(live.running_reqs)} · queued {_fmt(live.queue_reqs)}"
        )
    flags = [
        f"{k}={boot.flags[k]}" for k in _KEY_FLAGS.get(boot.engine, ()) if k in boot.flags and boot.flags[k] is not None
    ]
    if flags:
        figures.append(f"    {'flags':<16} {' '.join(flags)}")
    if figures:
        out.append("  Figures (per rank; free = free GPU memory, the minimum over ranks)")
        out += figures
    if boot.nodes:
        nodes = boot.nodes_json()
        out.append(f"  Nodes (Ray workers by node ip: {len(nodes)}; the driver's node untagged)")
        out += [f"    {line}" for line in fmt.ray_node_lines(nodes)]
    for w in boot.warnings[:3]:
        out.append(f"    warning: {fmt.cut(w, 200)}")
    if boot.failure is not None:
        f = boot.failure
        ph = f" in {f.phase.value}" if f.phase is not None else ""
        out.append(f"  Failure: {f.kind.value}{ph}")
        out.append(f"    {fmt.cut(f.message, 400)}")
        out.append(f"    hint: {f.hint}")
    return out


def _item(value: T | None, form: str = "{}", conv: Callable[[T], str] | None = None) -> str | None:
    """One figure of a row: ``form`` filled with the value (``conv`` of it); None when unknown."""
    if value is None:
        return None
    return form.format(value if conv is None else conv(value))


def _row(label: str, *items: str | None) -> list[str]:
    """A figures row (``label`` then the known items joined by `` · ``); none when nothing is known."""
    known = [i for i in items if i is not None]
    return [f"    {label:<16} {' · '.join(known)}"] if known else []


def _fmt(v: object) -> str:
    return "—" if v is None else f"{v}"


def to_json(boots: list[Boot], source: str, unrecognised: list[UnrecognisedShape] | None = None) -> dict[str, object]:
    return {
        "source": source,
        "boots": [b.to_json() for b in boots],
        "unrecognised": [u.to_json() for u in (unrecognised or [])],
    }
