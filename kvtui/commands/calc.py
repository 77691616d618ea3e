"""``kvtui calc``: predict the KV pool for edited flags, calibrated from a boot's own log.

    kvtui calc --log PATH [--boot N] [--gpu-mem-gib G] [--set FLAG=VALUE …] [--unset FLAG …]
               [--full-context K] [--json]
    kvtui calc --model config.json --gpu-mem-gib G --tp N [--weights-gib W] [--engine E] [--set …] [--json]

Exit codes: 0 the prediction boots (also at low confidence), 1 the verdict is ``oom_risk`` or
``no_fit``, 2 usage (bad option or edit: a malformed value is 2 here as in ``apply``), 3 input that
is unreadable (missing file, binary data: the rule of ``kvtui.commands.logfile``) or lacks what the
calculator needs (no boot found, no boot that sized its pool, a config.json without the needed keys).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from kvtui import fmt, longrun
from kvtui import kvcalc as kc
from kvtui.boot import Boot
from kvtui.boot.deployment import merge_logs
from kvtui.bootlog import read_log
from kvtui.commands.logfile import InputError, no_boot_found, open_log, read_chunks
from kvtui.config import ConfigError, find_hosts_file, load_config
from kvtui.engines.events import Engine
from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from kvtui.hosts.backend import BackendError
from kvtui.hosts.factory import make_backend
from kvtui.knobs import env_knob, unknown_flag
from kvtui.lazy import lazy_module
from kvtui.monitor import host_boots, read_boots

if TYPE_CHECKING:
    from kvtui import changes, history
    from kvtui.changes import ServingConfig
    from kvtui.history import ident as history_ident
else:
    changes = lazy_module("kvtui.changes")  # lazy: --host only: `kvtui calc --log` +108 ms CPU
    history = lazy_module("kvtui.history")  # lazy: --host only: (pydantic) `kvtui calc --log` +51 ms CPU
    history_ident = lazy_module("kvtui.history.ident")  # lazy: as kvtui.history


class _Fail(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def read_log_boots(path: str) -> list[Boot]:
    """Every boot of a saved log (any shape ``kvtui replay`` reads), in order."""
    try:
        stream = open_log(path)
    except InputError as exc:
        raise _Fail(EXIT_INPUT, str(exc)) from None
    try:
        boots, _shape = read_log(read_chunks(stream, path))
    except InputError as exc:
        raise _Fail(EXIT_INPUT, str(exc)) from None
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if not boots:  # readable text, but calc needs a boot: exit 3, in replay's words
        raise _Fail(EXIT_INPUT, no_boot_found("stdin" if path == "-" else path))
    return boots


def _read_config(path: str) -> dict[str, object]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _Fail(EXIT_INPUT, f"{path}: no such file") from None
    except IsADirectoryError:
        raise _Fail(EXIT_INPUT, f"{path}: is a directory, expected a model config.json") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _Fail(EXIT_INPUT, f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Fail(EXIT_INPUT, f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise _Fail(EXIT_INPUT, f"{path}: expected a JSON object (a model's config.json), got {type(data).__name__}")
    return data


def graph_margin_from_config(hosts: str | None, err: TextIO) -> float:
    """``[calc] graph_margin_gib`` from hosts.toml when there is one, else the calculator's default.

    An explicit ``--hosts`` that is broken is an error (exit 3); a broken file found by the default
    lookup only earns a warning, so an unrelated hosts.toml does not block a calculation.
    """
    try:
        found = find_hosts_file(hosts)
    except ConfigError as exc:
        if hosts:
            raise _Fail(EXIT_INPUT, str(exc)) from None
        return kc.DEFAULT_GRAPH_MARGIN_GIB
    if found is None:
        return kc.DEFAULT_GRAPH_MARGIN_GIB
    try:
        config = load_config(hosts)
    except ConfigError as exc:
        if hosts:
            raise _Fail(EXIT_INPUT, str(exc)) from None
        print(
            f"kvtui calc: warning: ignoring {found}, using the default graph margin "
            f"{kc.DEFAULT_GRAPH_MARGIN_GIB:.2f} GiB:\n{exc}",
            file=err,
        )
        return kc.DEFAULT_GRAPH_MARGIN_GIB
    margin = config.calc.graph_margin_gib
    return kc.DEFAULT_GRAPH_MARGIN_GIB if margin is None else float(margin)


# ---------------------------------------------------------------------------------------------
# Human output
# ---------------------------------------------------------------------------------------------


_gib = fmt.gib
_tok = fmt.tokens
_fr = fmt.fraction


def _value(v: object) -> str:
    if v is None:
        return "(unset: engine default)"
    if isinstance(v, float):
        return fmt.fraction(v)
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    return str(v)


def render(pred: kc.Prediction, source: str) -> str:
    m = pred.model
    ff = kc.fraction_flag(m.engine)
    page_name = "block_size" if m.engine is Engine.VLLM else "page_size"
    used = f" ({m.calibration_boots} boots)" if m.calibration_boots > 1 else ""
    head = f"kvtui calc · {m.engine.value} · {source} · basis {m.basis} · confidence {pred.confidence}{used}"
    out: list[str] = [head, ""]
    obs = [f"{ff} {_fr(m.fraction)}", f"{_tok(m.tokens)} tokens"]
    if m.kv_cache_gib is not None:
        obs.append(f"KV {_gib(m.kv_cache_gib)} per rank")
    if m.avail_after_pool_gib is not None and m.engine is Engine.SGLANG:
        obs.append(f"{_gib(m.avail_after_pool_gib)} free after the pools")
    if m.graph_mem_gib is not None:
        obs.append(f"graphs {_gib(m.graph_mem_gib)}")
    # a config's figures were never seen: they are estimates, said as such (issue 22 #5)
    label = "estimated " if m.basis is kc.Basis.CONFIG else "observed  "
    out.append(f"{label} " + " · ".join(obs))
    cell = f"cell {m.cell_bytes:,} B/token/rank"
    rows_n = m.tokens + (m.page_size if m.engine is Engine.SGLANG else 0)
    if m.engine is Engine.VLLM and m.bias_gib > 0:  # a refused start: per token + what does not grow with it
        cell += f" + {_gib(m.bias_gib)} per request that does not grow with its length"
    elif m.kv_cache_gib and rows_n > 0 and m.basis not in (kc.Basis.CONFIG, kc.Basis.CONFIG_ESTIMATE):
        direct = round(m.kv_cache_gib * kc.GIB / rows_n)
        if direct != m.cell_bytes:  # what `replay` shows: the printed (rounded) KV size ÷ tokens
            cell += f" (exact; the log's rounded KV size ÷ tokens gives ≈{direct:,})"
    if m.sizing_cell_bytes != m.cell_bytes:
        cell += f" (the engine sized with {m.sizing_cell_bytes:,} B)"
    out.append(f"           {cell} · {page_name} {m.page_size}")
    if pred.edits.values:
        out.append("edits      " + " · ".join(f"{k} = {_value(v)}" for k, v in pred.edits.values.items()))
    else:
        out.append("edits      none (the boot as it is)")
    delta = pred.tokens - m.tokens
    rows: list[tuple[str, str]] = [
        ("tokens", f"{_tok(pred.tokens)}" + (f"  ({fmt.signed_tokens(delta)})" if delta else "")),
        ("KV pool", f"{_gib(pred.kv_cache_gib)} per rank"),
    ]
    if pred.avail_after_pool_gib is not None:
        label = "outside the budget" if m.engine is Engine.VLLM else "free after the pools"
        rows.append((label, _gib(pred.avail_after_pool_gib)))
    if pred.graph_need_gib is not None or pred.graph_headroom_gib is not None:
        rows.append(
            (
                "graph capture",
                f"needs ≈ {_gib(pred.graph_need_gib)} → headroom {_gib(pred.graph_headroom_gib)}"
                f" (margin {fmt.gib_number(pred.margin_gib)} + activations {fmt.gib(pred.activation_gib)})",
            )
        )
    if pred.req_to_token_gib is not None:
        rows.append(
            (
                "req_to_token",
                f"{fmt.gib(pred.req_to_token_gib, 3)} ({fmt.mib(pred.req_to_token_gib)})"
                + (f" for {pred.running_requests:,} requests" if pred.running_requests else ""),
            )
        )
    if pred.full_context_requests is not None and pred.context_len:
        rows.append(
            ("full context", f"{fmt.capacity(pred.full_context_requests)} requests of {pred.context_len:,} tokens")
        )
    if pred.tokens_per_0_01 is not None:
        rows.append((f"per +0.01 {ff}", f"{pred.tokens_per_0_01:,} tokens"))
    k = pred.full_context
    rows.append(
        (
            f"min {ff} for {k} full-context request{'s' if k != 1 else ''}",
            fmt.safe_min(pred.min_fraction_for_full_context),
        )
    )
    rows.append((f"max safe {ff} (verdict ok)", fmt.safe_max(pred.max_safe_fraction)))
    width = max(len(a) for a, _ in rows)
    head = f"predicted  {ff} {_fr(pred.fraction)}"
    out.append(head)
    out.extend(f"           {a:<{width}}  {b}" for a, b in rows)
    out.append("")
    verdict = pred.verdict.value.upper()
    out.append(
        f"verdict    {verdict}"
        + ("   (confidence low: treat the numbers as estimates)" if pred.confidence == "low" else "")
    )
    out.extend(f"  · {r}" for r in pred.reasons)
    out.append("")
    out.append("how")
    out.extend(f"  {line}" for line in pred.explain)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------


def _check_options(args: argparse.Namespace) -> None:
    if getattr(args, "full_context", 1) is not None and args.full_context < 1:
        raise _Fail(EXIT_USAGE, f"--full-context {args.full_context}: expected a whole number ≥ 1")
    if args.gpu_mem_gib is not None and not args.gpu_mem_gib > 0:
        raise _Fail(EXIT_USAGE, f"--gpu-mem-gib {args.gpu_mem_gib}: expected the GPU's memory in GiB (> 0)")
    if args.model:
        if args.boot is not None:
            raise _Fail(EXIT_USAGE, "--boot goes with --log, not --model")
        missing = [o for o, v in (("--gpu-mem-gib G", args.gpu_mem_gib), ("--tp N", args.tp)) if v is None]
        if missing:
            raise _Fail(EXIT_USAGE, f"--model needs {' and '.join(missing)}")
        if args.tp < 1:
            raise _Fail(EXIT_USAGE, f"--tp {args.tp}: expected a whole number ≥ 1")
        if args.weights_gib is not None and args.weights_gib < 0:
            raise _Fail(EXIT_USAGE, f"--weights-gib {args.weights_gib}: expected GiB per rank ≥ 0")
    else:
        for opt, val in (("--tp", args.tp), ("--weights-gib", args.weights_gib), ("--engine", args.engine)):
            if val is not None:
                hint = " (to predict another TP size use --set tp=N)" if opt == "--tp" else ""
                raise _Fail(EXIT_USAGE, f"{opt} goes with --model{hint}")


HOST_READ_TIMEOUT_S = 60.0


@dataclass(slots=True)
class _Serving:
    """A host's current boot that serves with its start not in the log (no pool line): what its
    what-if stands on — the history's boot of the same host and flags, else the model's config.json
    read on the host (``kvtui.changes.serving_basis`` / ``serving_config``)."""

    basis: tuple[Boot, list[Boot]] | None = None
    config: ServingConfig | None = None


def _source_boots(args: argparse.Namespace) -> tuple[list[Boot], str, _Serving | None]:
    """The boots to calibrate from: a saved log (``--log``) or the host's log as it is now
    (``--host``, with what a serving boot whose start is gone stands on)."""
    if not getattr(args, "host", None):
        return read_log_boots(args.log), ("stdin" if args.log == "-" else args.log), None


    try:
        boots, serving = asyncio.run(
            _host_or_deployment_boots(args.host, getattr(args, "hosts", None), args.gpu_mem_gib))
    except ConfigError as exc:
        raise _Fail(EXIT_INPUT, str(exc)) from None
    except BackendError as exc:
        raise _Fail(EXIT_INPUT, f"host {args.host}: {exc}") from None
    except TimeoutError:
        raise _Fail(
            EXIT_INPUT, f"host {args.host}: no log arrived within {HOST_READ_TIMEOUT_S:.0f} s"
        ) from None
    return boots, f"host {args.host}", serving


def _needs_serving_basis(boot: Boot) -> bool:
    return boot.start_missing is not None and not kc.sized_pool(boot)


async def _host_or_deployment_boots(
    name: str, hosts: str | None, gpu_mem_gib: float | None = None
) -> tuple[list[Boot], _Serving | None]:
    """A host's boots; for a ``[deployments.NAME]``, every node's read at once and merged into the
    deployment's boots (``kvtui.boot.deployment``: free memory is the minimum over all nodes' ranks).

    A host whose current boot serves with its start not in the log: the history's boot of the
    same host and flags, else — on the same connection — its model's config.json and a GPU reading."""
    config = load_config(hosts)
    if config.deployment(name) is None:
        host = config.host(name)
        backend = make_backend(name, host)
        try:
            boots = await read_boots(backend, timeout=HOST_READ_TIMEOUT_S, host=host)
            if not boots or not _needs_serving_basis(boots[-1]):
                return boots, None
            basis = await asyncio.to_thread(changes.serving_basis, boots[-1], name)
            if basis is not None:
                return boots, _Serving(basis=basis)
            return boots, _Serving(config=await changes.serving_config(backend, boots[-1], gpu_mem_gib=gpu_mem_gib))
        finally:
            with contextlib.suppress(Exception):
                await backend.close()
    names = [n for n, _ in config.node_hosts(name)]
    per_node = await asyncio.gather(*(host_boots(n, hosts, timeout=HOST_READ_TIMEOUT_S) for n in names))
    if not per_node[0]:
        return [], None
    return [d.boot for d in merge_logs(list(zip(names, per_node, strict=True)))], None


def _predict(args: argparse.Namespace, margin: float) -> tuple[kc.Prediction, str, dict[str, object]]:
    """The prediction, where it came from (words) and how many boots were offered to calibrate it
    besides the chosen one: ``from_log`` (its siblings in the same log), ``from_history``."""
    sets: Sequence[str] = args.set or []
    unsets: Sequence[str] = args.unset or []
    if args.model:
        engine = Engine(args.engine) if args.engine else Engine.SGLANG
        config = _read_config(args.model)
        try:
            edits = kc.parse_what_if(engine, sets, unsets)
        except kc.CalcError as exc:
            raise _Fail(EXIT_USAGE, str(exc)) from None
        try:
            model = kc.from_config(
                config,
                gpu_mem_gib=args.gpu_mem_gib,
                tp=args.tp,
                weights_gib=args.weights_gib,
                engine=engine,
                flags={k: v for k, v in edits.values.items() if v is not None},
            )
        except kc.CalcError as exc:
            raise _Fail(EXIT_INPUT if exc.kind == "input" else EXIT_USAGE, f"{args.model}: {exc}") from None
        source = f"config {args.model} (TP {args.tp}, {args.gpu_mem_gib:g} GiB GPUs)"
        offered: dict[str, object] = {"from_log": 0, "from_history": 0}
    else:
        try:  # catch a malformed edit before reading a possibly large log
            kc.parse_what_if(Engine.UNKNOWN, sets, unsets)
        except kc.CalcError as exc:
            raise _Fail(EXIT_USAGE, str(exc)) from None
        boots, label, serving = _source_boots(args)
        if serving is not None:  # it serves, its start is not in the log: the history, else its config
            boot = boots[-1]
            model, source, offered = _serving_model(boot, serving, args, label)
        else:
            model, boot, source, offered = _log_model(boots, args, label)
        try:
            edits = kc.parse_what_if(model.engine, sets, unsets)
        except kc.CalcError as exc:
            raise _Fail(EXIT_USAGE, str(exc)) from None
    _refuse_unknown(model.engine, sets, dump=() if args.model else boot.flags)
    try:
        pred = kc.predict(model, edits, full_context=args.full_context, graph_margin_gib=margin)
    except kc.CalcError as exc:
        raise _Fail(EXIT_USAGE, str(exc)) from None
    return pred, source, offered


def _log_model(boots: list[Boot], args: argparse.Namespace, label: str) -> tuple[kc.MemoryModel, Boot, str,
                                                                                 dict[str, object]]:
    """Calibrated from a boot of the log (``--boot N``, else the last that sized its pool), its
    siblings and (``--host``) the history's boots of its deployment."""
    try:
        boot, others = kc.select_boot(boots, args.boot)
    except kc.CalcError as exc:
        raise _Fail(EXIT_INPUT if exc.kind == "input" else EXIT_USAGE, f"{label}: {exc}") from None
    stored: list[Boot] = []
    if getattr(args, "host", None):  # the host's remembered boots of this deployment calibrate too
        stored = changes.stored_siblings(boot, boots)
    try:
        model = kc.calibrate(boot, gpu_mem_gib=args.gpu_mem_gib, others=[*others, *stored])
    except kc.CalcError as exc:
        raise _Fail(EXIT_INPUT, f"{label}: boot {boots.index(boot) + 1}: {exc}") from None
    source = f"boot {boots.index(boot) + 1} of {len(boots)} in {label}"
    number: int | None = None
    if getattr(args, "host", None):  # the boot by its number in the history, as every view names it
        number = _history_number(args.host, boot, getattr(args, "hosts", None))
        named = history_ident.label(number, boots.index(boot) + 1)
        source = f"{named} {'of' if number is not None else 'from'} {label}"
    if others:
        source += f" (+{len(others)} sibling boot{'s' if len(others) != 1 else ''})"
    if stored:
        source += f" (+{len(stored)} boot{'s' if len(stored) != 1 else ''} of this deployment from the history)"
    offered: dict[str, object] = {"from_log": len(others), "from_history": len(stored)}
    if getattr(args, "host", None):
        offered["boot"] = number  # the history's number of the chosen boot (``kvtui.history.ident``)
        offered["boot_key"] = history.boot_key(args.host, boot) if number is not None else None
    return model, boot, source, offered


def _history_number(host: str, boot: Boot, hosts: str | None) -> int | None:
    """The history's number of ``host``'s ``boot`` (``kvtui.history.ident``): the stored row's, else
    the boot is recorded now, as any reader of the host records the boots it sees (not with
    ``[history] record = false``, nor for a deployment: its nodes' boots are stored per node)."""
    with history.open_store(readonly=True) as store:
        number = history_ident.stored_number(host, boot, store)
    if number is not None:
        return number
    try:
        config = load_config(hosts)
    except ConfigError:
        return None
    if config.deployment(host) is not None or not config.history.record:
        return None
    limits = history.Limits(config.history.max_age_days, config.history.max_boots_per_host)
    return history.record_numbered(host, boot, source="calc --host", limits=limits, tries=1)[0]


def _serving_model(boot: Boot, serving: _Serving, args: argparse.Namespace,
                   label: str) -> tuple[kc.MemoryModel, str, dict[str, object]]:
    """A serving boot whose start is not in the log: calibrated on the history's boot of the same
    host and flags, else its config.json anchored at the pool its serving lines give."""
    head = "; ".join(x for x in (longrun.serving_state(boot), longrun.flags_source(boot)) if x)
    if serving.basis is not None:
        chosen, others = serving.basis
        try:
            model = kc.calibrate(chosen, gpu_mem_gib=args.gpu_mem_gib, others=others)
        except kc.CalcError as exc:
            raise _Fail(EXIT_INPUT, f"{label}: the stored boot of these flags: {exc}") from None
        source = f"{label} ({head}): calibrated on a stored boot of these flags (history)"
        return model, source, {"from_log": 0, "from_history": 1 + len(others)}
    cfg = serving.config
    assert cfg is not None
    pool = longrun.estimated_pool(boot) or "pool not estimated yet"
    try:
        model = cfg.model(boot, args.gpu_mem_gib)
    except kc.CalcError as exc:
        raise _Fail(EXIT_INPUT, f"{label}: {head}; {pool}; no stored boot of this host with these flags, "
                                f"and no config-based what-if: {exc}") from None
    source = f"{label} ({head}): {cfg.said(model)} (GPU {model.gpu_mem_gib:.1f} GiB)"
    return model, source, {"from_log": 0, "from_history": 0, "config": cfg.path}


def _refuse_unknown(engine: Engine, sets: Sequence[str], dump: Collection[str]) -> None:
    """A ``--set`` of a flag the engine does not accept is refused as ``apply`` refuses it (exit 4,
    the nearest flags named): a prediction for a misspelt flag would answer for the flags as they
    are and call it OK."""
    for item in sets:
        name = item.split("=", 1)[0]
        if env_knob(name) is not None:
            continue  # an environment variable (VLLM_CPU_KVCACHE_SPACE): not a flag
        try:
            name = kc.canonical_flag(engine, name)  # the calculator's shorthands (mfs, gmu) too
        except kc.CalcError:
            continue  # malformed: parse_what_if said so already
        why = unknown_flag(engine, name, None, [str(k) for k in dump])
        if why is not None:
            raise _Fail(EXIT_REFUSED, f"refused: {why}: check the spelling")


def to_json(pred: kc.Prediction, offered: dict[str, object]) -> dict[str, object]:
    """``--json``: the prediction's object; its ``calibration`` also says how many boots were offered
    besides the chosen one (``boots`` counts the boots whose figures calibrated the model, the chosen
    one included: 1 when no other boot gave a slope; an offered boot without a sized pool, or one
    whose pool was fixed by its environment, is not among them); a ``config+estimate`` model (a
    server whose start is gone) also names the ``config`` path read on the host. ``--host``: the
    calibrated boot's ``boot`` (its number in the history, ``kvtui.history.ident``) and ``boot_key``."""
    data = pred.to_json()
    offered = dict(offered)
    ident: dict[str, object] = {k: offered.pop(k) for k in ("boot", "boot_key") if k in offered}
    cal = data.get("calibration")
    if isinstance(cal, dict):
        cal.update(offered)
    # ``--host``: the chosen boot by its number in the history (``"boot": 13``; null: none)
    return {**ident, **data}


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    try:
        _check_options(args)
        margin = graph_margin_from_config(getattr(args, "hosts", None), err)
        pred, source, offered = _predict(args, margin)
    except _Fail as exc:
        print(f"kvtui calc: {exc}", file=err)
        return exc.code
    if args.json:
        json.dump(to_json(pred, offered), out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(render(pred, source))
    return EXIT_FAILED if pred.verdict in (kc.Verdict.OOM_RISK, kc.Verdict.NO_FIT) else EXIT_OK
