"""Failure evidence in plain Python / PyTorch / NCCL output (engines.md 1.3): exception lines,
CUDA out-of-memory wording and its figures, NCCL errors. The SGLang grammar reads every line no
phase rule claimed through ``generic_failure``.

Pure core.
"""

from __future__ import annotations

import re

from kvtui.engines.events import Fact, FailureKind, FailureText, LogEvent, Metric
from kvtui.engines.sglang.patterns import _gib

_EXC_RE = re.compile(r"^((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure))(?::\s?(.*))?$")
_OOM_TRIED_RE = re.compile(r"Tried to allocate (\d+(?:\.\d+)?) (GiB|MiB|KiB|B)")
_OOM_FREE_RE = re.compile(r"of which (\d+(?:\.\d+)?) (GiB|MiB|KiB|B) (?:is )?free")
_OOM_CAP_RE = re.compile(r"total capac(?:i)?ty of (\d+(?:\.\d+)?) (GiB|MiB|KiB|B)")


def is_oom_text(text: str) -> bool:
    """PyTorch / CUDA out-of-memory wording (engines.md 1.3)."""
    return "OutOfMemoryError" in text or "CUDA out of memory" in text or "CUDA error: out of memory" in text


def oom_metrics(text: str) -> list[Metric]:
    """``Tried to allocate X GiB``, ``of which Y MiB is free``, ``total capacity of Z GiB``."""
    out: list[Metric] = []
    m = _OOM_TRIED_RE.search(text)
    if m:
        out.append(Metric(Fact.OOM_TRIED_GIB, _gib(m.group(1), m.group(2))))
    m = _OOM_FREE_RE.search(text)
    if m:
        out.append(Metric(Fact.OOM_FREE_GIB, _gib(m.group(1), m.group(2))))
    m = _OOM_CAP_RE.search(text)
    if m:
        out.append(Metric(Fact.OOM_CAPACITY_GIB, _gib(m.group(1), m.group(2))))
    return out


def _nccl_kind(text: str) -> bool:
    return (
        "NCCL error" in text
        or "NCCL WARN" in text
        or "DistBackendError" in text
        or "Watchdog caught collective operation timeout" in text
        or "ncclUnhandledCudaError" in text
        or "ncclSystemError" in text
        or "ncclInternalError" in text
    )


def exception_line(text: str) -> FailureText | None:
    """A Python exception line (``RuntimeError: …``, ``torch.OutOfMemoryError: …``) as evidence.

    The kind is decided by the text when the text alone decides it, else left to the phase.
    """
    if not text or not (text[0].isalpha() or text[0] == "_"):
        return None
    if not ("Error" in text or "Exception" in text or "Exit" in text or "Interrupt" in text or "Failure" in text):
        return None
    m = _EXC_RE.match(text)
    if m is None:
        return None
    return FailureText(text=text, kind=_text_kind(text), fatal=False, specificity=3)


def _text_kind(text: str) -> FailureKind | None:
    """Kinds the text decides regardless of the phase (engines.md 1.3)."""
    if "Not enough memory" in text and "mem-fraction-static" in text:
        return FailureKind.OOM_KV_ALLOCATE
    if "Loaded weights leave no GPU memory" in text:
        return FailureKind.OOM_KV_ALLOCATE
    if "memory capacity is unbalanced" in text:
        return FailureKind.GPU_BUSY
    if "Memory pool size is too small" in text:
        # TpModelWorker's check that the pool holds one request (max_req_len from the pool and the
        # context): raised after capture, but a refusal of the pool's size
        return FailureKind.KV_TOO_SMALL
    if is_oom_text(text):
        return None  # the phase decides (weights / capture / runtime …)
    if _nccl_kind(text):
        return FailureKind.NCCL
    return None


def generic_failure(text: str) -> tuple[LogEvent, ...]:
    """Failure evidence in a line no engine grammar claimed (plain Python/PyTorch/NCCL output)."""
    if not ("rror" in text or "NCCL" in text or "out of memory" in text or "Exception" in text):
        return ()
    ft = exception_line(text)
    if ft is not None:
        if is_oom_text(text):
            return (ft, *oom_metrics(text))
        return (ft,)
    if is_oom_text(text):
        return (FailureText(text=text, kind=None, specificity=2), *oom_metrics(text))
    if _nccl_kind(text):
        return (FailureText(text=text, kind=FailureKind.NCCL, specificity=2),)
    return ()
