"""Every remote command builder, run through a real ``sh -c``: hostile config values (quotes,
``;``, ``$()``, backticks, newlines, leading dashes) stay data and never run as commands; the file
commands do what they say on real files with hostile names; the guard kills its follower when
stdin closes."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kvtui.hosts import shellcmd as C

NASTY = [
    "a'b",
    'a"b',
    "x; touch CANARY",
    "$(touch CANARY)",
    "`touch CANARY`",
    "a\ntouch CANARY",
    "'; touch CANARY; '",
    "--help",
    "-n 5",
    "*",
    "$HOME",
    "a b\tc",
    "back\\slash",
    "ünï €",
    "x && touch CANARY || touch CANARY",
    "x | touch CANARY",
    "$((1+1))${IFS}",
    "#not a comment",
]
IDS = [repr(v)[:20] for v in NASTY]

RECORDER = """#!/bin/sh
# records its name and argv (NUL-separated, \\001 after each call), then exits 0
{{ printf '%s\\000' "$(basename "$0")" "$@"; printf '\\001'; }} >> {log}
"""
FAKE_SUDO = """#!/bin/sh
[ "$1" = "-n" ] || exit 99
{{ printf '%s\\000' sudo "$@"; printf '\\001'; }} >> {log}
shift
exec "$@"
"""


@pytest.fixture
def sandbox(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A cwd (where a stray ``touch CANARY`` would land), a recorder PATH dir, and an env."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.bin"
    for tool in ("journalctl", "systemctl", "docker", "nvidia-smi", "pgrep"):
        p = bin_dir / tool
        p.write_text(RECORDER.format(log=log))
        p.chmod(0o755)
    (bin_dir / "sudo").write_text(FAKE_SUDO.format(log=log))
    (bin_dir / "sudo").chmod(0o755)
    work = tmp_path / "cwd"
    work.mkdir()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "LC_ALL": "C"}
    (tmp_path / "home").mkdir()
    return work, log, env


def sh(command: str, cwd: Path, env: dict[str, str], input: bytes | None = None,
       timeout: float = 20) -> subprocess.CompletedProcess[bytes]:
    """Run like sshd does: the login shell gets the command string."""
    return subprocess.run(["sh", "-c", command], cwd=cwd, env=env, input=input if input is not None else b"",
                          capture_output=True, timeout=timeout, check=False)


def sh_open_stdin(command: str, cwd: Path, env: dict[str, str], timeout: float = 20) -> int:
    """Run with stdin held open until the command exits (a live channel: the guard must not
    fire), like a follower on an open SSH session."""
    proc = subprocess.Popen(["sh", "-c", command], cwd=cwd, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return proc.wait(timeout=timeout)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()


def calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [[a.decode() for a in call.split(b"\0")[:-1]] for call in log.read_bytes().split(b"\1") if call]


def assert_no_canary(root: Path) -> None:
    hits = [p for p in root.rglob("CANARY*")]
    assert hits == [], f"a config value ran as a command: {hits}"


BUILDERS: list[tuple[str, Callable[[str], str], Callable[[str], list[str]]]] = [
    ("journal_follow", lambda v: C.journal_follow(v, after_cursor="s=1;i=2"),
     lambda v: ["journalctl", "-u", v]),
    ("journal_follow_cursor", lambda v: C.journal_follow("u.service", cursor=v), lambda v: [f"--cursor={v}"]),
    ("journal_follow_after", lambda v: C.journal_follow("u.service", after_cursor=v),
     lambda v: [f"--after-cursor={v}"]),
    ("journal_follow_sudo", lambda v: C.journal_follow(v, lines=0, sudo=True), lambda v: ["sudo", "-n", "journalctl"]),
    ("journal_last_cursor", lambda v: C.journal_last_cursor(v), lambda v: ["journalctl", "-u", v]),
    ("journal_uptime", lambda v: C.guard(C.sh_c(C.journal_uptime(v, cursor="s=1;i=2"))),
     lambda v: ["journalctl", "-u", v]),
    ("journal_uptime_cursor", lambda v: C.guard(C.sh_c(C.journal_uptime("u.service", cursor=v))),
     lambda v: [f"--cursor={v}"]),
    ("journal_uptime_after", lambda v: C.guard(C.sh_c(C.journal_uptime("u.service", after_cursor=v, ready=True))),
     lambda v: [f"--after-cursor={v}"]),
    ("journal_uptime_done", lambda v: C.guard(C.sh_c(C.journal_uptime("u.service", startup_done=(v, "1", "-")))),
     lambda v: [f"--after-cursor={v}"]),
    ("journal_main_cmdline", lambda v: C.journal_main_cmdline(v), lambda v: ["systemctl", "show", "-p", "MainPID",
                                                                             "--value", v]),
    ("journal_search", lambda v: C.journal_search("u.service", v, after_cursor="s=1", until_us=5),
     lambda v: [f"--grep={v}"]),
    ("journal_search_unit", lambda v: C.journal_search(v, "x", after_cursor=v, sudo=True),
     lambda v: ["journalctl", "-u", v]),
    ("journal_boot_start", lambda v: C.journal_boot_start(v), lambda v: ["systemctl", "show", "-p", "InvocationID",
                                                                         "--value", v]),
    ("systemctl_show", lambda v: C.systemctl_show(v, ["MainPID", "ExecStart"]),
     lambda v: ["systemctl", "show", "-p", "MainPID", "-p", "ExecStart", v]),
    ("restart", lambda v: C.restart_unit(v, sudo=True), lambda v: ["systemctl", "restart", v]),
    ("systemctl_stop", lambda v: C.systemctl("stop", v), lambda v: ["systemctl", "stop", v]),
    ("docker_logs", lambda v: C.docker_logs_follow(v, tail=0), lambda v: ["docker", "logs", "-f", "--timestamps",
                                                                          "--tail", "0", v]),
    ("docker_inspect", lambda v: C.docker_inspect(v, "{{.State.StartedAt}}"),
     lambda v: ["docker", "inspect", "-f", "{{.State.StartedAt}}", v]),
    ("docker_inspect_fmt", lambda v: C.docker_inspect("c1", v), lambda v: ["docker", "inspect", "-f", v, "c1"]),
    ("server_pids_unit", lambda v: C.server_pids_unit(v), lambda v: ["systemctl", "show", "-p", "MainPID", v]),
    ("server_pids_container", lambda v: C.server_pids_container(v), lambda v: ["docker", "inspect", "-f",
                                                                               "{{.State.Pid}}", v]),
    # (the pattern as pgrep gets it never matches its own text: `pgrep -f` would find the shell)
    ("server_pids_pattern", lambda v: C.server_pids_by_pattern(v), lambda v: ["pgrep", "-f", C._self_safe(v)]),
    ("probe_unit", lambda v: C.probe_host(unit=v), lambda v: ["systemctl", "show", "-p", "LoadState", "--value", v]),
    ("probe_journal", lambda v: C.probe_host(unit=v, sudo=True), lambda v: ["sudo", "-n", "journalctl", "-u", v]),
    ("probe_container", lambda v: C.probe_host(container=v),
     lambda v: ["docker", "inspect", "-f", "{{.State.Status}}", v]),
]


@pytest.mark.parametrize("value", NASTY, ids=IDS)
@pytest.mark.parametrize(("name", "build", "expect"), BUILDERS, ids=[b[0] for b in BUILDERS])
def test_values_reach_the_tool_as_one_argument(sandbox: tuple[Path, Path, dict[str, str]], name: str,
                                               build: Callable[[str], str],
                                               expect: Callable[[str], list[str]], value: str) -> None:
    work, log, env = sandbox
    cmd = build(value)
    rc = sh_open_stdin(cmd, work, env)
    assert_no_canary(work.parent)
    recorded = calls(log)
    assert recorded, (name, rc)
    want = expect(value)
    # the expected argv appears as a contiguous run of one recorded call
    assert any(_contains(call, want) for call in recorded), (recorded, want)


def _contains(seq: list[str], sub: list[str]) -> bool:
    return any(seq[i : i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def test_builders_refuse_what_cannot_be_quoted_safely() -> None:
    with pytest.raises(ValueError, match="property"):
        C.systemctl_show("u", ["MainPID; rm -rf /"])
    with pytest.raises(ValueError, match="nvidia-smi field"):
        C.nvidia_smi_query_gpu("index,$(reboot)")
    with pytest.raises(ValueError, match="docker timestamp"):
        C.docker_logs_follow("c", since="$(reboot)")
    with pytest.raises(ValueError, match="unsupported systemctl verb"):
        C.systemctl("poweroff")
    with pytest.raises(ValueError, match="64 hex"):
        C.write_file_atomic("/x", expect_sha256="abc; reboot")


HOSTILE_NAMES = ["plain.log", "a'b $(touch CANARY) `touch CANARY`; x.log", "new\nline.log", "-dash.log",
                 'q"uote\\.log']


@pytest.mark.parametrize("fname", HOSTILE_NAMES, ids=[repr(n)[:16] for n in HOSTILE_NAMES])
def test_file_commands_on_hostile_names(sandbox: tuple[Path, Path, dict[str, str]], fname: str) -> None:
    work, _log, env = sandbox
    d = work / "d"
    d.mkdir()
    f = d / fname
    f.write_bytes(b"one\ntwo\n")
    f.chmod(0o640)
    p = str(f)
    # read
    res = sh(C.read_file(p), work, env)
    assert (res.returncode, res.stdout) == (0, b"one\ntwo\n")
    # hash
    res = sh(C.file_sha256(p), work, env)
    import hashlib

    digest = hashlib.sha256(b"one\ntwo\n").hexdigest()
    assert res.stdout.split()[0].decode() == digest
    # backup (keeps mode), and refuses to overwrite
    bak = p + ".kvtui-20260101T000000Z"
    res = sh(C.backup_copy(p, bak), work, env)
    assert res.returncode == 0, res.stderr
    assert Path(bak).read_bytes() == b"one\ntwo\n"
    assert stat.S_IMODE(Path(bak).stat().st_mode) == 0o640
    res = sh(C.backup_copy(p, bak), work, env)
    assert res.returncode == C.EXIT_EXISTS
    # atomic write: content from stdin, mode kept, no temp file left
    res = sh(C.write_file_atomic(p, expect_sha256=digest), work, env, input=b"new content\n")
    assert res.returncode == 0, res.stderr
    assert f.read_bytes() == b"new content\n"
    assert stat.S_IMODE(f.stat().st_mode) == 0o640
    # a stale expectation refuses and changes nothing
    res = sh(C.write_file_atomic(p, expect_sha256=digest), work, env, input=b"other\n")
    assert res.returncode == C.EXIT_CHANGED
    assert b"changed since it was read" in res.stderr
    assert f.read_bytes() == b"new content\n"
    assert sorted(x.name for x in d.iterdir()) == sorted([fname, Path(bak).name])
    # stat / scan back
    res = sh(C.file_stat(p), work, env)
    ino, size = res.stdout.split()
    assert (int(ino), int(size)) == (f.stat().st_ino, 12)
    res = sh(C.file_locate(p, pid_file=p + ".pid"), work, env)
    assert res.stdout.decode().splitlines()[:2] == [f"stat {f.stat().st_ino} 12", "sibs"]
    res = sh(C.file_search(p, 0, 12, "content", context=1), work, env)
    assert (res.returncode, res.stdout) == (0, b"1:0:new content\n")
    assert_no_canary(work.parent)


def test_atomic_write_failure_leaves_the_original(sandbox: tuple[Path, Path, dict[str, str]]) -> None:
    work, _log, env = sandbox
    f = work / "unit.service"
    f.write_text("original\n")
    # a directory that does not exist: mktemp fails, nothing is touched
    res = sh(C.write_file_atomic(str(work / "missing" / "x")), work, env, input=b"x")
    assert res.returncode != 0
    # the write side fails midway (stdin source dies): set -e aborts before the rename
    res = sh(f"false | {C.write_file_atomic(str(f))}", work, env)
    assert f.read_text() == "original\n" or f.read_text() == ""  # mv only after cat succeeded
    assert [x.name for x in work.iterdir() if x.name.startswith(".unit.service.kvtui-")] == []


def test_tilde_paths_expand_on_the_host(sandbox: tuple[Path, Path, dict[str, str]]) -> None:
    work, _log, env = sandbox
    home = Path(env["HOME"])
    (home / "my logs").mkdir()
    (home / "my logs" / "s.log").write_text("hello\n")
    assert C.qpath("~/my logs/s.log") == "\"$HOME\"/'my logs/s.log'"
    res = sh(C.read_file("~/my logs/s.log"), work, env)
    assert res.stdout == b"hello\n"


def test_locate_finds_the_last_start_its_ready_line_and_the_tail(sandbox: tuple[Path, Path, dict[str, str]]) -> None:
    """Issue 21: ``file_locate`` on the host (no sshd needed: sh runs it like sshd would)."""
    work, _log, env = sandbox
    f = work / "server.log"
    old = b"[2026-01-01 00:00:00] server_args=ServerArgs(model_path='a')\nold boot line\n"
    new = b"(APIServer pid=1) INFO vLLM API server version 0.11.0\n(APIServer pid=1) INFO non-default args: {'a': 1}\n"
    ready = b"(APIServer pid=1) INFO:     Application startup complete.\n"
    serving = b"".join(b"(APIServer pid=1) INFO:     127.0.0.1:1 - \"GET /metrics HTTP/1.1\" 200 OK %06d\n" % i
                       for i in range(2000))
    f.write_bytes(old + new + ready + serving)
    size = f.stat().st_size
    out = sh(C.file_locate(str(f), tail_bytes=1000, margin=3), work, env).stdout.decode().splitlines()
    assert out[0] == f"stat {f.stat().st_ino} {size}"
    starts = [int(line.split()[1]) for line in out if line.startswith("m ")]
    assert starts == [0, len(old), len(old) + new.index(b"(APIServer pid=1) INFO non")]
    e = len(old + new + ready) + sum(len(x) + 1 for x in serving.split(b"\n")[:3])  # + 3 lines of margin
    assert f"ready {e}" in out
    t = int(out[-1].split()[1])
    assert out[-1].startswith("tail ")
    assert size - 1000 <= t < size - 1000 + 80  # the first whole line of the last 1000 bytes
    assert f.read_bytes()[t - 1 : t] == b"\n"
    # the start only in a rotated copy (the newest that has one), gzip'd
    (work / "server.log.1.gz").write_bytes(__import__("gzip").compress(old + new + ready + serving[:500]))
    f.write_bytes(serving)
    out = sh(C.file_locate(str(f), tail_bytes=1000, margin=3), work, env).stdout.decode().splitlines()
    assert out[1] == "sibs .1.gz"
    assert out[2] == f"in .1.gz 1 {len(old + new + ready + serving[:500])}"
    # no start anywhere: the tail only (no server runs here: no pid, no cmd)
    (work / "server.log.1.gz").unlink()
    out = sh(C.file_locate(str(f), tail_bytes=1000), work, env).stdout.decode().splitlines()
    assert [line.split()[0] for line in out] == ["stat", "sibs", "serves", "tail"]
    assert out[2] == "serves 0"  # a metrics scrape is not serving: no request to the model
    # search a byte range: grep's own lines, offsets relative to the range
    a = len(serving) // 2
    res = sh(C.file_search(str(f), a, None, "200 ok 0019", context=1, limit=2), work, env)
    lines = res.stdout.decode().splitlines()
    hit = next(x for x in lines if x.endswith("OK 001900"))
    line_no, off, _ = hit.split(":", 2)
    assert serving[a + int(off):].split(b"\n", 1)[0].endswith(b"200 OK 001900")
    assert int(line_no) == serving[a:a + int(off)].count(b"\n") + 1
    assert [x.endswith("OK 001899") for x in lines[:1]] == [True]  # its context before


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False)
    return [int(x) for x in out.stdout.split()]


def test_guard_kills_the_follower_when_stdin_closes(sandbox: tuple[Path, Path, dict[str, str]]) -> None:
    work, _log, env = sandbox
    f = work / "quiet.log"
    f.write_text("first\n")
    proc = subprocess.Popen(["sh", "-c", C.file_follow(str(f), offset=0)], cwd=work, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdin is not None
    assert proc.stdout.readline() == b"\x00kvtui:follow ino=%d off=0\n" % f.stat().st_ino
    assert proc.stdout.readline() == b"first\n"
    tails = [p for p in _children(proc.pid) if "tail" in Path(f"/proc/{p}/cmdline").read_text()]
    assert len(tails) == 1
    proc.stdin.close()  # the channel closes
    proc.wait(timeout=5)
    deadline = time.monotonic() + 5
    while _alive(tails[0]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(tails[0])
    assert proc.returncode == 128 + signal.SIGTERM  # the follower's status is passed on


def test_guard_exits_with_the_follower(sandbox: tuple[Path, Path, dict[str, str]]) -> None:
    work, _log, env = sandbox
    proc = subprocess.Popen(["sh", "-c", C.guard("sh -c 'echo done; exit 7'")], cwd=work, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.wait(timeout=5)
    assert out == b"done\n"
    assert proc.returncode == 7
    assert proc.stdin is not None
    proc.stdin.close()
    assert C.unwrap_guard(C.guard("journalctl -f")) == "journalctl -f"
    assert C.unwrap_guard("echo hi") == "echo hi"


def test_detached_start_outlives_its_shell(sandbox: tuple[Path, Path, dict[str, str]]) -> None:
    work, _log, env = sandbox
    marker = work / "started"
    res = sh(C.detached(f"sleep 1; echo $$ > {marker}"), work, env, timeout=5)
    assert res.returncode == 0
    pid = int(res.stdout.strip())
    # sh returned at once; the detached shell runs on in its own session (once nohup and setsid
    # have exec'd into it)
    deadline = time.monotonic() + 0.8
    while os.getsid(pid) != pid and time.monotonic() < deadline:
        time.sleep(0.01)
    assert os.getsid(pid) == pid
    assert not marker.exists()
    deadline = time.monotonic() + 5
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.read_text().strip() == str(pid)


def _model_config(model: str, cwd: Path, env: dict[str, str] | None = None, pid: int | None = None,
                  max_bytes: int = C.MODEL_CONFIG_MAX_BYTES) -> tuple[str, str]:
    cmd = C.model_config(model, pid=pid, max_bytes=max_bytes)
    assert C.model_config_request(cmd) == model.strip()
    r = subprocess.run(["sh", "-c", cmd], cwd=cwd, capture_output=True, text=True, timeout=30,
                       env={"PATH": os.environ["PATH"], "HOME": str(cwd / "home"), **(env or {})})
    return C.parse_model_config(r.returncode, r.stdout, r.stderr, max_bytes=max_bytes)


def test_model_config_reads_a_directory_or_the_hf_cache_and_says_what_it_tried(tmp_path: Path) -> None:
    """Issue 21: the calculator of a server whose start is gone reads its model's config.json on
    the host: a directory, or the HF cache (refs/main, else the newest snapshot) under the
    server's HF_HOME, the login's, then ~/.cache; a miss names every path tried; a hostile model
    name stays data."""
    d = tmp_path / "models" / "M"
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"num_hidden_layers": 2}')
    assert _model_config(str(d) + "/", tmp_path) == (f"{d}/config.json", '{"num_hidden_layers": 2}')
    assert _model_config("models/M", tmp_path)[0] == "models/M/config.json"  # relative: the cwd
    snap = tmp_path / "hf" / "hub" / "models--org--name" / "snapshots"
    (snap / "aaa").mkdir(parents=True)
    (snap / "bbb").mkdir(parents=True)
    (snap / "aaa" / "config.json").write_text('{"v": "aaa"}')
    (snap / "bbb" / "config.json").write_text('{"v": "bbb"}')
    (snap.parent / "refs").mkdir()
    (snap.parent / "refs" / "main").write_text("aaa")
    path, text = _model_config("org/name", tmp_path, {"HF_HOME": str(tmp_path / "hf")})
    assert (path, text) == (f"{snap}/aaa/config.json", '{"v": "aaa"}')
    home_hub = tmp_path / "home" / ".cache" / "huggingface" / "hub"
    home_hub.mkdir(parents=True)
    os.rename(snap.parent, home_hub / "models--org--name")
    (home_hub / "models--org--name" / "refs" / "main").unlink()
    assert _model_config("org/name", tmp_path)[1] in ('{"v": "aaa"}', '{"v": "bbb"}')  # the newest snapshot
    with pytest.raises(C.ModelConfigError, match=r"^no config.json at .*/missing/config.json$"):
        _model_config(str(tmp_path / "missing"), tmp_path)
    with pytest.raises(C.ModelConfigError, match="hub/models--o--gone/snapshots/"):
        _model_config("o/gone", tmp_path)
    with pytest.raises(C.ModelConfigError, match="larger than 0 KiB"):
        _model_config(str(d), tmp_path, max_bytes=8)
    for nasty in NASTY:
        with pytest.raises(C.ModelConfigError):
            _model_config(nasty, tmp_path)
        assert not (tmp_path / "CANARY").exists()
