"""The host header line and the fleet summary (one line per host when several are open)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from textual.content import Content
from textual.geometry import Size
from textual.widget import Widget

from kvtui.boot import Boot, BootStatus
from kvtui.hosts.backend import ConnState, ConnStatus
from kvtui.ui import formatting as fmt
from kvtui.ui.widgets.banner import Notice, expand_key

_STATE_STYLE: dict[ConnState, tuple[str, str]] = {
    ConnState.CONNECTING: ("◌", "$text-muted"),
    ConnState.CONNECTED: ("●", "$success"),
    ConnState.RECONNECTING: ("◌", "$warning"),
    ConnState.HOSTKEY_REFUSED: ("✖", "$error"),
    ConnState.AUTH_FAILED: ("✖", "$error"),
    ConnState.FAILED: ("✖", "$error"),
    ConnState.CLOSED: ("○", "$text-muted"),
}


def conn_text(status: ConnStatus | None, *, with_detail: bool = True) -> Content:
    """"● connected", "◌ reconnecting in 4s", "✖ host key refused" …; ``with_detail``: and why."""
    if status is None:
        return Content.styled("◌ connecting", "$text-muted")
    if status.recorded:  # an incident bundle: a recording, not a live host
        head = Content.styled("■ recorded", "$accent bold")
        if not with_detail or not status.detail:
            return head
        detail = status.detail.removeprefix("recorded: ")
        return Content.assemble(head, Content.styled(f" ({detail if len(detail) <= 60 else detail[:59] + '…'})",
                                                     "$text-muted"))
    icon, style = _STATE_STYLE.get(status.state, ("?", "$text-muted"))
    label = status.state.value
    if status.state is ConnState.RECONNECTING and status.retry_in is not None:
        label = f"reconnecting in {max(0, round(status.retry_in))}s"
    parts = [Content.styled(f"{icon} {label}", f"{style} bold")]
    if not with_detail:
        return parts[0]
    if status.state is ConnState.HOSTKEY_REFUSED and status.fingerprint:
        parts.append(Content.styled(f" ({status.fingerprint})", "$text-muted"))
    elif status.detail and status.state in (ConnState.CONNECTING, ConnState.RECONNECTING):
        detail = status.detail if len(status.detail) <= 60 else status.detail[:59] + "…"
        parts.append(Content.styled(f" ({detail})", "$text-muted"))
    if not status.strict_host_key:
        parts.append(Content.styled(" · host key not checked", "$warning"))
    return Content.assemble(*parts)


def pod_text(kind: str, status: ConnStatus | None) -> Content | None:
    """A kube host's pod state while its container runs ("pod r1-0: Running, not ready (readiness
    probe), 2 restarts, last: OOMKilled …"; the backend's words), muted when running and ready
    with no restart behind it, else in the warning colour; while it waits, ``conn_text`` says it."""
    if kind != "kube" or status is None or status.state is not ConnState.CONNECTED or not status.detail:
        return None
    text = status.detail.split("; ", 1)[0]
    healthy = text.endswith(": Running, ready")
    return Content.styled(text if len(text) <= 110 else text[:109] + "…", "$text-muted" if healthy else "$warning")


def boot_state_text(boot: Boot | None, elapsed: float | None, *, up: bool = False) -> Content:
    """The boot in a few words: "▶ graph capture 2m 13s", "✔ ready", "✖ failed: OOM graph capture";
    ``up``: a deployment's node other than node 0 whose boot still starts (it prints nothing after
    its capture) while the deployment is ready through node 0 — "✔ up"."""
    if boot is None:
        return Content.styled("no boot yet", "$text-muted")
    if up and boot.status is BootStatus.STARTING:
        return Content.styled("✔ up", "$phase-ready bold")
    if boot.status is BootStatus.READY:
        if boot.start_missing is not None:  # up since before the log kvtui could read
            return Content.styled("✔ serving", "$phase-ready bold")
        return Content.styled("✔ ready", "$phase-ready bold")
    if boot.status is BootStatus.FAILED:
        failure = boot.failure
        said = fmt.failure_short(failure.kind, failure.phase) if failure is not None else "unknown"
        return Content.styled(f"✖ failed: {said}", "$phase-failed bold")
    if boot.status is BootStatus.STOPPED:
        return Content.styled("■ stopped", "$text-muted bold")
    phase = boot.phase
    var = "$" + fmt.PHASE_VARIABLE[phase] if phase is not None else "$text-muted"
    tail = f" {fmt.duration(elapsed)}" if elapsed is not None else ""
    return Content.styled(f"▶ {fmt.phase_label(phase)}{tail}", f"{var} bold")


FATAL_STATES = frozenset({ConnState.HOSTKEY_REFUSED, ConnState.AUTH_FAILED, ConnState.FAILED})


class ConnBanner(Notice):
    """Why a host cannot be reached when retrying will not help (host key, authentication,
    configuration): the backend's message, which says what to do (e.g. how to trust a key). Not
    a one-line ``Banner``: what to do is the point, and there is no log to make room for."""

    DEFAULT_CSS = """
    ConnBanner {
        background: $error-muted;
        border-left: thick $error;
    }
    """

    def show(self, status: ConnStatus | None) -> None:
        if status is None or status.state not in FATAL_STATES:
            self.show_when(None)
            return
        shown = status
        self.show_when((shown.state, shown.detail, shown.fingerprint), lambda: self._content(shown))

    @staticmethod
    def _content(status: ConnStatus) -> Content:
        parts = [Content.styled(f"✖ cannot monitor this host: {status.state.value}", "$error bold")]
        if status.fingerprint:
            key = Content.styled(status.fingerprint, "$foreground bold")
            parts.append(Content.assemble(("offered host key ", "$text-muted"), key))
        if status.detail:
            parts.append(Content.styled(status.detail, "$foreground"))
        return Content("\n").join(parts)


@dataclass(frozen=True, slots=True)
class HostInfo:
    """What the header says about a host (from its config and the current boot)."""

    name: str
    kind: str  # "ssh" | "local" | "demo"
    target: str  # user@host, "this machine", "simulated"
    source: str  # "unit sglang-k26", "log /root/x.log", "container c"
    readonly: bool = False
    gpus: str = ""


class HostBar(Widget):
    """host · engine · unit/log/container · connection state · readonly — and the boot, right."""

    DEFAULT_CSS = """
    HostBar {
        height: 1;
        background: $panel;
        padding: 0 1;
    }
    """

    def __init__(self, info: HostInfo, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.info = info
        self.status: ConnStatus | None = None
        self.boot: Boot | None = None
        self.elapsed: float | None = None
        self.boot_label: str | None = None  # "boot #13" (the history's number) or "boot 2 of this log"
        self.version: str | None = None
        self.up = False  # a deployment's node serving through node 0 (``boot_state_text``)
        self._shown: tuple[str, str] | None = None

    def show(
        self, status: ConnStatus | None, boot: Boot | None, elapsed: float | None, boot_label: str | None,
        version: str | None = None, *, up: bool = False,
    ) -> None:
        """``boot_label``: the boot's name (``kvtui.history.ident``: ``boot #13``, else ``boot 2 of
        this log``). ``version``: the engine's version to show when ``boot`` has not told its own
        yet (the host's previous boot's: a boot that has printed less is not another version)."""
        self.status, self.boot, self.elapsed, self.boot_label = status, boot, elapsed, boot_label
        self.version, self.up = version, up
        shown = (self.left().markup, self.right().markup)
        if shown != self._shown:  # the bar is told the state every second: repaint only a change
            self._shown = shown
            self.refresh()

    def left(self, level: int = 0) -> Content:
        """The left part; ``level`` 1-3 leave out what matters least (for a narrow terminal):
        the unit/log/container and GPUs, then the target and the engine's version, then the
        connection's detail."""
        info = self.info
        engine = "engine ?"
        if self.boot is not None and self.boot.engine.value != "unknown":
            version = self.boot.version_hint or self.version
            engine = self.boot.engine.value + (f" {version}" if version and level < 2 else "")
        parts: list[Content] = [Content.styled(info.name, "$accent bold")]
        if level < 2:
            parts.append(Content.styled(info.target, "$text-muted"))
        parts.append(Content.styled(engine, "$foreground"))
        if level < 1:
            parts.append(Content.styled(info.source, "$foreground"))
            if info.gpus:
                parts.append(Content.styled(f"GPUs {info.gpus}", "$text-muted"))
        conn = conn_text(self.status)
        if level >= 3:  # the icon and the state, not why
            conn = conn_text(self.status, with_detail=False)
        parts.append(conn)
        pod = pod_text(info.kind, self.status) if level < 3 else None
        if pod is not None:
            parts.append(pod)
        if info.readonly:
            parts.append(Content.styled("readonly", "$warning bold"))
        return Content.styled(" · ", "$text-muted").join(parts)

    def right(self) -> Content:
        number = f"{self.boot_label}  " if self.boot_label else ""
        return Content.assemble((number, "$text-muted"), boot_state_text(self.boot, self.elapsed, up=self.up))

    def render(self) -> Content:
        return self.line(self.size.width or 120)

    def line(self, width: int) -> Content:
        """The boot's state always shows (on the right); the left gives way, then is cut with …."""
        right = self.right()
        for level in range(4):
            left = self.left(level)
            gap = width - left.cell_length - right.cell_length
            if gap >= 2:
                return Content.assemble(left, " " * gap, right)
        room = width - right.cell_length - 2
        if room < 8:
            return right
        return Content.assemble(left.truncate(room, ellipsis=True), "  ", right)


class ZoomHeader(Widget):
    """The active host's header over a zoomed panel (``z``, or a panel opened zoomed): which host,
    its connection and its boot's state stay in sight. It shows what the pane's ``HostBar`` shows
    (``mirror``; not a ``HostBar`` itself: a query for the pane's header must not find it)."""

    DEFAULT_CSS = """
    ZoomHeader {
        dock: top;
        height: 1;
        background: $panel;
        padding: 0 1;
        display: none;  /* kvtui.tcss shows it in the zoomed view */
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.bar: HostBar | None = None
        self.shown = Content("")

    def mirror(self, bar: HostBar) -> None:
        self.bar = bar
        before = self.shown.markup
        if self.render().markup != before:  # told every second: repaint a change only
            self.refresh()

    def render(self) -> Content:
        bar = self.bar
        self.shown = Content("") if bar is None else bar.line(self.content_region.width or self.app.size.width - 2)
        return self.shown


@dataclass(frozen=True, slots=True)
class FleetRow:
    name: str
    status: ConnStatus | None
    boot: Boot | None
    elapsed: float | None
    readonly: bool = False
    up: bool = False  # a deployment's node serving through node 0 (``boot_state_text``)


class FleetSummary(Widget):
    """One line per host: state, phase, pool tokens, KV usage. Click a line to open its tab.

    More hosts than fit (``max-height``): the lines show a window of hosts that always holds the
    active one, and the last line sums up the others ("+24 more: ✖ 2 failed · ▶ 3 booting · …"),
    so a failure on a host out of view is seen at once.

    With many hosts every host's row changes every second or so (phase clocks, KV usage): a row
    is rebuilt only when told something new, the widget repaints only when a line it shows (a
    host's line in the window, or the sum of the others) changed, and ``update_rows`` takes a
    whole second's rows in one repaint."""

    DEFAULT_CSS = """
    FleetSummary {
        height: auto;
        max-height: 8;
        background: $surface;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def __init__(self, names: Sequence[str], *, expanded: bool = True, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.rows: dict[str, FleetRow] = {n: FleetRow(n, None, None, None) for n in names}
        self._order = {n: i for i, n in enumerate(self.rows)}
        self._lines: dict[str, Content] = {}  # each row's line as last built (rebuilt when told anew)
        self._width = max((len(n) for n in self.rows), default=4)
        self.active: str | None = names[0] if names else None
        self.repaints = 0  # refreshes asked for (tests check that unseen rows ask for none)
        self._first = 0  # the first host in the window (kept while the active host is in it)
        self._others: Content | None = None  # the last line summing up the hosts out of the window
        # the console's is one line for every host unless expanded (issue 22 #13: with the tabs
        # it took 4 rows of a 36-row terminal); ``b`` expands it to a line per host
        self.expanded = expanded
        self._one_line: Content | None = None

    def set_expanded(self, expanded: bool) -> None:
        """A line per host (``True``) or one line for them all."""
        if expanded == self.expanded:
            return
        self.expanded = expanded
        self.set_class(expanded, "-expanded")
        self._lines.clear()
        self._one_line = None
        self.repaints += 1
        self.refresh(layout=True)

    def one_line(self, width: int | None = None) -> Content:
        """Every host on one line ("▸ demo-a ▶ load weights 12s │ demo-b ✔ ready"), each part a
        click to its tab; when they do not fit, the active host's part and how many of the
        others failed, are not reached, boot or are ready."""
        width = width if width is not None else (self.content_region.width or 120)
        hint = Content.styled(f"  {expand_key(self)}: each host", "$text-muted")
        parts: list[Content] = []
        for row in self.rows.values():
            active = row.name == self.active
            state = (conn_text(row.status, with_detail=False)
                     if row.status is not None and row.status.state is not ConnState.CONNECTED
                     else boot_state_text(row.boot, row.elapsed, up=row.up))
            parts.append(Content.assemble(
                ("▸ " if active else "", "$accent bold"),
                (row.name, "$accent bold" if active else "$foreground bold"), " ", state,
            ).stylize(f"@click=app.switch_host('{row.name}')"))
        sep = Content.styled(" │ ", "$text-muted")
        line = sep.join(parts)
        if line.cell_length + hint.cell_length > width and self.active in self.rows:
            index = self._order[self.active]
            others = self._others_line((index, 1))
            line = parts[index] if others is None else Content.assemble(parts[index], others)
        room = width - hint.cell_length
        if line.cell_length > room:
            line = line.truncate(max(1, room), ellipsis=True)
        return Content.assemble(line, " " * max(0, room - line.cell_length), hint)

    def window(self) -> tuple[int, int]:
        """(first, count): the hosts whose lines are on screen (all of them before the first
        layout). With more hosts than lines, ``count`` leaves the last line to the others' sum and
        the window moves as little as it must to hold the active host."""
        total = len(self.rows)
        height = self.size.height
        if not height or total <= height:
            return 0, total
        count = max(1, height - 1)
        active = self._order.get(self.active, 0) if self.active is not None else 0
        first = self._first
        if active < first:
            first = active
        elif active >= first + count:
            first = active - count + 1
        self._first = first = max(0, min(first, total - count))
        return first, count

    def visible_rows(self) -> int:
        """How many hosts' lines are on screen."""
        return self.window()[1]

    def _shown(self, name: str, window: tuple[int, int]) -> bool:
        first, count = window
        return first <= self._order[name] < first + count

    def _others_line(self, window: tuple[int, int]) -> Content | None:
        """The hosts out of the window in one line: how many, and how many of them failed, cannot
        be reached, are booting, ready or neither; clicking it opens the first that failed."""
        first, count = window
        names = list(self.rows)
        hidden = names[:first] + names[first + count:]
        if not hidden:
            return None
        counts = {"failed": 0, "unreachable": 0, "booting": 0, "ready": 0, "idle": 0}
        first_failed: str | None = None
        for name in hidden:
            row = self.rows[name]
            boot = row.boot
            if row.status is not None and (row.status.state in FATAL_STATES
                                           or row.status.state is ConnState.RECONNECTING):
                counts["unreachable"] += 1
                first_failed = first_failed or name
            elif boot is not None and boot.status is BootStatus.FAILED:
                counts["failed"] += 1
                first_failed = first_failed or name
            elif boot is not None and boot.status is BootStatus.STARTING and not row.up:
                counts["booting"] += 1
            elif boot is not None and (boot.status is BootStatus.READY or row.up):
                counts["ready"] += 1
            else:
                counts["idle"] += 1
        styles = {
            "failed": ("✖", "$phase-failed bold"),
            "unreachable": ("◌", "$warning bold"),
            "booting": ("▶", "$accent"),
            "ready": ("✔", "$phase-ready"),
            "idle": ("·", "$text-muted"),
        }
        parts: list[Content | tuple[str, str] | str] = [(f"  +{len(hidden)} more: ", "$text-muted")]
        shown = [k for k, n in counts.items() if n]
        for i, key in enumerate(shown):
            icon, style = styles[key]
            parts.append((f"{icon} {counts[key]} {key if key != 'idle' else 'other'}", style))
            if i < len(shown) - 1:
                parts.append((" · ", "$text-muted"))
        line = Content.assemble(*parts)
        if first_failed is not None:
            line = line.stylize(f"@click=app.switch_host('{first_failed}')")
        return line

    def update_row(self, row: FleetRow) -> None:
        self.update_rows((row,))

    def update_rows(self, rows: Sequence[FleetRow]) -> None:
        """Take new rows; one repaint if a line on screen changed. One unwrapped line per host,
        hosts fixed: a row's new state never changes the height, so no layout pass either."""
        if not self.expanded:
            for row in rows:
                if row.name in self._order:
                    self.rows[row.name] = row
            line = self.one_line()
            if line != self._one_line:
                self._one_line = line
                self.repaints += 1
                self.refresh()
            return
        window = self.window()
        changed = False
        others = False
        for row in rows:
            if row.name not in self._order:
                continue
            self.rows[row.name] = row
            if not self._shown(row.name, window):
                self._lines.pop(row.name, None)  # off screen: built when needed
                others = True
                continue
            line = self._line(row)
            if self._lines.get(row.name) != line:
                self._lines[row.name] = line
                changed = True
        if others:
            summed = self._others_line(window)
            if summed != self._others:
                self._others = summed
                changed = True
        if changed:
            self.repaints += 1
            self.refresh()

    def set_active(self, name: str) -> None:
        previous, self.active = self.active, name
        for n in (previous, name):
            if n is not None:
                self._lines.pop(n, None)
        self._one_line = None
        self.repaints += 1
        self.refresh()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.rows) if self.expanded else 1  # one line per host, never wrapped

    def _line(self, row: FleetRow) -> Content:
        boot = row.boot
        tokens = fmt.tokens(boot.metrics.max_total_num_tokens) if boot is not None else "—"
        usage = fmt.percent(boot.live.token_usage) if boot is not None else "—"
        active = row.name == self.active
        line = Content.assemble(
            ("▸ " if active else "  ", "$accent bold"),
            (f"{row.name:<{self._width}}", "$accent bold" if active else "$foreground bold"),
            "  ",
            _pad(conn_text(row.status), 18),
            _pad(boot_state_text(boot, row.elapsed, up=row.up), 28),
            ("tokens ", "$text-muted"),
            (f"{tokens:>10}", "$foreground"),
            ("   KV ", "$text-muted"),
            (f"{usage:>6}", "$foreground"),
            ("   readonly" if row.readonly else "", "$warning"),
        )
        return line.stylize(f"@click=app.switch_host('{row.name}')")

    def on_resize(self) -> None:
        self._one_line = None

    def render(self) -> Content:
        if not self.expanded:
            one = self._one_line = self.one_line()
            return one
        first, count = window = self.window()
        lines: list[Content] = []
        for row in list(self.rows.values())[first : first + count]:
            line = self._lines.get(row.name)
            if line is None:
                line = self._lines[row.name] = self._line(row)
            lines.append(line)
        self._others = self._others_line(window)
        if self._others is not None:
            lines.append(self._others)
        return Content("\n").join(lines)


def _pad(content: Content, width: int) -> Content:
    """``content`` cut or padded to ``width`` cells (table-like columns)."""
    if content.cell_length >= width:
        return content.truncate(width - 1, ellipsis=True).pad_right(1)
    return content.pad_right(width - content.cell_length)
