"""Log files: the last server start however far back, then ``tail -F`` from a byte offset."""

from __future__ import annotations

import re
from collections.abc import Sequence

from kvtui.hosts.shellcmd.base import _self_safe, guard, q, qpath, sh_c
from kvtui.hosts.shellcmd.journal import READY_PATTERNS
from kvtui.hosts.shellcmd.pids import ENGINE_PROCESS_PATTERN

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
