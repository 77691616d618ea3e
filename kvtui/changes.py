"""One change controller for a host and a deployment (issue 23: a host is a deployment of one
node): kvtui's calculator (``kvtui.kvcalc``) and the host's boots (``kvtui.monitor.read_boots``)
wired into the guarded service (``kvtui.hosts.service``, which speaks only to a host's
``HostOps``), and the steps that change N ≥ 1 nodes as one, all or nothing.

Planning (``plan_apply`` / ``plan_rollback``: the service's planners with kvtui's calculator and
boot reader, predicting as ``kvtui calc`` would) and the history's record of a restart
(``record_restart``) are per node. A change of N >= 1 nodes (``kvtui apply NAME`` / ``kvtui
rollback NAME``, ``kvtui tune NAME``, the console's ``a`` / ``u``) is every node's plan carried
out as one by ``kvtui.hosts.service.execute_nodes`` (written and verified node by node, a failed
write restoring the nodes before it; node 0 restarted first; the merged boot followed; node 0's
server probed; every node rolled back on failure), each caller doing its own asking and printing.

A restart of N >= 1 nodes with no edit (the console's ``R``) is ``service.execute_nodes`` of a restart plan, the
same steps without the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvtui import envedit, kvcalc
from kvtui import flags as fl
from kvtui.boot import Boot
from kvtui.engines.events import Engine
from kvtui.history import HistoryError, Limits, boot_from_doc, open_store, record_numbered
from kvtui.history import record as rec
from kvtui.history.doc import FRACTION_FLAGS, flag_value, num
from kvtui.hosts import service, shellcmd
from kvtui.hosts.backend import BackendError, HostBackend, aclose_iter
from kvtui.hosts.service import ApplyOutcome, ApplyPlan
from kvtui.hosts.service.model import Calculator, EditsFor, Forecast
from kvtui.knobs import pool_env, pool_env_names
from kvtui.monitor import read_boots

if TYPE_CHECKING:
    from kvtui.config import HistoryConfig, HostConfig


def calculate(boots: Sequence[Boot], edits: EditsFor, graph_margin_gib: float | None) -> Forecast | str:
    """``kvtui.hosts.service.Calculator`` by ``kvtui.kvcalc``: the boot ``kvtui calc`` would pick
    (the last that sized its pool, with its same-deployment siblings), calibrated, predicted for
    ``edits(boot)`` with the graph-capture margin (default: the calculator's)."""
    try:
        chosen, others = kvcalc.select_boot(boots, None)
        stored = stored_siblings(chosen, boots)
        model = kvcalc.calibrate(chosen, others=[*others, *stored])
        mapping = dict(edits(chosen))
        margin = kvcalc.DEFAULT_GRAPH_MARGIN_GIB if graph_margin_gib is None else graph_margin_gib
        pred = kvcalc.predict(model, mapping, graph_margin_gib=margin)
        if stored:
            cal = calibration_of(others, stored)
            pred = dataclasses.replace(pred, reasons=[*pred.reasons, cal.note()], calibrated=cal)
        return Forecast(pred, chosen)
    except kvcalc.CalcError as exc:
        return str(exc)


def calculate_on(model: kvcalc.MemoryModel, boot: Boot) -> Calculator:
    """``kvtui.hosts.service.Calculator`` on a model already made for ``boot`` — a serving boot
    whose start is not in the log, whose model the console's calculator built from the history's
    boot of its flags or its config.json anchored at the estimated pool: the apply dialog predicts
    as the panel does."""

    def calc(boots: Sequence[Boot], edits: EditsFor, graph_margin_gib: float | None) -> Forecast | str:
        margin = kvcalc.DEFAULT_GRAPH_MARGIN_GIB if graph_margin_gib is None else graph_margin_gib
        try:
            return Forecast(kvcalc.predict(model, dict(edits(boot)), graph_margin_gib=margin), boot)
        except kvcalc.CalcError as exc:
            return str(exc)

    return calc


def stored_siblings(chosen: Boot, seen: Sequence[Boot]) -> list[Boot]:
    """The history's boots of ``chosen``'s deployment (any host: same engine, model, TP and
    version; ``kvcalc.same_setup``) that sized a pool, except those in ``seen`` (the log's
    own): more calibration points for the calculator. Empty when the history cannot be read.

    A vLLM pool also follows its environment (``VLLM_CPU_KVCACHE_SPACE`` on the CPU backend): a
    remembered vLLM boot counts only when it was stored with that environment (``env``, since
    schema documents carry it) and it equals ``chosen``'s."""
    if chosen.engine not in (Engine.SGLANG, Engine.VLLM):
        return []
    want_env = pool_env(chosen.engine, chosen.flags, chosen.facts)
    key = rec.deployment_of_boot(chosen)
    starts = {b.started_at for b in seen if b.started_at is not None}
    out: list[Boot] = []
    with open_store(readonly=True) as store:
        try:
            rows = store.deployment(key, limit=64)
        except HistoryError:
            return []
    for row in rows:
        if want_env and not _same_env(row.document.env, want_env):
            continue
        b = boot_from_doc(row.document)
        if b.started_at is None or b.started_at in starts or not kvcalc.sized_pool(b):
            continue
        if not kvcalc.same_setup(chosen, b):
            continue
        starts.add(b.started_at)
        out.append(b)
    return out


def serving_basis(boot: Boot, host: str) -> tuple[Boot, list[Boot]] | None:
    """The calibration of a boot whose start is not in the log (a server up for days: its flags
    from the running process, no pool line): the history's newest boot of the same host that sized
    its pool with the same flags (``kvcalc.same_setup`` and the same pool fraction), plus the
    other stored boots of that deployment — as ``kvtui calc --host`` uses the history. None when
    the history holds none (or cannot be read)."""
    if boot.start_missing is None or boot.engine not in (Engine.SGLANG, Engine.VLLM) or not boot.flags:
        return None
    fraction = kvcalc.fraction_flag(boot.engine)
    with open_store(readonly=True) as store:
        try:
            rows = store.boots(host, limit=64)
        except HistoryError:
            return None
    same: list[Boot] = []
    for row in rows:  # newest first
        b = boot_from_doc(row.document)
        if b.engine is boot.engine and kvcalc.sized_pool(b) and kvcalc.same_setup(boot, b):
            same.append(b)
    chosen = next((b for b in same if _num(b.flags.get(fraction)) == _num(boot.flags.get(fraction))), None)
    if chosen is None:
        return None
    return chosen, [b for b in same if b is not chosen]


MODEL_CONFIG_TIMEOUT_S = 20.0  # reading a config.json on the host
GPU_READ_TIMEOUT_S = 10.0  # the first GPU reading, when no one gave the GPU's memory


@dataclasses.dataclass(frozen=True, slots=True)
class ServingConfig:
    """What a config-based what-if of a serving boot whose start is not in the log stands on (when
    no stored boot fits, ``serving_basis``): the model's ``config.json`` read on the host (its path
    there), the GPU's memory; or ``why`` not, in one line (the paths tried, the error)."""

    path: str | None = None
    config: dict[str, object] | None = None
    gpu_mem_gib: float | None = None
    why: str | None = None

    def model(self, boot: Boot, gpu_mem_gib: float | None = None) -> kvcalc.MemoryModel:
        """``kvcalc.serving_model`` of ``boot`` on this config (``gpu_mem_gib``: a newer reading);
        ``CalcError`` says why not."""
        if self.config is None:
            raise kvcalc.CalcError(self.why or "the model's config.json was not read", "input")
        return kvcalc.serving_model(boot, self.config, gpu_mem_gib=gpu_mem_gib or self.gpu_mem_gib)

    def said(self, model: kvcalc.MemoryModel) -> str:
        """``config /models/X/config.json + estimated pool (±1,070)``: what the what-if stands on."""
        err = model.anchor_err
        return f"config {self.path} + estimated pool" + (f" (±{err:,})" if err is not None else "")


async def serving_config(backend: HostBackend, boot: Boot, *, gpu_mem_gib: float | None = None,
                         read_gpu: bool = True) -> ServingConfig:
    """Read the running model's ``config.json`` on the host (``shellcmd.model_config``: its
    directory or the HF cache; bounded) and, unless ``gpu_mem_gib`` is given (or ``read_gpu`` is
    False: the console has its GPU readings), the GPU's memory from one GPU reading. Never raises:
    a failure is ``why``."""
    model = kvcalc.model_path(boot)
    if model is None:
        return ServingConfig(why="the running flags name no model (--model-path / --model): no config.json to read")
    try:
        res = await backend.run(shellcmd.model_config(model, pid=boot.process_pid), timeout=MODEL_CONFIG_TIMEOUT_S)
        path, text = shellcmd.parse_model_config(res.exit_status, res.stdout, res.stderr)
    except (BackendError, shellcmd.ModelConfigError) as exc:
        return ServingConfig(why=f"{model}: {exc}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return ServingConfig(path=path, why=f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})")
    if not isinstance(data, dict):
        return ServingConfig(path=path, why=f"{path}: expected a JSON object, got {type(data).__name__}")
    if gpu_mem_gib is None and read_gpu:
        gpu_mem_gib = await gpu_total_gib(backend)
    return ServingConfig(path=path, config=data, gpu_mem_gib=gpu_mem_gib)


async def gpu_total_gib(backend: HostBackend, timeout: float = GPU_READ_TIMEOUT_S) -> float | None:
    """The largest GPU's memory (GiB) from the host's first GPU reading; None when none came."""
    it = backend.gpu_stream(1.0)
    try:
        async with asyncio.timeout(timeout):
            async for samples in it:
                if samples:
                    return max(s.total_mib for s in samples) / 1024.0
    except (TimeoutError, BackendError):
        return None
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(aclose_iter(it), 5.0)
    return None


def _num(v: object) -> object:
    try:
        return float(str(v))
    except ValueError:
        return v


def _same_env(stored: object, want: dict[str, str | None]) -> bool:
    """A stored boot's pool-sizing environment equals ``want`` (numbers compared as numbers)."""
    if not isinstance(stored, dict):
        return False  # recorded before the history kept it: unknown

    def norm(v: object) -> object:
        if v is None:
            return None
        try:
            return float(str(v))
        except ValueError:
            return str(v)

    return all(norm(stored.get(k)) == norm(v) for k, v in want.items())


def calibration_of(others: Sequence[Boot], stored: Sequence[Boot]) -> kvcalc.HistoryCalibration:
    """What the prediction was calibrated with: how many boots, how many from the history."""
    fracs = sorted({f for b in stored if (f := num(flag_value(b.flags, FRACTION_FLAGS))) is not None})
    return kvcalc.HistoryCalibration(1 + len(others) + len(stored), len(stored), tuple(fracs))


def calibration_note(chosen: Boot, others: Sequence[Boot], stored: Sequence[Boot]) -> str:
    """``calibration_of``'s text (a line of the prediction's reasons)."""
    return calibration_of(others, stored).note()


def restart_record(plan: ApplyPlan, outcome: ApplyOutcome) -> dict[str, object]:
    """The history's ``restart`` part of a kvtui-driven restart: the edit, the prediction that
    preceded it (tokens, verdict, confidence, basis, how many boots calibrated it) and the outcome."""
    pred = plan.prediction
    prediction: dict[str, object] | None = None
    if pred is not None:
        prediction = {
            "tokens": pred.tokens,
            "verdict": str(pred.verdict),
            "confidence": str(pred.confidence),
            "basis": str(pred.model.basis),
            "fraction": pred.fraction,
            "kv_cache_gib": pred.kv_cache_gib,
            "calibration_boots": pred.calibrated.boots if pred.calibrated is not None else 1,
        }
    return {
        "action": plan.action,
        "edit": [str(e) for e in [*plan.edits, *plan.env_edits]] if plan.action == "apply" else [],
        "restored_from": plan.backup_path if plan.action == "rollback" else None,
        "backup": plan.saved_copy,
        "file": plan.source.path,
        "forced": bool(plan.force and any(r.forceable for r in plan.refusals)),
        "prediction": prediction,
        "prediction_note": plan.prediction_note,
        "outcome": outcome.status,
        "exit": outcome.code,
        "rolled_back": outcome.rolled_back,
    }


def record_restart(plan: ApplyPlan, outcome: ApplyOutcome, config: HistoryConfig | None = None) -> str | None:
    """Record the boot an ``apply``/``rollback --restart`` followed, with its ``restart`` part;
    the problem when it could not be (said, never raised), None when recorded or nothing to record."""
    return record_restart_numbered(plan, outcome, config)[1]


def record_restart_numbered(plan: ApplyPlan, outcome: ApplyOutcome,
                            config: HistoryConfig | None = None) -> tuple[int | None, str | None]:
    """``record_restart`` with the boot's number in the history (``kvtui.history.ident``; None:
    not recorded) before the problem."""
    if not plan.restart or outcome.boot is None or (config is not None and not config.record):
        return None, None
    limits = Limits(config.max_age_days, config.max_boots_per_host) if config is not None else None
    return record_numbered(plan.name, outcome.boot, restart=restart_record(plan, outcome),
                           source=f"{plan.host.kind}:{plan.host.source_label}", limits=limits,
                           unit_env=unit_env(plan))


def unit_env(plan: ApplyPlan) -> dict[str, str] | None:
    """The pool-sizing variables (``knobs.pool_env_names``) the written unit or script gives the
    server; None when the file's environment cannot be read."""
    try:
        env = envedit.effective_env(plan.new_text, plan.source.kind)
    except fl.FlagError:  # a file whose environment cannot be read back: not stored
        return None
    return {n: env[n] for n in pool_env_names(plan.engine) if n in env}


async def host_boots(backend: HostBackend, host: HostConfig, engine: Engine, timeout: float) -> list[Boot]:
    """``kvtui.hosts.service.BootReader`` by ``kvtui.monitor.read_boots``: the host's current boot,
    its engine known from the flags file; gives up on a log that says nothing within 8 s."""
    return await read_boots(backend, timeout=timeout, host=host, engine=engine, first=8.0, start_backend=False)


async def plan_apply(
    name: str, host: HostConfig, backend: HostBackend, edits: Sequence[fl.Edit], *, restart: bool = False,
    force: bool = False, rollback_on_failure: bool = False, timeout: float = 1800.0,
    graph_margin_gib: float | None = None, boot: Boot | None = None, boots: Sequence[Boot] | None = None,
    predict: bool = True, boots_timeout: float = 20.0, clock: Callable[[], float] = time.time,
    env_edits: Sequence[envedit.EnvEdit] = (), calculator: Calculator | None = None,
) -> ApplyPlan:
    """``service.plan_apply`` predicting with ``calculate`` (or ``calculator``) and reading the
    host's boots with ``host_boots``."""
    return await service.plan_apply(
        name, host, backend, edits, restart=restart, force=force, rollback_on_failure=rollback_on_failure,
        timeout=timeout, graph_margin_gib=graph_margin_gib, boot=boot, boots=boots, predict=predict,
        boots_timeout=boots_timeout, clock=clock, env_edits=env_edits, calculator=calculator or calculate,
        read_boots=host_boots)


async def plan_rollback(
    name: str, host: HostConfig, backend: HostBackend, *, to: str | None = None, restart: bool = False,
    timeout: float = 1800.0, boots: Sequence[Boot] | None = None, graph_margin_gib: float | None = None,
    clock: Callable[[], float] = time.time, force: bool = False, check_orphans: bool = True,
) -> ApplyPlan:
    """``service.plan_rollback`` predicting with ``calculate``."""
    return await service.plan_rollback(
        name, host, backend, to=to, restart=restart, timeout=timeout, boots=boots,
        graph_margin_gib=graph_margin_gib, clock=clock, calculator=calculate, force=force,
        check_orphans=check_orphans)


# ---- N >= 1 nodes changed as one (see the module docstring) ----------------------------------------

NOT_ANSWERING = "ready on every node, but node 0's server does not answer"  # the change's headline then
Say = Callable[[str], None]


def prefixed(say: Say, who: str) -> Say:
    return lambda m: say(f"{who}: {m}")


@dataclass
class NodeSide:
    """One node of a change: its host, its backend (opened by the caller), its plan."""

    name: str
    host: HostConfig
    backend: HostBackend
    plan: ApplyPlan | None = None
    boots: list[Boot] = field(default_factory=list)  # the node's known boots (predictions), if any


__all__ = [
    "NOT_ANSWERING", "NodeSide", "ServingConfig", "calculate", "calculate_on", "calibration_note", "gpu_total_gib",
    "host_boots", "plan_apply", "plan_rollback", "prefixed", "record_restart", "record_restart_numbered",
    "restart_record", "serving_basis", "serving_config", "stored_siblings",
]
