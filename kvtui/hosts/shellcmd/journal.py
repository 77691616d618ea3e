"""The journald commands: follow a unit, its boot's start, uptime, search, last cursor."""

from __future__ import annotations

from kvtui.hosts.shellcmd.base import CONTROL_PREFIX, guard, q, sh_c, sudo_prefix

# Fields asked of `journalctl -o json` (cursor and timestamps always come with it).
JOURNAL_FIELDS: tuple[str, ...] = (
    "MESSAGE",
    "_PID",
    "SYSLOG_IDENTIFIER",
    "PRIORITY",
    "_SYSTEMD_INVOCATION_ID",
    "INVOCATION_ID",
    "MESSAGE_ID",
    "UNIT",
    "_SYSTEMD_UNIT",
)
# systemd's catalog ids of the manager's "Starting …" / "Started …" lines.
MESSAGE_ID_UNIT_STARTING = "7d4958e842da4a758f6c1cdc7b36dcc5"
MESSAGE_ID_UNIT_STARTED = "39f53479d3a045ac8e11786248231fbf"
_FIELDS_ARG = "--output-fields=" + q(",".join(JOURNAL_FIELDS))


def journal_follow(
    unit: str,
    *,
    cursor: str | None = None,
    after_cursor: str | None = None,
    lines: int | None = None,
    sudo: bool = False,
) -> str:
    """``journalctl -u UNIT -o json -f`` from a cursor (inclusive), after a cursor (exclusive),
    the last ``lines`` entries (``0``: only new ones) or, with none of these, every entry.
    ``--all``: without it ``-o json`` prints a field over 4096 bytes as null (SGLang's
    ``server_args=ServerArgs(…)`` line is longer)."""
    args = [
        "journalctl", "-u", q(unit), "-o", "json", _FIELDS_ARG,
        "--all", "--no-pager", "-q", "-f",
    ]
    # `-f` alone shows only the last 10 entries, even from a cursor: --no-tail shows them all
    if after_cursor is not None:
        args += ["--no-tail", "--after-cursor=" + q(after_cursor)]
    elif cursor is not None:
        args += ["--no-tail", "--cursor=" + q(cursor)]
    elif lines is not None:
        args.append(f"-n {int(lines)}")
    else:
        args.append("--no-tail")
    return guard(sudo_prefix(sudo) + " ".join(args))


JOURNAL_HEAD_ENTRIES = 50  # entries of the invocation's head looked at for its start


def journal_boot_start(unit: str, *, sudo: bool = False, journalctl: str | None = None,
                       systemctl: str | None = None) -> str:
    """One round trip that prints where the unit's current boot starts in its journal:

    ``invocation=<id>`` then, when found, JSON entries (the first one's ``__CURSOR`` is the
    start): the first ``JOURNAL_HEAD_ENTRIES`` entries of the current invocation
    (``_SYSTEMD_INVOCATION_ID`` / ``INVOCATION_ID``, with ``MESSAGE`` and ``MESSAGE_ID``: does the
    head hold the start?) and ``older=yes|no`` (does the journal hold any entry older than the
    invocation's first: ``no`` and no start in its head = the start was vacuumed); or else the
    manager's last ``Starting``/``Started`` line for the unit. ``journalctl``/``systemctl``: the
    tools' words (already quoted; the local backend's), else ``[sudo -n] journalctl``."""
    sp = sudo_prefix(sudo)
    jc = journalctl if journalctl is not None else sp + "journalctl"
    sc = systemctl if systemctl is not None else sp + "systemctl"
    u = q(unit)
    script = f"""id=$({sc} show -p InvocationID --value {u} 2>/dev/null)
echo "invocation=$id"
c=
case "$id" in *[!0-9a-f]*|'') ;; *)
  c=$({jc} -o json --output-fields=_PID,MESSAGE_ID,MESSAGE --all -q --no-pager \\
      _SYSTEMD_INVOCATION_ID="$id" + INVOCATION_ID="$id" 2>/dev/null | head -n {JOURNAL_HEAD_ENTRIES}) ;;
esac
if [ -n "$c" ]; then
  t=$(printf '%s\\n' "$c" | head -n 1 | sed -n 's/.*"__REALTIME_TIMESTAMP":"\\([0-9]*\\)".*/\\1/p')
  o=$({jc} -o json --output-fields=_PID -q --no-pager 2>/dev/null | head -n 1 \\
      | sed -n 's/.*"__REALTIME_TIMESTAMP":"\\([0-9]*\\)".*/\\1/p')
  case "$t$o" in ''|*[!0-9]*) ;; *) if [ "$o" -lt "$t" ]; then echo older=yes; else echo older=no; fi ;; esac
else
  c=$({jc} -o json --output-fields=_PID,MESSAGE_ID -q --no-pager -r -n 1 \\
      UNIT={u} MESSAGE_ID={MESSAGE_ID_UNIT_STARTING} + UNIT={u} MESSAGE_ID={MESSAGE_ID_UNIT_STARTED} 2>/dev/null)
fi
[ -n "$c" ] && printf '%s\\n' "$c"
exit 0"""
    return sh_c(script)


# The boot's ready line, every follower's one list (plain text, also a regex): the startup part of a
# server up for days ends a margin after it.
READY_PATTERNS: tuple[str, ...] = (
    r"The server is fired up and ready to roll",  # SGLang
    r"Application startup complete",  # vLLM (uvicorn; SGLang prints it too, a few lines before its own)
)
JOURNAL_READY_RE = "|".join(READY_PATTERNS)
JOURNAL_STARTUP_MARGIN = 300  # entries read after the ready line
JOURNAL_STARTUP_CAP = 32 * 1024 * 1024  # bytes of JSON at most in the startup part
JOURNAL_TAIL_LINES = 10_000  # the recent tail read after a gap
JOURNAL_GAP_COUNT_MAX = 50_000  # a gap of more lines is not counted (1M entries: ~4 s of journalctl)
# A field of one `journalctl -o json` line (mawk, gawk, busybox awk): f("__CURSOR").
_AWK_FIELD = (r'function f(n) { if (match($0, "\"" n "\":\"[^\"]*\"")) '
              r'return substr($0, RSTART + length(n) + 4, RLENGTH - length(n) - 5); return "-" }')
# m: the entries still owed after the ready line (a resumed part: the margin less those delivered),
# M: the whole margin, owed again after a later ready line (SGLang: uvicorn's, then its own); a
# resumed part with nothing owed stops before its first entry (no cursor of its own: "-", the
# script goes on from the resume's cursor)
_AWK_STARTUP = _AWK_FIELD + r"""
BEGIN { if ((r && m <= 0) || cap <= 0) s = 1 }
s { x = f("__REALTIME_TIMESTAMP"); e = 1; exit }
{ print; c = f("__CURSOR"); t = f("__REALTIME_TIMESTAMP"); b += length($0) + 1 }
/""" + JOURNAL_READY_RE + r"""/ { r = 1; k = 0; m = M; next }
r { k++ }
(r && k >= m) || b >= cap { s = 1 }
END { if (c == "") c = "-"; if (t == "") t = "-"; print c, t, e + 0, (e ? x : "-") > "/dev/stderr" }"""
_AWK_PAIR = _AWK_FIELD + r"""
{ printf "%s %s ", f("__CURSOR"), f("__REALTIME_TIMESTAMP") }"""


def journal_uptime(
    unit: str,
    *,
    cursor: str | None = None,
    after_cursor: str | None = None,
    after_ts: int | None = None,
    ready: bool = False,
    after_ready: int = 0,
    read_bytes: int = 0,
    startup_done: tuple[str, str, str] | None = None,
    journalctl: str | None = None,
    sudo: bool = False,
    margin: int = JOURNAL_STARTUP_MARGIN,
    cap: int = JOURNAL_STARTUP_CAP,
    tail: int = JOURNAL_TAIL_LINES,
) -> str:
    """The current boot of a unit up for days, in constant time: the startup part whole, one gap,
    the recent tail, then ``-f``. A ``sh`` script (not guarded: ``guard(sh_c(...))`` or run it
    with ``sh -c``) that prints ``journalctl -o json`` lines and two control lines
    (``CONTROL_PREFIX``):

    1. the startup part: from ``cursor`` (inclusive) or ``after_cursor`` through the ready line
       (``JOURNAL_READY_RE``) plus ``margin`` entries, at most ``cap`` bytes of JSON (awk stops
       journalctl); ``ready``/``after_ready``/``read_bytes``: where a resumed startup part was
       (``after_ts``: ``after_cursor``'s time; the part ends there when nothing more is owed).
       Then ``startup stop=0|1 cursor=C1 ts=T1 next=TS``: ``stop=0`` the journal ended first (the
       script follows after C1: no gap); ``next`` the time of the first entry after it.
       ``startup_done`` = (C1, T1, next): that part was read already (a resume): skip it.
    2. the tail's first two entries (``-n tail+1``): when the tail begins after C1, ``gap
       after=C1 before=C2 lines=N|- first=TS last=TS`` (N counted on the host up to
       ``JOURNAL_GAP_COUNT_MAX``, else ``-``), then ``journalctl -f`` from C2 (the tail, then new entries);
       else ``-f`` after C1 (the rest is short)."""
    jc = journalctl if journalctl is not None else sudo_prefix(sudo) + "journalctl"
    u = q(unit)
    out = "-o json " + _FIELDS_ARG + " --all --no-pager -q"  # as journal_follow
    mark = "\\000" + CONTROL_PREFIX[1:].decode()
    follow_after = f'exec {jc} -u {u} {out} -f --no-tail --after-cursor="$c1"'
    if startup_done is not None:
        c1, t1, nx = startup_done
        head = f"c1={q(c1)}; t1={q(t1)}; nx={q(nx)}\n"
    else:
        if after_cursor is not None:
            so = "--after-cursor=" + q(after_cursor)
        elif cursor is not None:
            so = "--cursor=" + q(cursor)
        else:
            raise ValueError("journal_uptime: a start cursor is needed")
        awk = (f"awk -v m={int(margin) - int(after_ready)} -v M={int(margin)} -v cap={int(cap) - int(read_bytes)} "
               f"-v r={1 if ready else 0} {q(_AWK_STARTUP)}")
        # a resumed part that printed nothing (nothing owed, or no entry yet) ends at the resume's cursor
        t0 = str(int(after_ts)) if after_ts is not None else "-"
        resumed = (f'if [ "$c1" = - ]; then c1={q(after_cursor)}; t1={t0}; fi\n'
                   if after_cursor is not None else "")
        head = f"""exec 3>&1
set -- $({jc} -u {u} {so} {out} 2>/dev/null | {awk} 2>&1 >&3)
c1=${{1:--}}; t1=${{2:--}}; stop=${{3:-0}}; nx=${{4:--}}
{resumed}printf '{mark}startup stop=%s cursor=%s ts=%s next=%s\\n' "$stop" "$c1" "$t1" "$nx"
if [ "$c1" = - ]; then exec {jc} -u {u} {out} -f --no-tail {so}; fi
if [ "$stop" != 1 ]; then {follow_after}; fi
"""
    script = head + f"""set -- $({jc} -u {u} -n {int(tail) + 1} -o json --output-fields=_PID -q --no-pager \\
  2>/dev/null | head -n 2 | awk {q(_AWK_PAIR)})
case "$2$t1" in ''|*[!0-9]*) {follow_after} ;; esac
if [ $# -lt 4 ] || [ "$2" -le "$t1" ]; then {follow_after}; fi
n=$({jc} -u {u} --after-cursor="$c1" --until=@$(($2 / 1000000)).$(printf %06d $(($2 % 1000000))) -q -o cat \\
  2>/dev/null | head -n {JOURNAL_GAP_COUNT_MAX + 1} | wc -l)
if [ "$n" -gt {JOURNAL_GAP_COUNT_MAX} ]; then n=-; fi
printf '{mark}gap after=%s before=%s lines=%s first=%s last=%s\\n' "$c1" "$3" "$n" "$nx" "$2"
exec {jc} -u {u} {out} -f --no-tail --cursor="$3"
"""
    return script


def journal_main_cmdline(unit: str, *, sudo: bool = False, systemctl: str | None = None) -> str:
    """``pid=<MainPID>`` then that process's ``/proc/PID/cmdline`` (NUL-separated arguments)."""
    sp = sudo_prefix(sudo)
    sc = systemctl if systemctl is not None else sp + "systemctl"
    script = f"""p=$({sc} show -p MainPID --value {q(unit)} 2>/dev/null)
echo "pid=$p"
case "$p" in ''|0|*[!0-9]*) exit 0 ;; esac
{sp}cat /proc/"$p"/cmdline 2>/dev/null
exit 0"""
    return sh_c(script)


def journal_search(
    unit: str,
    pattern: str,
    *,
    after_cursor: str | None = None,
    since_us: int | None = None,
    until_us: int | None = None,
    ignore_case: bool = True,
    newest: bool = False,
    limit: int = 100,
    journalctl: str | None = None,
    sudo: bool = False,
) -> str:
    """``journalctl --grep`` (PCRE2 ``pattern``) over the unit's entries after ``after_cursor``
    (or from ``since_us``) through ``until_us`` (µs since the epoch, inclusive), as JSON: the
    first ``limit`` matches, or with ``newest`` the last ``limit`` (newest first)."""
    jc = journalctl if journalctl is not None else sudo_prefix(sudo) + "journalctl"
    args = [jc, "-u", q(unit), "-o", "json", _FIELDS_ARG, "--all", "-q", "--no-pager",
            "--grep=" + q(pattern), "--case-sensitive=" + ("no" if ignore_case else "yes")]
    if after_cursor is not None and not newest:
        args.append("--after-cursor=" + q(after_cursor))
    elif since_us is not None:
        args.append(f"--since=@{_epoch(since_us)}")
    if until_us is not None:
        args.append(f"--until=@{_epoch(until_us)}")
    if newest:
        args.append("-r")
    return " ".join(args) + f" | head -n {int(limit)}"


def _epoch(us: int) -> str:
    return f"{int(us) // 1_000_000}.{int(us) % 1_000_000:06d}"


def journal_last_cursor(unit: str, *, sudo: bool = False) -> str:
    """The unit's newest entry (JSON with ``__CURSOR``), or nothing when it has none."""
    return f"{sudo_prefix(sudo)}journalctl -u {q(unit)} -o json --output-fields=_PID -q --no-pager -n 1"
