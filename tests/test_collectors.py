"""Boots read through whatever wraps them (issue 11, classes 1 and 2).

* every fixture and shared sample wrapped in each collector's prefix (docker compose ± -t, kubectl
  --prefix, kubectl/docker --timestamps, a Loki/Grafana export, a ray driver, a tee'd tmux capture,
  syslog forwarded to a file, a local timestamp and ``|``) and in a random stable prefix gives the
  same boots, figures and failures as the bare log;
* the last K lines (K = 5..40) of every failed fixture give a failed boot of the same engine and
  failure kind (a fragment pasted without its start).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtui.boot import Boot, BootStatus
from kvtui.commands.replay import analyse
from kvtui.engines.collector import PrefixLayer, prefix_timestamp
from kvtui.engines.events import LogRecord, PhaseMark
from kvtui.engines.parse import LineParser, Unwrapper, _is_plain_systemd, wrap_widths
from kvtui.engines.shapes import detect_shape, iter_records

FIX = Path(__file__).parent / "fixtures"
NOW = datetime(2026, 12, 1, 12, 0, 0)


def clock() -> datetime:
    return NOW


def _fixture_paths() -> list[Path]:
    out = []
    for p in sorted(FIX.rglob("*")):
        if p.suffix not in (".log", ".journal", ".json") or p.name.startswith("expected"):
            continue
        if p.suffix == ".json" and p.parent.name == "real":
            continue  # the real logs' facts (vllm-cpu-extra.json), not a log
        if "shapes" in p.parts or p.stat().st_size > 400_000:
            continue
        out.append(p)
    return out


PATHS = _fixture_paths()


@cache
def bare_text(path: Path) -> str:
    """The engine's own output: the file itself, or a journal's messages one per line (a terminal
    capture's wrapped rows joined: a collector prefixes the engine's lines, the terminal wraps
    what it shows)."""
    data = path.read_bytes()
    shape = detect_shape(data[:65536])
    if shape in ("raw", "docker"):
        widths = wrap_widths(data[:65536])
        if widths:
            u = Unwrapper(widths)
            data = b"\n".join(u.feed(data.split(b"\n")) + u.flush())
        return data.decode("utf-8", "replace")
    return "\n".join(r.text for r in iter_records(data, shape, now=clock)) + "\n"


def replay_text(text: str) -> list[Boot]:
    boots, _ = analyse(iter([text.encode("utf-8", "replace")]), clock=clock)
    return boots


def essence(boots: list[Boot]) -> list[object]:
    """What a boot says, without where it sits in time or in the stream."""
    out: list[object] = []
    for b in boots:
        j = b.to_json()
        failure = j["failure"]
        out.append(
            (
                j["engine"], j["version_hint"], j["status"], j["phase"],
                [(p["name"], p["model"]) for p in j["phases"]],  # type: ignore[union-attr]
                (failure["kind"], failure["phase"], failure["message"], failure["hint"]) if failure else None,  # type: ignore[index]
                j["flags"], j["metrics"], j["ranks"], b.draft_facts, b.capture_bs,
            )
        )
    return out


@cache
def bare_essence(path: Path) -> list[object]:
    return essence(replay_text(bare_text(path)))


Prefix = Callable[[int, str], str]


def wrap(text: str, prefix: Prefix, end: str = "\n") -> str:
    """Each line (a ``\\n``-line: its ``\\r`` redraws stay inside it, as a collector sees them)
    behind the prefix."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "".join(prefix(i, ln) + ln + end for i, ln in enumerate(lines))


T0 = datetime(2026, 3, 4, 9, 12, 0)


def _t(i: int) -> datetime:
    return T0 + timedelta(milliseconds=37 * i)


def _syslog(i: int, line: str) -> str:
    # the service manager's own lines carry its identifier, the server's lines the server's
    ident = "systemd[1]" if _is_plain_systemd(line) else "llm-server[4242]"
    return f"{_t(i):%b %e %H:%M:%S} gpu-a.example {ident}: "


COLLECTORS: dict[str, Prefix] = {
    "docker compose": lambda i, ln: "sglang-1  | ",
    "docker compose -t": lambda i, ln: f"vllm-server-1  | {_t(i):%Y-%m-%dT%H:%M:%S}.{_t(i).microsecond:06d}123Z ",
    "kubectl --prefix": lambda i, ln: "[pod/sglang-0/server] ",
    "kubectl --prefix --timestamps": lambda i, ln: f"[pod/vllm-7d9f-x2k9p/vllm] {_t(i):%Y-%m-%dT%H:%M:%S.%f}Z ",
    "kubectl --timestamps": lambda i, ln: f"{_t(i):%Y-%m-%dT%H:%M:%S.%f}123Z ",
    "loki export": lambda i, ln: f"{_t(i):%Y-%m-%d %H:%M:%S.%f}"[:-3] + '\t{app="llm", pod="srv-0"}\t',
    "ray driver": lambda i, ln: "(ServeReplica:llm:LLMServer pid=28488) ",
    "tmux tee": lambda i, ln: "\x1b[0m\x1b[?25h",
    "syslog to a file": _syslog,
    "local timestamp and |": lambda i, ln: f"{_t(i):%Y-%m-%d %H:%M:%S},{i % 1000:03d} | ",
}


@pytest.mark.parametrize("collector", sorted(COLLECTORS))
def test_every_fixture_reads_the_same_through_each_collector(collector: str) -> None:
    prefix = COLLECTORS[collector]
    end = "\r\n" if collector == "tmux tee" else "\n"
    checked = 0
    for path in PATHS:
        want = bare_essence(path)
        got = essence(replay_text(wrap(bare_text(path), prefix, end)))
        assert got == want, f"{collector}: {path.relative_to(FIX)}"
        checked += bool(want)
    assert checked >= 50  # most fixtures hold a boot


_SAFE = string.ascii_letters + string.digits + " -_./:|#@<>{}=,;+~"


@settings(deadline=None, max_examples=12, suppress_health_check=[HealthCheck.too_slow])
@given(
    head=st.text(_SAFE, min_size=1, max_size=40).filter(lambda s: not s.isspace()),
    counter=st.booleans(),
    sep=st.sampled_from([" ", " | ", "\t", ": ", "] ", " -- "]),
)
def test_a_random_stable_prefix_changes_nothing(head: str, counter: bool, sep: str) -> None:
    def prefix(i: int, line: str) -> str:
        return head + (f"{i:05d}" if counter else "") + sep

    for path in PATHS[::3]:
        assert essence(replay_text(wrap(bare_text(path), prefix))) == bare_essence(path), path.name


def test_the_prefix_timestamp_is_kept() -> None:
    # a year-less vLLM line gets its year and zone from the collector's RFC 3339 stamp
    p = LineParser(clock=clock)
    (line,) = p.feed(LogRecord(
        "2025-07-01T10:02:41.123456789Z (Worker_TP0 pid=2350) INFO 07-01 10:02:41 [gpu_worker.py:276] "
        "Available KV cache memory: 11.03 GiB"
    ))
    assert line.rank == "Worker_TP0"
    assert line.ts is not None
    assert (line.ts.year, line.ts.utcoffset()) == (2025, timedelta(0))
    assert prefix_timestamp("Mar  4 09:12:00 host x[1]: ", clock) == datetime(2026, 3, 4, 9, 12, 0)
    assert prefix_timestamp("svc-1  | 2026-03-04T09:12:00+02:00 ") is not None
    assert prefix_timestamp("sglang-1  | ") is None


def test_a_learned_prefix_comes_off_lines_without_an_anchor() -> None:
    layer = PrefixLayer()
    assert layer.find("svc-1  | [2026-03-04 09:12:00 TP0] Load weight begin. avail mem=78.91 GB") is not None
    assert layer.cut("svc-1  |   File \"/x.py\", line 1, in f") is None  # seen once: not learned yet
    assert layer.find("svc-1  | [2026-03-04 09:12:01 TP1] Load weight begin. avail mem=78.91 GB") is not None
    assert layer.cut('svc-1  |   File "/x.py", line 1, in f') == ('  File "/x.py", line 1, in f', None)
    # indentation alone is no prefix; an exception's name is no prefix either
    assert PrefixLayer().find("    raise ValueError(") is None
    layer2 = PrefixLayer()
    assert layer2.find("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
                       heads_only=True) is None


def hard_wrap(text: str, width: int) -> str:
    """A terminal capture's scrollback: every line cut into rows of ``width`` columns."""
    out = []
    for ln in text.split("\n"):
        if "\r" in ln:  # a capture shows a bar's last redraw only
            ln = ln.split("\r")[-1]
        out.extend(ln[i : i + width] for i in range(0, max(len(ln), 1), width))
    return "\n".join(out)


@pytest.mark.parametrize("width", [100, 129, 160])
def test_a_hard_wrapped_capture_reads_like_the_log(width: int) -> None:
    checked = 0
    for path in PATHS:
        bare = bare_text(path)
        if bare.count("\n") < 30 or "\r" in bare or "\x1b" in bare or "wrapped" in path.name:
            continue
        lines = bare.split("\n")
        if sum(1 for ln in lines if len(ln) > width) < 8:
            continue  # too few long lines to show a wrap
        assert essence(replay_text(hard_wrap(bare, width))) == bare_essence(path), f"{path.name} at {width}"
        checked += 1
    assert checked >= 5


def test_no_fixture_is_taken_for_a_wrapped_capture() -> None:
    wrapped = {p.name for p in PATHS if wrap_widths(p.read_bytes()[:65536])}
    assert wrapped == {"30-vllm-qwen2-7b-tp2-ray-2node-wrapped-ready.log"}


# ---- fragments: the last K lines of every failed fixture -------------------------------------------


@cache
def failed_fixtures() -> list[tuple[Path, str, str, str, str]]:
    """(path, engine, kind, failure message, failure phase) of every fixture whose last boot failed."""
    out = []
    for path in PATHS:
        boots = replay_text(bare_text(path))
        if boots and boots[-1].status is BootStatus.FAILED and boots[-1].failure is not None:
            f = boots[-1].failure
            out.append((path, boots[-1].engine.value, f.kind.value, f.message, f.phase.value if f.phase else ""))
    return out


def test_there_are_failed_fixtures_of_both_engines() -> None:
    engines = {e for _, e, _, _, _ in failed_fixtures()}
    assert engines == {"sglang", "vllm"}
    assert len(failed_fixtures()) >= 25


PHASE_DECIDED = {"oom_weights", "oom_kv_allocate", "oom_graph_capture", "oom_runtime", "gpu_busy", "crash"}


def _phases_in(text: str) -> set[str]:
    """The phases the lines of ``text`` name on their own (phase lines and traceback frames)."""
    parser = LineParser(clock=clock)
    out: set[str] = set()
    for ln in text.split("\n"):
        for p in parser.feed(LogRecord(ln)):
            out.update(e.phase.value for e in p.events if isinstance(e, PhaseMark))
    return out


@pytest.mark.parametrize("k", range(5, 41))
def test_the_last_k_lines_of_a_failed_boot_are_a_failed_boot(k: int) -> None:
    """Where the tail holds the line that decided the failure (and, for a kind the phase decides,
    a line naming that phase), the fragment is a failed boot of the same engine and kind. Where
    the cause was printed above the cut (a wrapper's "see root cause above", a usage text without
    its error line), the fragment is still a failed boot of the same engine but must not claim
    another cause (crash/unknown, the wrapper's hint says the cause is above), or no boot when it
    holds only a usage text."""
    checked = lenient = 0
    for path, engine, kind, message, phase in failed_fixtures():
        lines = [ln for ln in bare_text(path).split("\n") if ln.strip()]
        tail = "\n".join(lines[-k:]) + "\n"
        boots = replay_text(tail)
        where = f"{path.relative_to(FIX)}, last {k} lines"
        in_view = message[:80] in tail and (kind not in PHASE_DECIDED or phase in _phases_in(tail))
        if not in_view:
            if not boots:  # only a usage text without its error line (a restart loop's tail)
                assert kind == "bad_args", f"{where}: no boot"
                continue
            last = boots[-1]
            assert (last.engine.value, last.status) == (engine, BootStatus.FAILED), where
            assert last.failure is not None
            assert last.failure.kind.value in (kind, "crash", "unknown"), where
            if "root cause above" in last.failure.message.lower():
                assert last.failure.hint is not None
                assert "include the lines before it" in last.failure.hint, where
            lenient += 1
            continue
        checked += 1
        assert boots, f"{where}: no boot"
        last = boots[-1]
        assert (last.engine.value, last.status) == (engine, BootStatus.FAILED), where
        assert last.failure is not None
        assert last.failure.kind.value == kind, where
        assert last.failure.phase is not None
        assert last.failure.phase.value == phase, where
    assert checked >= 25  # of 44 failed fixtures, at K=5 already (1229 of 1584 cuts over K=5..40)
    assert lenient <= 20
