"""Docker: inspect, the container log's head, tail and search."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kvtui.hosts.shellcmd.base import guard, q, sh_c, sudo_prefix
from kvtui.hosts.shellcmd.files import SERVER_START_PATTERNS, STARTUP_CAP_BYTES, STARTUP_MARGIN_LINES, _grep_flags
from kvtui.hosts.shellcmd.journal import READY_PATTERNS

_DOCKER_TS_RE = re.compile(r"^[0-9T:.+Z-]{10,40}$")


def docker_inspect(container: str, fmt: str, *, sudo: bool = False) -> str:
    """``docker inspect -f FMT CONTAINER`` (``fmt`` e.g. ``{{.State.StartedAt}}``)."""
    return f"{sudo_prefix(sudo)}docker inspect -f {q(fmt)} {q(container)}"


def docker_logs_follow(container: str, *, since: str | None = None, tail: int | None = None,
                       sudo: bool = False) -> str:
    """``docker logs -f --timestamps`` from an RFC 3339 ``since`` (inclusive) or the last
    ``tail`` lines; the container's stderr is merged in order."""
    args = [f"{sudo_prefix(sudo)}docker", "logs", "-f", "--timestamps"]
    if since is not None:
        if not _DOCKER_TS_RE.match(since):
            raise ValueError(f"not a docker timestamp: {since!r}")
        args += ["--since", q(since)]
    elif tail is not None:
        args += ["--tail", str(int(tail))]
    args.append(q(container))
    return guard(" ".join(args) + " 2>&1")


# The current run of a container up for days (issue 21): the head of its log since ``StartedAt``
# (the boot's start) through the ready line + a margin, capped, stopped on the host; the last
# ``DOCKER_TAIL_LINES`` lines; one gap between (``since``/``until``, searched on the host).
DOCKER_TAIL_LINES = 10_000
DOCKER_HEAD_MARK = b"\x00kvtui:dhead "  # ``\0kvtui:dhead RC``: the head is read (RC: why it ended)
DOCKER_CMD_MARK = b"\x00kvtui:dcmd "  # ``\0kvtui:dcmd "PATH" [ARGS]``: the container's command (start missing)
DOCKER_HEAD_END = 0  # the log's end (the boot still starts, or failed)
DOCKER_HEAD_CAP = 3  # the cap (no ready line within it)
DOCKER_HEAD_READY = 4  # the ready line + the margin
DOCKER_HEAD_MISSING = 5  # a serving line before any start: the log driver rotated the start away
# a serving line (SGLang Decode/Prefill batch, vLLM's stats), as an awk ERE
SERVING_PATTERNS: tuple[str, ...] = (r"] (Decode|Prefill) batch", r"KV cache usage: ", r"Avg prompt throughput: ")

_DOCKER_HEAD_AWK = """{{ n += length($0) + 1; if (n > cap) exit 3
  if (!s) {{ if ($0 ~ /{start}/) s = 1; else if ($0 ~ /{serving}/) exit 5 }}
  print
  if (r < 0) {{ if (s && $0 ~ /{ready}/) r = 0 }} else if (++r >= m) exit 4 }}"""


def _docker(sudo: bool, docker: Sequence[str] | None) -> str:
    return sudo_prefix(sudo) + (" ".join(q(x) for x in docker) if docker else "docker")


def _docker_since(stamp: str) -> str:
    if not _DOCKER_TS_RE.match(stamp):
        raise ValueError(f"not a docker timestamp: {stamp!r}")
    return q(stamp)


def docker_head_script(container: str, since: str, *, cap: int = STARTUP_CAP_BYTES,
                       margin: int = STARTUP_MARGIN_LINES, ready: int = -1, started: bool = False,
                       sudo: bool = False, docker: Sequence[str] | None = None) -> str:
    """sh lines: the head of the container's log from ``since`` (inclusive) — its lines, then
    ``\0kvtui:dhead RC`` (``DOCKER_HEAD_*``: why it stopped). ``docker logs`` has no byte limit:
    awk stops at the ready line + ``margin`` lines, at ``cap`` bytes, or at a serving line before
    any start (``\0kvtui:dcmd`` then gives the container's command), and the pipe's SIGPIPE stops
    docker — the uptime is never read. ``ready``/``started``: where a head cut by a drop was (lines
    after the ready line, -1 before it; a start seen)."""
    d, c = _docker(sudo, docker), q(container)
    prog = _DOCKER_HEAD_AWK.format(start="|".join(SERVER_START_PATTERNS), serving="|".join(SERVING_PATTERNS),
                                   ready="|".join(READY_PATTERNS))
    return (f"{d} logs --timestamps --since {_docker_since(since)} {c} 2>&1 | head -c {int(cap) + (1 << 20)} "
            f"| LC_ALL=C awk -v cap={int(cap)} -v m={int(margin)} -v r={int(ready)} -v s={1 if started else 0} "
            f"{q(prog)}\nrc=$?\n"
            f"if [ \"$rc\" = 5 ]; then printf '\\000kvtui:dcmd '; "
            f"{d} inspect -f {q('{{json .Path}} {{json .Args}}')} {c} 2>/dev/null || echo; fi\n"
            "printf '\\000kvtui:dhead %s\\n' \"$rc\"\n")


def docker_tail_follow(container: str, *, tail: int = DOCKER_TAIL_LINES, sudo: bool = False,
                       docker: Sequence[str] | None = None) -> str:
    """``docker logs -f --timestamps --tail N`` (one simple command: ``guard``'s follower)."""
    return f"{_docker(sudo, docker)} logs -f --timestamps --tail {int(tail)} {q(container)} 2>&1"


def docker_catch_up(container: str, since: str | None, *, tail: int = DOCKER_TAIL_LINES,
                    cap: int = STARTUP_CAP_BYTES, margin: int = STARTUP_MARGIN_LINES, ready: int = -1,
                    started: bool = False, sudo: bool = False) -> str:
    """The current run of a container up for days: its log's head from ``since`` (``StartedAt``;
    None: the head is read already) through the ready line + ``margin`` (``docker_head_script``),
    then the last ``tail`` lines followed on (``docker logs -f --tail``), guarded."""
    prelude = "" if since is None else docker_head_script(container, since, cap=cap, margin=margin, ready=ready,
                                                          started=started, sudo=sudo)
    return guard(docker_tail_follow(container, tail=tail, sudo=sudo), prelude=prelude)


def docker_search_script(container: str, since: str, until: str | None, pattern: str, *, regex: bool = False,
                  ignore_case: bool = True, context: int = 0, limit: int = 100, newest: bool = False,
                  max_bytes: int = 4 * 1024 * 1024, sudo: bool = False,
                  docker: Sequence[str] | None = None) -> str:
    """Search a gap of a container's log on the host: ``docker logs --timestamps --since A --until B``
    (both inclusive in docker), the lines strictly between A and B (RFC 3339 stamps as docker prints
    them, fixed width: compared as strings) through ``LC_ALL=C grep -n`` (``-F``/``-E``, ``-i``,
    ``-C``; the first ``limit`` matches — grep's exit stops docker — or, ``newest``, the last).
    Prints grep's lines (``N:STAMP TEXT`` a match, ``N-STAMP TEXT`` context, ``--``), at most
    ``max_bytes``; docker's own errors (lines without a stamp) go to stderr."""
    d, c = _docker(sudo, docker), q(container)
    flags, cut = _grep_flags(["-n"], regex=regex, ignore_case=ignore_case, context=context, limit=limit,
                             newest=newest)
    until_arg = f" --until {_docker_since(until)}" if until else ""
    prog = ('$1 !~ /^[0-9][0-9][0-9][0-9]-/ { print > "/dev/stderr"; next } '
            '$1 > a && (b == "" || $1 < b)')
    return (f"{d} logs --timestamps --since {_docker_since(since)}{until_arg} {c} 2>&1 "
            f"| LC_ALL=C awk -v a={q(since)} -v b={q(until or '')} {q(prog)} "
            f"| LC_ALL=C grep -a {' '.join(flags)} -e {q(pattern)}{cut} | head -c {int(max_bytes)}\nexit 0")


def docker_search(container: str, since: str, until: str | None, pattern: str, **kw: Any) -> str:
    """``docker_search_script`` as one ``sh -c`` command (SSH)."""
    return sh_c(docker_search_script(container, since, until, pattern, **kw))


def remote_now_rfc3339() -> str:
    return "date -u +%Y-%m-%dT%H:%M:%S.%NZ"
