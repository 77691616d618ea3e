"""The "what changed" strip: one line under the host's header saying what the boot on screen does
differently from the host's last good boot — the history's diff (``kvtui.history.diff``, what
``kvtui history --diff`` and the history view's ``d`` show) where the eye is after a restart:

    vs last good boot #12: mem-fraction-static 0.88→0.93, env +SGLANG_X=1, free before load
    94.1→91.0 GiB, sglang 0.5.14→0.5.15

The flags (added, removed, changed), the pool-sizing environment, the free memory before the
weights loaded (the least of the ranks; said only past the diff's own noise thresholds) and the
engine's version. Hidden when nothing differs, when the history holds no earlier ready boot of the
same model, or before the boot has said its flags.

The strip reads its pane (``boot``, ``boot_index``, ``host_name``) once a second and does work
only when the boot moved on (another boot, status, flags, figures); the history is read off the
event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from textual.content import Content

from kvtui.boot import Boot
from kvtui.history import diff as hdiff
from kvtui.history.doc import BootDoc
from kvtui.history.record import new_doc
from kvtui.history.store import HistoryError, open_store
from kvtui.ui.perf import QuietStatic

HISTORY_ROWS = 50  # the host's newest stored boots searched for the last good one
MAX_ITEMS = 8  # flag / env changes named before "+N more"


def _value(v: object) -> str:
    if v is True:
        return "on"
    if v is False:
        return "off"
    return hdiff._v(v)


def _flag(name: str) -> str:
    return name.replace("_", "-")


def _min_free(pairs: Mapping[str, tuple[float | None, float | None]], scale: float) -> tuple[float, float] | None:
    """The least free memory before load of each side (GiB), when both sides have one."""
    a = [x / scale for x, _ in pairs.values() if x is not None]
    b = [y / scale for _, y in pairs.values() if y is not None]
    return (min(a), min(b)) if a and b else None


def changes(d: hdiff.BootDiff) -> list[str]:
    """What differs, one short item each (empty: nothing worth a line)."""
    items: list[str] = [f"{_flag(k)} {_value(a)}→{_value(b)}" for k, (a, b) in d.changed.items()]
    items += [f"+{_flag(k)}" + ("" if v is True else f"={_value(v)}") for k, v in d.added.items()]
    items += [f"-{_flag(k)}" for k in d.removed]
    env = [f"+{k}={y}" if x is None else f"-{k}" if y is None else f"{k} {x}→{y}" for k, (x, y) in d.env.items()]
    if env:
        items.append("env " + ", ".join(env))
    if len(items) > MAX_ITEMS:
        items = [*items[:MAX_ITEMS], f"+{len(items) - MAX_ITEMS} more"]
    # the engine's own figure (per rank) when both boots printed it, else kvtui's readings (per GPU)
    free = _min_free(d.free_before_load_gib, 1.0)
    threshold = hdiff.LESS_FREE_GIB
    if free is None:
        free, threshold = _min_free(d.gpu_free_at_start_mib, 1024.0), hdiff.LESS_FREE_READING_GIB
    if free is not None and abs(free[0] - free[1]) >= threshold:
        items.append(f"free before load {free[0]:.1f}→{free[1]:.1f} GiB")
    if d.engine_changed():
        (ea, eb), (va, vb) = d.engine, d.version
        if ea == eb:
            items.append(f"{ea} {va or '?'}→{vb or '?'}")
        else:
            items.append(f"{ea} {va or ''}→{eb} {vb or ''}".strip())
    return items


def changed_line(rows: Sequence[tuple[int, hdiff.Doc]], doc: hdiff.Doc) -> tuple[int, list[str]] | None:
    """(the last good boot's id, what changed since) for the boot ``doc`` among the host's stored
    boots ``rows`` (id, document; newest first); None when there is no earlier ready boot of its
    model. The boot itself, once stored, is matched by its start and skipped with every newer row."""
    stored = [(row_id, BootDoc.of(d)) for row_id, d in rows]
    this = BootDoc.of(doc)
    started = this.started_at
    before = next((row_id for row_id, d in stored if started and d.started_at == started), None)
    got = hdiff.last_good(stored, this, before=before)
    if got is None:
        return None
    base_id, base = got
    return base_id, changes(hdiff.diff(base, this, base_id=base_id))


class ChangedStrip(QuietStatic):
    """See the module doc."""

    DEFAULT_CSS = """
    ChangedStrip {
        display: none;
        height: 1;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
        &.-shown { display: block; }
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._seen: tuple[object, ...] | None = None  # the boot's state last looked at
        self._rows: list[tuple[int, BootDoc]] = []
        self._rows_for: tuple[object, ...] | None = None  # (host, boot, status) the rows were read for
        self.line: str | None = None  # what the strip says (None: hidden), for tests and the curious

    def on_mount(self) -> None:
        self.set_interval(1.0, self.check, name="changed-strip")
        self.call_after_refresh(self.check)

    def _pane(self) -> tuple[str, int | None, Boot | None] | None:
        pane = self.parent
        host = getattr(pane, "host_name", None)
        if not isinstance(host, str):
            return None
        boot = getattr(pane, "boot", None)
        return host, getattr(pane, "boot_index", None), boot if isinstance(boot, Boot) else None

    def check(self) -> None:
        """Look at the pane's boot: when it moved on, say again what changed (reading the history
        again when the boot is another one or changed status: a finished boot is stored)."""
        got = self._pane()
        if got is None:
            return
        host, index, boot = got
        if boot is None or not boot.flags:
            self._show(None)
            self._seen = None
            return
        seen = (host, index, boot.started_at, boot.status, len(boot.flags), boot.version_hint,
                len(boot.rank_facts), len(boot.facts))
        if seen == self._seen:
            return
        self._seen = seen
        self.refresh_line(host, boot, reread=(host, index, boot.started_at, boot.status) != self._rows_for)
        self._rows_for = (host, index, boot.started_at, boot.status)

    def refresh_line(self, host: str, boot: Boot, *, reread: bool) -> None:
        doc = new_doc(host, boot)
        self.run_worker(self._update(host, doc, reread), group="changed-strip", exclusive=True,
                        exit_on_error=False, description="what changed since the last good boot")

    async def _update(self, host: str, doc: BootDoc, reread: bool) -> None:
        if reread:
            self._rows = await asyncio.to_thread(_stored, host)
        got = changed_line(self._rows, doc)
        if got is None or not got[1]:
            self._show(None)
            return
        base_id, items = got
        self._show(f"vs last good boot #{base_id}: " + ", ".join(items))

    def _show(self, line: str | None) -> None:
        self.line = line
        self.set_class(line is not None, "-shown")
        self.set(line, lambda: self._content(line))

    @staticmethod
    def _content(line: str | None) -> Content:
        if line is None:
            return Content("")
        head, _, rest = line.partition(": ")
        return Content.assemble((head + ": ", "$text-muted"), (rest, "$warning"))


def _stored(host: str) -> list[tuple[int, BootDoc]]:
    """The host's newest stored boots (id, document), newest first; empty when the history cannot
    be read (a reader: read-only, never raises)."""
    try:
        with open_store(readonly=True) as store:
            return [(r.id, r.document) for r in store.boots(host, limit=HISTORY_ROWS)]
    except (HistoryError, OSError):
        return []
