"""Every shell command kvtui runs on a host, built in one place with ``shlex.quote``.

Commands are POSIX ``sh`` strings (the login shell of an SSH session, or ``sh -c`` locally).
Config values (units, paths, containers, cursors) only ever reach the shell as single quoted
words, so quotes, ``;``, ``$()``, backticks or newlines in them are data, never commands. The only
strings that run as given are the operator's own ``start_command`` / ``stop_command``.

**Followers die with their channel.** OpenSSH does not deliver SSH "signal" requests for root
logins (style.md §7) and closing a channel without a PTY leaves a quiet ``journalctl -f`` running
forever. Every long-lived command (``journalctl -f``, ``tail -F``, ``nvidia-smi -lms``, ``docker
logs -f``) is therefore wrapped by ``guard()``: a small ``sh`` script that runs the follower in the
background and a watcher that blocks reading the channel's stdin; when the channel closes (quit,
disconnect, network cut seen by sshd) stdin reaches EOF and the watcher kills the follower. When
the follower exits by itself, the wrapper exits with its status and takes the watcher down.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# ---------------------------------------------------------------------------------------------
# Quoting helpers
# ---------------------------------------------------------------------------------------------

q = shlex.quote


def qpath(path: str) -> str:
    """Quote a remote path; a leading ``~/`` stays the login's home (``"$HOME"/'rest'``)."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + q(path[2:])
    return q(path)


def sudo_prefix(sudo: bool) -> str:
    """``sudo -n`` (never prompts: a missing sudoers rule fails fast instead of hanging)."""
    return "sudo -n " if sudo else ""


def sh_c(script: str) -> str:
    """Run ``script`` with ``sh`` whatever the login shell is."""
    return "sh -c " + q(script)


# ---------------------------------------------------------------------------------------------
# The follower guard
# ---------------------------------------------------------------------------------------------

GUARD_MARK = "# kvtui-guard"
_GUARD = """{prelude}exec 3<&0
{cmd} </dev/null &
p=$!
( while read -r _ <&3; do :; done; kill -TERM "$p" 2>/dev/null ) >/dev/null 2>&1 &
w=$!
exec 3<&-
wait "$p"; r=$?
kill "$w" 2>/dev/null
exit "$r" """ + GUARD_MARK


def guard(command: str, prelude: str = "") -> str:
    """Wrap a long-lived ``command`` (one simple command, so ``$!`` is its PID) so it dies when
    the channel's stdin closes. ``prelude`` (sh lines) runs first, e.g. to emit control lines."""
    if prelude and not prelude.endswith("\n"):
        prelude += "\n"
    return sh_c(_GUARD.format(prelude=prelude, cmd=command))


def unwrap_guard(command: str) -> str:
    """The follower inside a ``guard()`` string (for fakes and tests); else ``command``."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if len(words) == 3 and words[:2] == ["sh", "-c"] and words[2].endswith(GUARD_MARK):
        body = words[2]
        end = body.find(" </dev/null &\np=$!")
        start = body.rfind("exec 3<&0\n", 0, end) if end >= 0 else -1
        if start >= 0:  # the command may span lines (``guard(sh_c(script))``)
            return body[start + len("exec 3<&0\n") : end]
    if len(words) == 3 and words[:2] == ["sh", "-c"]:
        return words[2]
    return command


# ---------------------------------------------------------------------------------------------
# journald
# ---------------------------------------------------------------------------------------------

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
_INVOCATION_RE = re.compile(r"^[0-9a-f]{32}$")


def journal_follow(
    unit: str,
    *,
    cursor: str | None = None,
    after_cursor: str | None = None,
    lines: int | None = None,
    sudo: bool = False,
    fields: Sequence[str] = JOURNAL_FIELDS,
) -> str:
    """``journalctl -u UNIT -o json -f`` from a cursor (inclusive), after a cursor (exclusive),
    the last ``lines`` entries (``0``: only new ones) or, with none of these, every entry.
    ``--all``: without it ``-o json`` prints a field over 4096 bytes as null (SGLang's
    ``server_args=ServerArgs(…)`` line is longer)."""
    args = [
        "journalctl", "-u", q(unit), "-o", "json", "--output-fields=" + q(",".join(fields)),
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
    fields: Sequence[str] = JOURNAL_FIELDS,
    margin: int = JOURNAL_STARTUP_MARGIN,
    cap: int = JOURNAL_STARTUP_CAP,
    tail: int = JOURNAL_TAIL_LINES,
    count_max: int = JOURNAL_GAP_COUNT_MAX,
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
       ``count_max``, else ``-``), then ``journalctl -f`` from C2 (the tail, then new entries);
       else ``-f`` after C1 (the rest is short)."""
    jc = journalctl if journalctl is not None else sudo_prefix(sudo) + "journalctl"
    u = q(unit)
    out = "-o json --output-fields=" + q(",".join(fields)) + " --all --no-pager -q"  # as journal_follow
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
  2>/dev/null | head -n {int(count_max) + 1} | wc -l)
if [ "$n" -gt {int(count_max)} ]; then n=-; fi
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
    fields: Sequence[str] = JOURNAL_FIELDS,
) -> str:
    """``journalctl --grep`` (PCRE2 ``pattern``) over the unit's entries after ``after_cursor``
    (or from ``since_us``) through ``until_us`` (µs since the epoch, inclusive), as JSON: the
    first ``limit`` matches, or with ``newest`` the last ``limit`` (newest first)."""
    jc = journalctl if journalctl is not None else sudo_prefix(sudo) + "journalctl"
    args = [jc, "-u", q(unit), "-o", "json", "--output-fields=" + q(",".join(fields)), "--all", "-q", "--no-pager",
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


# ---------------------------------------------------------------------------------------------
# systemd
# ---------------------------------------------------------------------------------------------

_PROP_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


def systemctl_show(unit: str, props: Iterable[str], *, sudo: bool = False, value: bool = False) -> str:
    """``systemctl show -p A -p B UNIT`` (``A=…`` lines; ``--value`` prints bare values)."""
    plist = list(props)
    for p in plist:
        if not _PROP_RE.match(p):
            raise ValueError(f"not a systemd property name: {p!r}")
    ps = " ".join(f"-p {p}" for p in plist)
    return f"{sudo_prefix(sudo)}systemctl show {ps}{' --value' if value else ''} {q(unit)}"


def systemctl(verb: str, unit: str | None = None, *, sudo: bool = False) -> str:
    """``systemctl daemon-reload`` / ``restart UNIT`` / ``start`` / ``stop`` / ``is-active`` …"""
    if verb not in ("daemon-reload", "restart", "start", "stop", "is-active", "reset-failed", "cat", "status"):
        raise ValueError(f"unsupported systemctl verb {verb!r}")
    if verb == "daemon-reload":
        return f"{sudo_prefix(sudo)}systemctl daemon-reload"
    if unit is None:
        raise ValueError(f"systemctl {verb} needs a unit")
    extra = " --no-pager" if verb in ("cat", "status") else ""
    return f"{sudo_prefix(sudo)}systemctl {verb}{extra} {q(unit)}"


def daemon_reload(*, sudo: bool = False) -> str:
    return systemctl("daemon-reload", sudo=sudo)


def restart_unit(unit: str, *, sudo: bool = False) -> str:
    return systemctl("restart", unit, sudo=sudo)


# ---------------------------------------------------------------------------------------------
# Log files: the last server start however far back, then `tail -F` from a byte offset
# ---------------------------------------------------------------------------------------------

# Lines that open a server's boot in a raw log (extended regex, matched by `grep -E`).
SERVER_START_PATTERNS: tuple[str, ...] = (
    r"server_args=ServerArgs\(",  # SGLang
    r"vLLM API server version",  # vLLM (first line)
    r"non-default args: \{",  # vLLM >= 0.10 (second line)
    r"args: Namespace\(",  # vLLM < 0.10
)
# Lines only a server that serves prints (extended regex): SGLang's batch lines, vLLM's periodic
# stats, an OpenAI-API access line. Without a start in the log, a running server is said to serve
# (its start rotated away) only when its recent lines show it.
SERVING_PATTERN = r'(Decode|Prefill) batch|Avg prompt throughput|KV cache usage: |"(POST|GET) /v1/'
PRIMARY_START_PATTERNS: tuple[str, ...] = (r"server_args=ServerArgs\(", r"vLLM API server version")
# the last bytes of a log scanned first for the server's start (a recent boot); else the whole file
SCAN_WINDOW_BYTES = 16 * 1024 * 1024
# In-band control lines of the file follower start with NUL (a text log never holds one).
CONTROL_PREFIX = b"\x00kvtui:"


# A server up for days (issue 21): the follower reads the boot's startup part whole, the recent tail,
# and says what lies between (a gap of N lines) instead of copying every serving line.
SGLANG_READY = READY_PATTERNS[0]
TAIL_BYTES = 1024 * 1024  # the recent tail read before following
STARTUP_CAP_BYTES = 32 * 1024 * 1024  # the startup part read whole, at most
STARTUP_MARGIN_LINES = 300  # lines after the ready line that still belong to the startup part
READY_SEARCH_BYTES = 65536  # SGLang's own ready line, searched after uvicorn's
LOCATE_MATCH_LIMIT = 50

# ``rng PATH GZ A B``: the bytes [A, B) of PATH (B empty: to its end; GZ=1: of its decompressed
# stream). GNU dd reads a byte range with large blocks (``tail -c | head -c`` pipes are several times
# slower on a 250 MB range); without it, tail/head. ``at PATH A CMD…``: CMD reads PATH from byte A
# on its own stdin — the file itself, positioned by ``dd … count=0``, no pipe (a 240 MB range:
# ``wc`` 0.07 s, against 0.7–0.9 s through a pipe on a loaded host; ``grep`` 0.4 s against 1.5 s).
_RANGE_FN = r"""export LC_ALL=C
dd=0; dd if=/dev/null of=/dev/null count=0 iflag=skip_bytes,count_bytes 2>/dev/null && dd=1
rng() {
  if [ "$2" = 1 ]; then
    if [ -n "$4" ]; then gzip -dc -- "$1" 2>/dev/null | tail -c +$(($3 + 1)) | head -c $(($4 - $3))
    else gzip -dc -- "$1" 2>/dev/null | tail -c +$(($3 + 1)); fi
  elif [ -n "$4" ]; then
    if [ "$dd" = 1 ]; then dd if="$1" bs=4M skip="$3" count=$(($4 - $3)) iflag=skip_bytes,count_bytes 2>/dev/null
    else tail -c +$(($3 + 1)) -- "$1" | head -c $(($4 - $3)); fi
  elif [ "$dd" = 1 ]; then dd if="$1" bs=4M skip="$3" iflag=skip_bytes 2>/dev/null
  else tail -c +$(($3 + 1)) -- "$1"; fi
}
at() {
  f_=$1; a_=$2; shift 2
  if [ "$dd" = 1 ]; then { dd bs=4M skip="$a_" iflag=skip_bytes count=0 2>/dev/null; "$@"; } < "$f_"
  else tail -c +$((a_ + 1)) -- "$f_" | "$@"; fi
}
"""


def _sibling_list() -> str:
    """sh lines setting ``sibs`` to the rotated copies of ``$f`` (``.1``, ``.1.gz``, ``.2.gz``,
    logrotate's dateext ``-20260601[.gz]``) as suffixes, newest first (mtime, then version order)."""
    return r"""sibs=$(for s in "$f".[0-9]* "$f"-[0-9]*; do
  [ -f "$s" ] || continue
  x=${s#"$f"}
  case "$x" in *[!A-Za-z0-9._-]*) continue ;; esac
  printf '%s %s\n' "$(stat -L -c %Y -- "$s")" "$x"
done | sort -k1,1nr -k2,2V | cut -d' ' -f2)
"""


def _self_safe(pattern: str) -> str:
    """An extended regex that matches what ``pattern`` matches but not its own text (``pgrep -f``
    would otherwise find the shell that runs it): ``\\.`` → ``[.]``, a space → ``[ ]``."""
    return pattern.replace("\\.", "[.]").replace(" ", "[ ]")


def file_locate(path: str, *, pid_file: str | None = None, recent: int = SCAN_WINDOW_BYTES,
                tail_bytes: int = TAIL_BYTES, cap: int = STARTUP_CAP_BYTES,
                margin: int = STARTUP_MARGIN_LINES) -> str:
    """One round trip that says where the current boot's parts are in a log file (issue 21).

    Prints ``missing``, or ``stat INODE SIZE`` then:

    - the server starts found (``m OFFSET TEXT``, up to ``LOCATE_MATCH_LIMIT``, text cut): those
      of ``path`` — the last ``recent`` bytes first (a recent boot), else the whole file (one
      ``grep``, measured faster than a chunked scan backwards for a start near the head) — or,
      when it has none, those of its newest rotated copy that has one, after ``in SUFFIX GZ SIZE``
      (``SIZE`` uncompressed);
    - ``sibs SUFFIX…``: the rotated copies, newest first;
    - ``ready END``: where the startup part ends: the ready line after the last start (SGLang's
      own after uvicorn's) plus ``margin`` lines, or the start + ``cap`` (at a line end), or the
      end of that file when it never got ready;
    - ``tail T``: where the recent tail of ``path`` begins (a line start, ``tail_bytes`` before
      its end, never before the startup part's end in ``path``);
    - without any start: ``pid PID LSTART`` and ``cmd BASE64`` (``/proc/PID/cmdline``) of the
      running server — the pid file's, else the oldest process matching
      ``ENGINE_PROCESS_PATTERN``."""
    spat = "|".join(SERVER_START_PATTERNS)
    rpat = "|".join(READY_PATTERNS)
    pf = qpath(pid_file) if pid_file else "''"
    script = _RANGE_FN + f"""f={qpath(path)}; recent={int(recent)}; tb={int(tail_bytes)}; cap={int(cap)}
mg={int(margin)}; spat={q(spat)}; rpat={q("(" + rpat + ").*")}; sgready={q(SGLANG_READY + ".*")}
pf={pf}; epat={q(_self_safe(ENGINE_PROCESS_PATTERN))}
set -- $(stat -L -c '%i %s' -- "$f" 2>/dev/null)
if [ $# -ne 2 ]; then echo missing; exit 0; fi
ino=$1; size=$2
echo "stat $ino $size"
starts() {{ grep -a -b -E "$spat" | cut -c1-300 | tail -n {LOCATE_MATCH_LIMIT}; }}
m=
if [ "$size" -gt "$recent" ]; then
  m=$(at "$f" $((size - recent)) starts | awk -F: -v b=$((size - recent)) -v s="$size" \\
      'BEGIN {{ OFS = ":" }} {{ $1 = $1 + b; if ($1 < s) print }}')
fi
[ -z "$m" ] && m=$(starts < "$f" | awk -F: -v s="$size" '$1 < s')
{_sibling_list()}echo "sibs" $sibs
sp="$f"; gz=0; end=$size
if [ -z "$m" ]; then
  for x in $sibs; do
    s="$f$x"; g=0; case "$x" in *.gz) g=1 ;; esac
    if [ "$g" = 1 ]; then m=$(rng "$s" 1 0 | starts); else m=$(starts < "$s"); fi
    if [ -n "$m" ]; then
      sp=$s; gz=$g
      if [ "$g" = 1 ]; then end=$(rng "$s" 1 0 | wc -c); else end=$(stat -L -c %s -- "$s"); fi
      echo "in $x $g $end"; break
    fi
  done
fi
if [ -n "$m" ]; then
  printf '%s\\n' "$m" | sed 's/^/m /; s/:/ /'
  st=${{m##*
}}; st=${{st%%:*}}
  lim=$((st + cap)); [ "$lim" -gt "$end" ] && lim=$end
  r=$(rng "$sp" "$gz" "$st" "$lim" | grep -a -b -o -m 1 -E "$rpat" | head -n 1)
  if [ -n "$r" ]; then
    e=$((st + ${{r%%:*}})); t=${{r#*:}}; e=$((e + ${{#t}} + 1))
    case "$t" in "The server is fired up"*) ;; *)
      r=$(rng "$sp" "$gz" "$e" $((e + {READY_SEARCH_BYTES})) | grep -a -b -o -m 1 -E "$sgready" | head -n 1)
      if [ -n "$r" ]; then o=${{r%%:*}}; t=${{r#*:}}; e=$((e + o + ${{#t}} + 1)); fi ;;
    esac
    e=$((e + $(rng "$sp" "$gz" "$e" $((e + cap)) | head -n "$mg" | wc -c)))
    [ "$e" -gt "$lim" ] && e=$lim
  elif [ "$lim" -lt "$end" ]; then
    e=$((lim + $(rng "$sp" "$gz" "$lim" $((lim + 65536)) | head -n 1 | wc -c)))
  else
    e=$end
  fi
  [ "$e" -gt "$end" ] && e=$end
  echo "ready $e"
  [ "$sp" = "$f" ] && lo=$e || lo=0
else
  lo=0
  p=; [ -n "$pf" ] && [ -r "$pf" ] && read -r p < "$pf" 2>/dev/null; p=${{p%%[!0-9]*}}
  [ -n "$p" ] && [ -r /proc/"$p"/cmdline ] || p=$(pgrep -o -f "$epat" 2>/dev/null)
  if [ -n "$p" ] && [ -r /proc/"$p"/cmdline ]; then
    echo "pid $p $(ps -o lstart= -p "$p" 2>/dev/null)"
    echo "cmd $(base64 < /proc/"$p"/cmdline | tr -d '\\n')"
  fi
  echo "serves $(tail -c "$tb" -- "$f" 2>/dev/null | LC_ALL=C grep -a -c -E {q(SERVING_PATTERN)})"
fi
t=$lo
if [ $((size - tb)) -gt "$lo" ]; then
  t=$((size - tb - 1)); t=$((t + $(rng "$f" 0 "$t" $((t + 65536)) | head -n 1 | wc -c)))
  [ "$t" -gt "$size" ] && t=$size
fi
echo "tail $t"
exit 0"""
    return sh_c(script)


def _grep_flags(base: list[str], *, regex: bool, ignore_case: bool, context: int, limit: int,
                newest: bool) -> tuple[list[str], str]:
    """A gap search's grep flags and what cuts its output: the first ``limit`` matches (``-m``:
    grep's exit stops the reader) or, ``newest``, the last (``| tail``, a match and its context a
    group)."""
    ctx = max(0, int(context))
    flags = [*base, "-E" if regex else "-F"]
    if ignore_case:
        flags.append("-i")
    if ctx:
        flags.append(f"-C {ctx}")
    n = max(1, int(limit))
    if newest:
        return flags, f" | tail -n {n * (2 * ctx + 2)}"
    flags.append(f"-m {n}")
    return flags, ""


def file_search(path: str, start: int, end: int | None, pattern: str, *, gz: bool = False, regex: bool = False,
                ignore_case: bool = True, context: int = 0, limit: int = 100, newest: bool = False,
                max_bytes: int = 4 * 1024 * 1024) -> str:
    """Search the bytes [``start``, ``end``) of a log file (``end`` None: to its end; ``gz``: of
    its decompressed stream) on the host: ``grep -a -b -n`` (``-F`` or ``-E``, ``-i``, ``-C``),
    the first ``limit`` matches or, ``newest``, the last ones. Prints ``grep``'s own lines
    (``LINE:BYTE:TEXT`` for a match, ``LINE-BYTE-TEXT`` for context, ``--`` between groups; LINE
    and BYTE relative to ``start``), at most ``max_bytes``; exit 3 when the file is not there. A plain
    file is read in place from ``start`` to its end (no pipe): lines at or past ``end`` are for the
    reader to drop (``parse_file_search``)."""
    flags, cut = _grep_flags(["-a", "-b", "-n"], regex=regex, ignore_case=ignore_case, context=context,
                             limit=limit, newest=newest)
    e = "''" if end is None else str(int(end))
    a = max(0, int(start))
    grep = f"grep {' '.join(flags)} -e {q(pattern)}"
    src = f'rng "$f" 1 {a} {e} | {grep}' if gz else f'at "$f" {a} {grep}'
    script = _RANGE_FN + f"""f={qpath(path)}
[ -r "$f" ] || {{ echo "kvtui: $f: no such file" >&2; exit 3; }}
{src}{cut} | head -c {int(max_bytes)}
exit 0"""
    return sh_c(script)


def file_stat(path: str) -> str:
    """``INODE SIZE`` of a remote file, or ``missing``."""
    return sh_c(f"stat -L -c '%i %s' -- {qpath(path)} 2>/dev/null || echo missing")


def pid_watch_loop(pid_file: str, log_file: str, interval: float = 1.0) -> str:
    """sh lines that start a background loop printing ``\\0kvtui:pid PID STATE size=N age=S``
    whenever what the pid file names changes (STATE ``alive`` / ``dead``; PID ``none`` without a
    pid file; N: the log file's size then, so the reader knows which lines came before; S: the
    process's age in seconds, so the reader knows whether it started after following began). A
    zombie is dead.
    No process is started per check but ``sleep``; the loop ends within ``interval`` after the
    shell that started it (the follower's guard)."""
    return f"""pf={qpath(pid_file)}; lf={qpath(log_file)}
( last=; hz=$(getconf CLK_TCK 2>/dev/null); hz=${{hz:-100}}
  while kill -0 $$ 2>/dev/null; do
    p=; [ -r "$pf" ] && read -r p 2>/dev/null < "$pf"; p=${{p%%[!0-9]*}}
    s=dead; age=
    if [ -z "$p" ]; then s=none
    elif read -r st 2>/dev/null < /proc/"$p"/stat; then
      set -- ${{st##*") "}}
      case "$1" in Z|X|x|'') ;; *) s=alive ;; esac
      if read -r up _ 2>/dev/null < /proc/uptime; then age=$(( ${{up%%.*}} - ${{20:-0}} / hz )); fi
    fi
    if [ "$p $s" != "$last" ]; then
      sz=$(stat -L -c %s -- "$lf" 2>/dev/null)
      printf '\\000kvtui:pid %s %s size=%s age=%s\\n' "${{p:-none}}" "$s" "${{sz:-0}}" "$age"
      last="$p $s"
    fi
    sleep {interval:g}
  done ) </dev/null 2>/dev/null &
"""


PlanStep = tuple[str, str, bool, int, int | None]  # (kind "part"|"gap"|"mark", path, gz, a, b)


def _plan_lines(plan: Sequence[PlanStep], first: int) -> str:
    """sh lines that print the follower's plan (issue 21) from step ``first`` on: a ``part`` is its
    bytes [a, b) after ``\\0kvtui:seg I off=A``; a ``gap`` is counted on the host and said as
    ``\\0kvtui:gap I LINES END FIRST\\tLAST`` (END = a + its bytes; FIRST/LAST: the first 40
    characters of its first and last lines, the last only for a plain file); a ``mark`` is only
    ``\\0kvtui:seg I`` (the follower says something of its own there)."""
    out: list[str] = []
    for i, (kind, path, gz, a, b) in enumerate(plan):
        if i < first:
            continue
        p, g = qpath(path), 1 if gz else 0
        e = "''" if b is None else str(int(b))
        if kind == "part":
            out.append(f"printf '\\000kvtui:seg {i} off={int(a)}\\n'; rng {p} {g} {int(a)} {e}")
        elif kind == "gap":
            last = (f"l=$(rng {p} 0 $(({e} - 4096 > {int(a)} ? {e} - 4096 : {int(a)})) {e} | tail -n 1 | cut -c1-40 "
                    "| tr '\\t\\r\\000' '   ')" if not gz and b is not None else "l=")
            if gz:
                count = f"set -- $(rng {p} 1 {int(a)} {e} | wc -lc); n=${{1:-0}}; z=${{2:-0}}"
            else:  # lines from a to the end read in place, less those from b to that end (a small pipe)
                count = f"set -- $(at {p} {int(a)} wc -lc); n=${{1:-0}}; z=${{2:-0}}"
                if b is not None:
                    count += (f"\nif [ $(({int(a)} + z)) -gt {int(b)} ]; then "
                              f"n=$((n - $(rng {p} 0 {int(b)} $(({int(a)} + z)) | wc -l))); z={int(b) - int(a)}; fi")
            out.append(f"{count}\n"
                       f"h=$(rng {p} {g} {int(a)} {e} | head -n 1 | cut -c1-40 | tr '\\t\\r\\000' '   ')\n{last}\n"
                       f"printf '\\000kvtui:gap {i} %s %s %s\\t%s\\n' \"$n\" $(({int(a)} + z)) \"$h\" \"$l\"")
        else:
            out.append(f"printf '\\000kvtui:seg {i}\\n'")
    return "\n".join(out) + "\n" if out else ""


def file_follow(path: str, *, offset: int, inode: int | None = None, pid_file: str | None = None,
                plan: Sequence[PlanStep] = (), plan_from: int = 0, truncated: bool = False,
                copy_tail: tuple[int, str] | None = None) -> str:
    """Follow ``path`` from byte ``offset`` with ``tail -F`` semantics (rotation, truncation).

    First the rest of a ``plan`` (``_plan_lines``: the startup part, the gaps, from step
    ``plan_from``). Before following it prints control lines (prefixed ``\\0kvtui:``): when the
    file at ``path`` is not ``inode`` any more (rotated), the rest of the old file (found by
    inode in the same directory) then ``rotated`` (or ``rotated-lost`` when the old file is gone);
    when the file shrank below ``offset`` or ``truncated`` says tail saw it truncated, ``truncated``
    — or, when ``copy_tail`` = (N, MD5) and a rotated copy (``.1``, the newest dateext or ``.gz``)
    is at least ``offset`` long and its N bytes before ``offset`` have that MD5 (logrotate's
    copytruncate copy of what was followed), the copy's rest then ``copied SUFFIX``; then ``follow
    ino=I off=O``. tail's own notices (replaced / truncated / appeared) arrive in-band on the same
    stream (stderr is merged, ``LC_ALL=C``)."""
    off = max(0, int(offset))
    ino = "" if inode is None else str(int(inode))
    n, want = copy_tail if copy_tail is not None else (0, "")
    if want and not re.fullmatch(r"[0-9a-f]{32}", want):
        raise ValueError("copy_tail needs an MD5 hex digest")
    copy = ""
    if want:
        copy = _sibling_list() + f"""  n={int(n)}; want={want}
  for x in $sibs; do
    c="$f$x"; g=0; case "$x" in *.gz) g=1 ;; esac
    if [ "$g" = 1 ]; then cs=$(rng "$c" 1 0 | wc -c); else cs=$(stat -L -c %s -- "$c"); fi
    [ "$cs" -ge "$off" ] || continue
    h=$(rng "$c" "$g" $((off - n)) "$off" | md5sum | cut -c1-32)
    if [ "$h" = "$want" ]; then rng "$c" "$g" "$off"; printf '\\000kvtui:copied %s\\n' "$x"; done=1; break; fi
  done
"""
    prelude = _RANGE_FN + f"""f={qpath(path)}; off={off}; ino={ino}; trunc={1 if truncated else ''}; done=
{_plan_lines(plan, plan_from)}cur=$(stat -L -c %i -- "$f" 2>/dev/null); size=$(stat -L -c %s -- "$f" 2>/dev/null)
if [ -n "$ino" ] && [ -n "$cur" ] && [ "$cur" != "$ino" ]; then
  old=$(find "$(dirname -- "$f")" -maxdepth 1 -inum "$ino" 2>/dev/null | head -n 1)
  if [ -n "$old" ]; then tail -c +$((off + 1)) -- "$old"; printf '\\000kvtui:rotated\\n'
  else printf '\\000kvtui:rotated-lost\\n'; fi
  off=0
elif [ -n "$trunc" ] || {{ [ -n "$size" ] && [ "$size" -lt "$off" ]; }}; then
{copy}  [ -z "$done" ] && printf '\\000kvtui:truncated\\n'
  off=0
fi
printf '\\000kvtui:follow ino=%s off=%s\\n' "$cur" "$off"
"""
    if pid_file:
        prelude += pid_watch_loop(pid_file, path)
    return guard('LC_ALL=C tail -c +$((off + 1)) -F -- "$f" 2>&1', prelude=prelude)


# tail's own notices when it follows by name (GNU coreutils, LC_ALL=C).
TAIL_NEW_FILE_RE = re.compile(rb"tail: .*(?:has been replaced;  following new file|has appeared;  following new file)$")
TAIL_TRUNCATED_RE = re.compile(rb"tail: .*: file truncated$")
TAIL_OTHER_RE = re.compile(
    rb"tail: (?:.*has become inaccessible.*|cannot open .*|.*: No such file or directory|cannot follow .*|"
    rb"inotify .*|.*has been replaced with an untailable .*|.*: cannot .*)$"
)


# ---------------------------------------------------------------------------------------------
# Docker
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# GPUs
# ---------------------------------------------------------------------------------------------

_FIELD_RE = re.compile(r"^[a-z_.]+$")


def _fields(fields: Sequence[str] | str) -> str:
    if isinstance(fields, str):
        fields = [f.strip() for f in fields.split(",")]
    for f in fields:
        if not _FIELD_RE.match(f):
            raise ValueError(f"not an nvidia-smi field: {f!r}")
    return ",".join(fields)


def nvidia_smi_query_gpu(fields: Sequence[str] | str, *, interval_ms: int | None = None) -> str:
    """``nvidia-smi --query-gpu=… --format=csv,noheader,nounits`` once, or as one long-lived
    stream with ``-lms N`` (guarded)."""
    cmd = f"nvidia-smi --query-gpu={_fields(fields)} --format=csv,noheader,nounits"
    if interval_ms is None:
        return cmd
    return guard(f"{cmd} -lms {max(10, int(interval_ms))}")


def nvidia_smi_compute_apps(fields: Sequence[str] | str) -> str:
    return f"nvidia-smi --query-compute-apps={_fields(fields)} --format=csv,noheader,nounits"


# ---------------------------------------------------------------------------------------------
# Server processes
# ---------------------------------------------------------------------------------------------

PS_MARK = "--ps--"
# Engine entry points, for hosts with neither unit, pidfile nor container.
ENGINE_PROCESS_PATTERN = r"sglang\.launch_server|sglang serve|vllm serve|vllm\.entrypoints"


def server_pids_unit(unit: str, *, sudo: bool = False) -> str:
    """Prints ``MainPID=N``, ``cgroup=PID`` lines (every process in the unit's cgroup, v2 or v1),
    then ``--ps--`` and ``PID PPID`` for every process (to add MainPID's descendants)."""
    sp = sudo_prefix(sudo)
    u = q(unit)
    script = f"""{sp}systemctl show -p MainPID {u} 2>/dev/null
cg=$({sp}systemctl show -p ControlGroup --value {u} 2>/dev/null)
if [ -n "$cg" ]; then
  for base in /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/systemd; do
    if [ -d "$base$cg" ]; then
      find "$base$cg" -name cgroup.procs -exec cat {{}} + 2>/dev/null | sed 's/^/cgroup=/'; break
    fi
  done
fi
echo {PS_MARK}
ps -e -o pid=,ppid="""
    return sh_c(script)


def server_pids_pidfile(pidfile: str) -> str:
    """Prints ``MainPID=N`` from a pidfile, then ``--ps--`` and the process table."""
    script = f"""p=$(head -n 1 -- {qpath(pidfile)} 2>/dev/null | tr -cd 0-9)
[ -n "$p" ] && echo "MainPID=$p"
echo {PS_MARK}
ps -e -o pid=,ppid="""
    return sh_c(script)


def server_pids_container(container: str, *, sudo: bool = False) -> str:
    script = f"""p=$({sudo_prefix(sudo)}docker inspect -f '{{{{.State.Pid}}}}' {q(container)} 2>/dev/null)
[ -n "$p" ] && echo "MainPID=$p"
echo {PS_MARK}
ps -e -o pid=,ppid="""
    return sh_c(script)


def server_pids_by_pattern(pattern: str = ENGINE_PROCESS_PATTERN) -> str:
    script = f"""for p in $(pgrep -f {q(_self_safe(pattern))} 2>/dev/null); do echo "MainPID=$p"; done
echo {PS_MARK}
ps -e -o pid=,ppid="""
    return sh_c(script)


def pids_alive(pids: Iterable[int]) -> str:
    """Prints those of ``pids`` that are still running (a zombie, already dead but not reaped,
    does not count), one per line."""
    plist = " ".join(str(int(p)) for p in pids if int(p) > 0)
    script = f"""for p in {plist}; do
  s=$(ps -o stat= -p "$p" 2>/dev/null)
  case "$s" in ''|Z*) ;; *) echo "$p" ;; esac
done
exit 0"""
    return sh_c(script)


def proc_environ(pids: Iterable[int], *, sudo: bool = False) -> str:
    """Prints ``--pid N--``, ``--ppid P--`` (its parent, from ``/proc/N/stat``, readable by anyone)
    then the environment each process started with (``/proc/N/environ``, one ``NAME=VALUE`` a
    line), or ``--unreadable--``; ``parse_proc_environ`` and ``parse_proc_parents`` read it."""
    plist = " ".join(str(int(p)) for p in pids if int(p) > 0)
    script = f"""for p in {plist}; do
  echo "--pid $p--"
  pp=$(sed 's/.*) //' /proc/"$p"/stat 2>/dev/null | cut -d' ' -f2)
  [ -n "$pp" ] && echo "--ppid $pp--"
  {sudo_prefix(sudo)}cat /proc/"$p"/environ 2>/dev/null | tr '\\000' '\\n' || echo "--unreadable--"
done
exit 0"""
    return sh_c(script)


def parse_proc_environ(output: str) -> dict[int, dict[str, str]]:
    """{pid: {name: value}} from ``proc_environ``'s output (pids whose environment was unreadable
    or empty are left out)."""
    out: dict[int, dict[str, str]] = {}
    pid: int | None = None
    for line in output.splitlines():
        if line.startswith("--pid ") and line.endswith("--") and line[6:-2].isdigit():
            pid = int(line[6:-2])
            continue
        if pid is None or line == "--unreadable--":
            continue
        name, eq, value = line.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            out.setdefault(pid, {})[name] = value
    return out


def parse_proc_parents(output: str) -> dict[int, int]:
    """{pid: parent pid} from ``proc_environ``'s output."""
    out: dict[int, int] = {}
    pid: int | None = None
    for line in output.splitlines():
        if line.startswith("--pid ") and line.endswith("--") and line[6:-2].isdigit():
            pid = int(line[6:-2])
        elif pid is not None and line.startswith("--ppid ") and line.endswith("--") and line[7:-2].isdigit():
            out[pid] = int(line[7:-2])
    return out


def main_process(pids: Iterable[int], parents: Mapping[int, int]) -> int | None:
    """The server's main process among ``pids`` (a unit's, a container's or a pid file's process
    tree): the one whose parent is not in the set — not the smallest number, which PID wrap-around
    makes any process of the tree. Several roots: the one with most descendants in the set, then
    the first given; None for no pids."""
    ordered = list(dict.fromkeys(pids))
    if not ordered:
        return None
    inside = set(ordered)
    roots = [p for p in ordered if parents.get(p) not in inside]
    if not roots:
        return ordered[0]

    def descendants(root: int) -> int:
        n = 0
        for p in ordered:
            seen: set[int] = set()
            q = parents.get(p)
            while q is not None and q in inside and q not in seen:
                if q == root:
                    n += 1
                    break
                seen.add(q)
                q = parents.get(q)
        return n

    return max(roots, key=lambda r: (descendants(r), -ordered.index(r)))


_PIDFILE_RES = (
    re.compile(r"\$!\s*>>?\s*(\"[^\"]+\"|'[^']+'|[^\s;&|]+)"),  # … & echo $! > /run/x.pid
    re.compile(r"\$\(\s*cat\s+(\"[^\"]+\"|'[^']+'|[^\s)]+)\s*\)"),  # kill $(cat /run/x.pid)
    re.compile(r"`\s*cat\s+(\"[^\"]+\"|'[^']+'|[^\s`]+)\s*`"),
)


def pidfile_from_commands(start_command: str | None, stop_command: str | None) -> str | None:
    """The pidfile a ``start_command`` writes (``echo $! > F``) or a ``stop_command`` reads
    (``kill $(cat F)``), if either says; None otherwise."""
    for text in (start_command, stop_command):
        if not text:
            continue
        for rx in _PIDFILE_RES:
            m = rx.search(text)
            if m:
                return m.group(1).strip("'\"")
    return None


def server_pid_file(pid_file: str | None, start_command: str | None, stop_command: str | None
                    ) -> tuple[str, str] | None:
    """(path, where it comes from) of the server's pid file, for liveness and its PIDs: the
    ``pid_file`` key, else the file ``start_command`` writes (``echo $! > F``) or ``stop_command``
    reads; None when neither says (or the path holds a variable kvtui cannot resolve)."""
    if pid_file:
        return pid_file, "pid_file"
    found = pidfile_from_commands(start_command, stop_command)
    if not found or "$" in found or "`" in found:
        return None
    how = "start_command" if start_command and pidfile_from_commands(start_command, None) else "stop_command"
    return found, how


def parse_server_pids(output: str) -> set[int]:
    """The server's PIDs from one of the ``server_pids_*`` outputs: main PIDs, every cgroup
    member, and the descendants of all of them."""
    roots: set[int] = set()
    children: dict[int, list[int]] = {}
    in_ps = False
    for line in output.splitlines():
        line = line.strip()
        if line == PS_MARK:
            in_ps = True
            continue
        if in_ps:
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                children.setdefault(int(parts[1]), []).append(int(parts[0]))
            continue
        key, _, val = line.partition("=")
        if key in ("MainPID", "cgroup") and val.strip().isdigit() and int(val) > 0:
            roots.add(int(val))
    out: set[int] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid in out:
            continue
        out.add(pid)
        stack.extend(children.get(pid, ()))
    return out


# ---------------------------------------------------------------------------------------------
# Files: read, hash, atomic write, backup
# ---------------------------------------------------------------------------------------------


def read_file(path: str, *, sudo: bool = False) -> str:
    return f"{sudo_prefix(sudo)}cat -- {qpath(path)}"


def file_sha256(path: str, *, sudo: bool = False) -> str:
    """Prints the hex SHA-256 of the file (first word; read from stdin so that no file name
    escaping can prefix the digest)."""
    return f"{sudo_prefix(sudo)}{sh_c(f'sha256sum < {qpath(path)}')}"


EXIT_CHANGED = 17  # write_file_atomic: the file is not the one that was read
EXIT_EXISTS = 18  # backup_copy: the backup name is taken
EXIT_INCOMPLETE = 19  # write_file_atomic: the received text does not have the announced hash


def write_file_atomic(
    path: str, *, sudo: bool = False, expect_sha256: str | None = None, content_sha256: str | None = None
) -> str:
    """Replace ``path`` with stdin atomically: a temp file in the same directory, mode and owner
    copied from the old file, fsync, ``mv`` over it, fsync the directory. With ``expect_sha256``
    the current file must still have that hash (else exit 17, nothing written). With
    ``content_sha256`` the received text must have that hash before the rename (else exit 19:
    a transfer cut midway never replaces the file)."""
    if expect_sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", expect_sha256):
        raise ValueError("expect_sha256 must be 64 hex digits")
    if content_sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", content_sha256):
        raise ValueError("content_sha256 must be 64 hex digits")
    verify = ""
    if content_sha256:
        verify = (f'n=$(sha256sum < "$t" | cut -d" " -f1)\n'
                  f'[ "$n" = {content_sha256} ] || {{ echo "kvtui: the new content of $f arrived incomplete" >&2; '
                  f"exit {EXIT_INCOMPLETE}; }}\n")
    check = ""
    if expect_sha256:
        check = (f'h=$(sha256sum < "$f" 2>/dev/null | cut -d" " -f1)\n'
                 f'[ "$h" = {expect_sha256} ] || {{ echo "kvtui: $f changed since it was read" >&2; '
                 f"exit {EXIT_CHANGED}; }}\n")
    script = f"""set -e
f={qpath(path)}
d=$(dirname -- "$f"); b=$(basename -- "$f")
{check}t=$(mktemp "$d/.$b.kvtui-XXXXXX")
trap 'rm -f -- "$t"' EXIT
cat > "$t"
{verify}if [ -e "$f" ]; then
  chmod --reference="$f" -- "$t"
  chown --reference="$f" -- "$t"
fi
sync -- "$t" 2>/dev/null || sync
mv -f -- "$t" "$f"
trap - EXIT
sync -- "$d" 2>/dev/null || true"""
    return f"{sudo_prefix(sudo)}{sh_c(script)}"


def list_backups(path: str, *, sudo: bool = False) -> str:
    """Prints kvtui's backups of ``path`` (``<path>.kvtui-*``), one per line, sorted by name."""
    script = f"""for b in {qpath(path)}.kvtui-*; do [ -e "$b" ] && printf '%s\\n' "$b"; done | LC_ALL=C sort
exit 0"""
    return f"{sudo_prefix(sudo)}{sh_c(script)}"


def backup_copy(path: str, backup_path: str, *, sudo: bool = False) -> str:
    """Copy ``path`` to ``backup_path`` keeping mode, owner and times; refuses (exit 18) to
    overwrite an existing backup."""
    script = f"""set -e
s={qpath(path)}; t={qpath(backup_path)}
if [ -e "$t" ]; then echo "kvtui: backup $t already exists" >&2; exit {EXIT_EXISTS}; fi
cp -p -- "$s" "$t"
sync -- "$t" 2>/dev/null || true"""
    return f"{sudo_prefix(sudo)}{sh_c(script)}"


# ---------------------------------------------------------------------------------------------
# Reachability probe (`kvtui hosts --connect`)
# ---------------------------------------------------------------------------------------------


def probe_host(*, unit: str | None = None, log_file: str | None = None, container: str | None = None,
               sudo: bool = False) -> str:
    """One round trip that prints ``key=value`` lines: ``user``, ``gpus`` (count, or ``none``
    without nvidia-smi), and for what the host follows: ``unit=LoadState/ActiveState`` and
    ``journal=ok|denied``, ``log=<size>|missing|unreadable``, ``container=<status>|missing``."""
    sp = sudo_prefix(sudo)
    lines = [
        'echo "user=$(id -un)"',
        'if command -v nvidia-smi >/dev/null 2>&1; then '
        'echo "gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c .)"; '
        "else echo gpus=none; fi",
    ]
    if unit:
        u = q(unit)
        lines.append(f'echo "unit=$({sp}systemctl show -p LoadState --value {u} 2>/dev/null)/'
                     f'$({sp}systemctl show -p ActiveState --value {u} 2>/dev/null)"')
        lines.append(f"m=$({sp}journalctl -u {u} -n 1 -q --no-pager 2>&1 >/dev/null); "
                     'case "$m" in *ermission*|*nsufficient*|*sudo*) echo journal=denied ;; *) echo journal=ok ;; esac')
    if log_file:
        f = qpath(log_file)
        lines.append(f'if [ -r {f} ]; then echo "log=$(stat -L -c %s -- {f})"; elif [ -e {f} ]; '
                     "then echo log=unreadable; else echo log=missing; fi")
    if container:
        lines.append(f"s=$({sp}docker inspect -f '{{{{.State.Status}}}}' {q(container)} 2>/dev/null) "
                     '&& echo "container=$s" || echo container=missing')
    lines.append("exit 0")
    return sh_c("\n".join(lines))


def parse_probe(output: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.isidentifier():
            out[key] = value.strip()
    return out


# ---------------------------------------------------------------------------------------------
# Running the operator's own commands
# ---------------------------------------------------------------------------------------------


def detached(command: str, log_file: str | None = None) -> str:
    """Start ``command`` (the operator's ``start_command``) so it outlives the SSH session: new
    session (``setsid``), ``nohup``, stdin from /dev/null, output appended to ``log_file`` (else
    /dev/null) unless the command redirects it itself. Prints the PID of the started shell."""
    out = qpath(log_file) if log_file else "/dev/null"
    return f"nohup setsid sh -c {q(command)} </dev/null >>{out} 2>&1 & echo $!"


def shell(command: str) -> str:
    """The operator's ``stop_command`` (or any configured command) as written, under ``sh``."""
    return sh_c(command)


# ---------------------------------------------------------------------------------------------
# Deployments (issue 15): what the hang diagnosis reads from a node's unit
# ---------------------------------------------------------------------------------------------


def unit_environment(unit: str, *, sudo: bool = False) -> str:
    """The unit's ``Environment=`` assignments on one line (``A=1 "B=x y"``), for the NCCL_* /
    GLOO_* settings a deployment's nodes must agree on."""
    return f"{sudo_prefix(sudo)}systemctl show -p Environment --value {q(unit)}"


def parse_environment(text: str) -> dict[str, str]:
    """``systemctl show -p Environment --value`` output -> {name: value} (systemd quotes an
    assignment that holds spaces); a line that does not split is skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        for w in words:
            key, sep, value = w.partition("=")
            if sep and key:
                out[key] = value
    return out


# ---------------------------------------------------------------------------------------------
# A model's config.json on the host (the calculator of a server whose start is not in the log)
# ---------------------------------------------------------------------------------------------

MODEL_CONFIG_TAG = "kvtui-model-config"
MODEL_CONFIG_MAX_BYTES = 1024 * 1024  # a config.json is a few KiB; more is not a model's config
MODEL_CONFIG_FOUND = "kvtui-config "  # stdout's first line: the file read, then its bytes
MODEL_CONFIG_TRIED = "kvtui-tried "  # stdout when none is found: one line per path tried
_HF_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")

# $1 the model as the flags say it, $2 a directory to look in ('' none), $3 the Hugging Face cache
# folder of the repo id ('' none), $4 the server's pid ('' unknown: its HF_HOME / HF_HUB_CACHE and
# working directory are read from /proc when readable). Prints MODEL_CONFIG_FOUND PATH and the
# file's first MAX+1 bytes, or MODEL_CONFIG_TRIED PATH lines and exits 3.
_MODEL_CONFIG_SCRIPT = r"""m=$1 dir=$2 repo=$3 pid=$4 max=$5
penv() { [ -n "$pid" ] && tr '\000' '\n' < /proc/"$pid"/environ 2>/dev/null | sed -n "s/^$1=//p" | head -n 1; }
found() { printf '@FOUND@%s\n' "$1"; head -c "$max" -- "$1"; exit 0; }
tried=''
try() { if [ -f "$1" ] && [ -r "$1" ]; then found "$1"; fi; tried="${tried}@TRIED@$1
"; }
if [ -n "$dir" ]; then
  case $dir in
    /*) try "$dir/config.json" ;;
    *) cwd=$( [ -n "$pid" ] && readlink /proc/"$pid"/cwd 2>/dev/null )
       [ -n "$cwd" ] && try "$cwd/$dir/config.json"
       try "$dir/config.json" ;;
  esac
fi
if [ -n "$repo" ]; then
  p_hub=$(penv HF_HUB_CACHE); p_home=$(penv HF_HOME)
  for hub in "$p_hub" "${p_home:+$p_home/hub}" "${HF_HUB_CACHE:-}" "${HF_HOME:+$HF_HOME/hub}" \
             "$HOME/.cache/huggingface/hub"; do
    [ -n "$hub" ] || continue
    d="$hub/$repo"
    if [ -r "$d/refs/main" ]; then try "$d/snapshots/$(head -c 200 "$d/refs/main")/config.json"; fi
    newest=$(ls -t -- "$d"/snapshots/*/config.json 2>/dev/null | head -n 1)
    if [ -n "$newest" ]; then try "$newest"; else try "$d/snapshots/*/config.json"; fi
  done
fi
printf '%s' "$tried"
exit 3""".replace("@FOUND@", MODEL_CONFIG_FOUND).replace("@TRIED@", MODEL_CONFIG_TRIED)


def model_config(model: str, *, pid: int | None = None, max_bytes: int = MODEL_CONFIG_MAX_BYTES) -> str:
    """Print the ``config.json`` of the model a server runs (its ``--model-path`` / ``--model``):
    ``MODEL/config.json`` when it names a directory (a relative one from the server's working
    directory, ``/proc/PID/cwd``), else — for a Hugging Face id ``ORG/NAME`` — the cache's
    ``models--ORG--NAME/snapshots/<refs/main or newest>/config.json`` under the server's
    ``HF_HUB_CACHE`` / ``HF_HOME`` (from ``/proc/PID/environ``), the login's, then
    ``~/.cache/huggingface/hub``. At most ``max_bytes`` + 1 bytes come back (``parse_model_config``
    says a larger file is too large). Every value is a positional argument of ``sh -c``: data,
    never code."""
    model = model.strip()
    repo = "models--" + model.replace("/", "--") if _HF_REPO_RE.match(model) else ""
    args = [MODEL_CONFIG_TAG, model, model.rstrip("/") or "/", repo, str(int(pid)) if pid else "", str(max_bytes + 1)]
    return "sh -c " + q(_MODEL_CONFIG_SCRIPT) + " " + " ".join(q(a) for a in args)


def model_config_request(command: str) -> str | None:
    """The model a ``model_config`` command asks about (a simulated host answers it without a
    shell); None for any other command."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    for i, word in enumerate(argv[:-1]):
        if word == MODEL_CONFIG_TAG and i >= 2 and argv[i - 2] == "-c":
            return argv[i + 1]
    return None


class ModelConfigError(ValueError):
    """The model's config.json could not be read; ``str()`` is one line: the paths tried, why."""


def parse_model_config(exit_status: int, stdout: str, stderr: str, *,
                       max_bytes: int = MODEL_CONFIG_MAX_BYTES) -> tuple[str, str]:
    """(path, text) from ``model_config``'s output; ``ModelConfigError`` says why not."""
    head, _, text = stdout.partition("\n")
    if exit_status == 0 and head.startswith(MODEL_CONFIG_FOUND):
        path = head[len(MODEL_CONFIG_FOUND):]
        if len(text.encode("utf-8", "surrogateescape")) > max_bytes:
            raise ModelConfigError(f"{path}: larger than {max_bytes // 1024} KiB, not a model's config.json")
        return path, text
    tried = [ln[len(MODEL_CONFIG_TRIED):] for ln in stdout.splitlines() if ln.startswith(MODEL_CONFIG_TRIED)]
    if exit_status == 3 and tried:
        shown = ", ".join(tried[:4]) + (f" (+{len(tried) - 4} more)" if len(tried) > 4 else "")
        raise ModelConfigError("no config.json at " + shown)
    why = (stderr.strip().splitlines() or [f"exit status {exit_status}"])[-1]
    raise ModelConfigError(f"cannot read the model's config.json ({why})")
