"""The guarded write path against a real OpenSSH sshd on 127.0.0.1 (issue 6, "Done means").

The host side is real shell, real files, real ``cp``/``mktemp``/``mv``/``sha256sum``; only
systemd and the engine are stand-ins, both independent of kvtui's own parsers:

* a fake ``systemctl`` first in the session PATH (asserted before anything is written) records
  every call; its ``daemon-reload`` hook loads the units like systemd (fragment + drop-ins in
  order, continuations, comment lines, ``ExecStart=`` resets) into what ``systemctl show -p
  ExecStart`` prints; its ``restart`` hook starts the fake engine with the loaded ExecStart;
* the fake engine parses its arguments with ``argparse`` (SGLang's names and aliases), prints
  its own ``server_args=ServerArgs(…)`` dump and a real boot's lines to the unit's log file:
  a ready boot, or the capture OOM of a real 0.4.10 log when ``--mem-fraction-static`` > 0.95.

Fault injection uses a non-root login where permissions matter, a fake ``cat`` that cuts the
transfer midway, a concurrent edit, and a loopback proxy that drops the connection between the
write and the restart.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvtui import changes
from kvtui.audit import read_entries
from kvtui.flags import get_flag, parse_edit_args
from kvtui.hosts import service
from kvtui.hosts.ssh import SshBackend

sys.path.insert(0, str(Path(__file__).parent))
from sshd_support import CutProxy, FakeTools, SshdInstance, ensure_user, requires_sshd, start_sshd

pytestmark = [pytest.mark.sshd, requires_sshd]

FIX = Path(__file__).parent / "fixtures" / "flags"
PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
OP_USER = "kvtuiop"

# ---------------------------------------------------------------------------------------------
# the stand-ins: systemd's unit loading, and an engine
# ---------------------------------------------------------------------------------------------

RELOAD_HOOK = r'''#!{py}
"""Fake systemd daemon-reload: load every unit's fragment + drop-ins into its ExecStart property."""
import os, shlex
STATE = {state!r}

def logical_lines(text):
    out, cur = [], None
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.lstrip()
        if cur is not None and stripped[:1] in ("#", ";"):
            continue  # comment lines inside a continuation are ignored
        if cur is None and (not stripped or stripped[:1] in ("#", ";")):
            continue
        cur = (cur or "")
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append(cur + line)
        cur = None
    if cur:
        out.append(cur)
    return out

units = os.path.join(STATE, "units")
for u in os.listdir(units):
    d = os.path.join(units, u)
    try:
        frag = open(os.path.join(d, "FragmentPath")).read().strip()
    except OSError:
        continue
    try:
        drops = open(os.path.join(d, "DropInPaths")).read().split()
    except OSError:
        drops = []
    cmds = []
    for f in [frag, *drops]:
        section = None
        for ln in logical_lines(open(f).read()):
            s = ln.strip()
            if s.startswith("["):
                section = s
                continue
            k, _, v = s.partition("=")
            if section == "[Service]" and k.strip() == "ExecStart":
                v = v.strip()
                if v:
                    cmds.append(v)
                else:
                    cmds = []
    if not cmds:
        continue
    argv = shlex.split(cmds[-1])
    argv[0] = argv[0].lstrip("-@:+!")
    line = ("{{ path=%s ; argv[]=%s ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; "
            "code=(null) ; status=0/0 }}" % (argv[0], " ".join(argv)))
    with open(os.path.join(d, "ExecStart"), "w") as fh:
        fh.write(line + "\n")
'''

RESTART_HOOK = r'''#!{py}
"""Fake systemd restart: start the engine with the loaded ExecStart, output to the unit's log."""
import os, shlex, subprocess, sys
STATE = {state!r}
ENGINE = {engine!r}
unit = sys.argv[1]
d = os.path.join(STATE, "units", unit if "." in unit else unit + ".service")
line = open(os.path.join(d, "ExecStart")).read()
argv = shlex.split(line.split("argv[]=", 1)[1].split(" ; ignore_errors=", 1)[0])
log = open(os.path.join(d, "LogFile")).read().strip()
with open(log, "ab") as out:
    subprocess.Popen([ENGINE, *argv[1:]], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                     start_new_session=True)
'''

ENGINE = r'''#!{py}
"""A stand-in SGLang server: argparse with SGLang's names, its own args dump, a real boot's lines."""
import argparse, os, signal, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
if "-m" in args:
    args = args[args.index("-m") + 2:]
p = argparse.ArgumentParser(prog="sglang.launch_server", allow_abbrev=False)
p.add_argument("--model-path", "--model", dest="model_path")
p.add_argument("--served-model-name")
p.add_argument("--tensor-parallel-size", "--tp-size", "--tp", dest="tp_size", type=int, default=1)
p.add_argument("--mem-fraction-static", type=float)
p.add_argument("--context-length", type=int)
p.add_argument("--max-running-requests", type=int)
p.add_argument("--cuda-graph-max-bs", type=int)
p.add_argument("--chunked-prefill-size", type=int, default=8192)
p.add_argument("--trust-remote-code", action="store_true")
p.add_argument("--enable-metrics", action="store_true")
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, default=30000)
ns = p.parse_args(args)
d = vars(ns)
print(time.strftime("[%Y-%m-%d %H:%M:%S]") + " server_args=ServerArgs("
      + ", ".join(f"{{k}}={{v!r}}" for k, v in d.items()) + ")", flush=True)
fail = (ns.mem_fraction_static or 0.88) > 0.95
with open(os.path.join(HERE, "capture-oom.log" if fail else "ready.log")) as fh:
    for line in fh:
        sys.stdout.write(line)
        sys.stdout.flush()
        time.sleep(0.003)
if fail:
    sys.exit(1)
if os.environ.get("ENGINE_STAY") or os.path.exists(os.path.join(HERE, "stay")):
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    while True:
        time.sleep(3600)
'''

FAKE_CAT = r'''#!/bin/sh
# Fake cat: with no arguments (the write of new content) and STATE/cat.mode present, the
# transfer is cut midway: half of stdin is written, then exit 0 ("short") or 1 ("error").
if [ $# -eq 0 ] && [ -f {state}/cat.mode ]; then
  mode=$(/bin/cat {state}/cat.mode)
  {py} -c 'import sys; d = sys.stdin.buffer.read(); sys.stdout.buffer.write(d[: len(d) // 2])'
  [ "$mode" = short ] && exit 0
  echo "cat: write error: No space left on device" >&2
  exit 1
fi
exec /bin/cat "$@"
'''


@dataclass
class Host:
    sshd: SshdInstance
    tools: FakeTools
    base: Path
    engine_dir: Path


def _install(tools: FakeTools, engine_dir: Path) -> None:
    state = str(tools.state)
    engine = engine_dir / "python3"
    for path, body in (
        (tools.state / "hooks" / "daemon-reload", RELOAD_HOOK.format(py=PY, state=state)),
        (tools.state / "hooks" / "restart", RESTART_HOOK.format(py=PY, state=state, engine=str(engine))),
        (engine, ENGINE.format(py=PY)),
        (tools.bin_dir / "cat", FAKE_CAT.format(py=PY, state=state)),
    ):
        path.write_text(body)
        path.chmod(0o755)
    os.chmod(tools.state / "hooks", 0o755)
    shutil.copy(FIX / "engine-ready-tail.log", engine_dir / "ready.log")
    shutil.copy(FIX / "engine-capture-oom-tail.log", engine_dir / "capture-oom.log")
    for p in engine_dir.iterdir():
        p.chmod(p.stat().st_mode | 0o444)


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    # outside pytest's 0700 tmp root, so a non-root login can reach it
    d = Path(tempfile.mkdtemp(prefix="kvtui-svc-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _start(base: Path, tag: str, user: str) -> Host:
    tools = FakeTools.create(base / f"{tag}-host", python=PY)
    engine_dir = base / f"{tag}-engine"
    engine_dir.mkdir()
    engine_dir.chmod(0o755)
    _install(tools, engine_dir)
    sshd = start_sshd(base / f"{tag}-sshd", user=user, path_prefix=tools.bin_dir)
    sshd.assert_fake_path()  # the fake systemctl comes first: checked before anything is written
    assert sshd.run("command -v cat").stdout.strip() == str(tools.bin_dir / "cat")
    return Host(sshd, tools, base, engine_dir)


@pytest.fixture(scope="module")
def root_host(base: Path) -> Iterator[Host]:
    h = _start(base, "root", "root")
    yield h
    h.sshd.stop()


@pytest.fixture(scope="module")
def op_host(base: Path) -> Iterator[Host]:
    ensure_user(OP_USER)
    h = _start(base, "op", OP_USER)
    yield h
    h.sshd.stop()


FRAGMENT = """\
[Unit]
Description=SGLang (test)

[Service]
Type=simple
ExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server \\
    --model-path /models/Llama-3.1-8B \\
    --tp 1 \\
    --context-length 131072 \\
    --mem-fraction-static 0.85 \\
    --port 30000
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

DROPIN = """\
# kvtui test: the flags are overridden here
[Service]
ExecStart=
ExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server \\
    --model-path /models/Llama-3.1-8B \\
    --tp 1 \\
    --context-length 131072 \\
    # lowered after a capture OOM
    --mem-fraction-static 0.80 \\
    --port 30000
"""

ENV_DROPIN = "[Service]\nEnvironment=SGLANG_LOG_MS=0\n"


@dataclass
class Unit:
    name: str
    dir: Path
    fragment: Path
    dropin: Path | None
    log: Path


def make_unit(h: Host, name: str, *, dropin: bool, owner: str | None = None, dir_mode: int = 0o755,
              file_mode: int = 0o644) -> Unit:
    d = h.base / f"etc-{name}"
    d.mkdir()
    frag = d / f"{name}.service"
    frag.write_text(FRAGMENT)
    drops: list[Path] = []
    dp: Path | None = None
    if dropin:
        dd = d / f"{name}.service.d"
        dd.mkdir()
        dp = dd / "10-flags.conf"
        dp.write_text(DROPIN)
        env = dd / "20-env.conf"
        env.write_text(ENV_DROPIN)
        drops = [dp, env]
    log = h.base / f"{name}.log"
    log.write_text("")
    log.chmod(0o666)
    for p in [frag, *drops]:
        p.chmod(file_mode)
    if owner:
        import pwd

        pw = pwd.getpwnam(owner)
        for p in [d, *d.rglob("*")]:
            os.chown(p, pw.pw_uid, pw.pw_gid)
    for p in [d, *(x for x in d.rglob("*") if x.is_dir())]:
        p.chmod(dir_mode)
    h.tools.set_unit(name, FragmentPath=str(frag), DropInPaths=" ".join(str(p) for p in drops),
                     LogFile=str(log), MainPID=0)
    unit_state = h.tools.state / "units" / f"{name}.service"
    unit_state.chmod(0o777)
    for p in unit_state.iterdir():
        p.chmod(0o666)
    # systemd loaded the unit at boot
    subprocess.run([str(h.tools.state / "hooks" / "daemon-reload")], check=True)
    (h.tools.state / "systemctl.calls").write_text("")
    return Unit(name, d, frag, dp, log)


@pytest.fixture
async def backends() -> AsyncIterator[list[SshBackend]]:
    made: list[SshBackend] = []
    yield made
    for b in made:
        await b.close()


async def connect(h: Host, made: list[SshBackend], name: str, *, port: int | None = None, **keys: object
                  ) -> tuple[SshBackend, object]:
    keys.setdefault("probe", False)  # the stand-in engine prints a boot but serves no HTTP
    cfg = h.sshd.host_config(port=port, **keys)
    b = SshBackend(name, cfg, ssh_config=[], connect_timeout=5.0)
    made.append(b)
    await b.start()
    return b, cfg


def _read(path: str | Path) -> str:
    return Path(path).read_text()


def _sh(command: str) -> None:
    subprocess.run(["sh", "-c", command], check=True)


def calls(h: Host) -> list[str]:
    return h.tools.systemctl_calls()


# ---------------------------------------------------------------------------------------------
# the happy path: the drop-in is edited, systemd reloads, the restarted boot runs the new flags
# ---------------------------------------------------------------------------------------------


async def test_dropin_edit_reload_restart_and_the_boot_runs_it(root_host: Host, backends: list[SshBackend]) -> None:
    u = make_unit(root_host, "kvt-a", dropin=True)
    assert u.dropin is not None
    frag_before, drop_before = u.fragment.read_text(), u.dropin.read_text()
    ensure_user(OP_USER)
    os.chown(u.dropin, *_ids(OP_USER))  # the write must keep the owner (and the mode)
    u.dropin.chmod(0o640)
    b, cfg = await connect(root_host, backends, "a", unit="kvt-a.service", log_file=str(u.log))
    plan = await changes.plan_apply("a", cfg, b, parse_edit_args(["mem-fraction-static=0.82"]),  # type: ignore[arg-type]
                                    restart=True, timeout=60, boots_timeout=3)
    assert plan.source.path == str(u.dropin)  # the drop-in that overrides ExecStart is the file edited
    assert any("overrides ExecStart" in v for v in plan.source.via)
    assert "-    --mem-fraction-static 0.80 \\" in plan.diff
    assert "+    --mem-fraction-static 0.82 \\" in plan.diff
    assert [s.command for s in plan.steps if s.command] == [
        plan.cmd[k] for k in ("hash", "backup", "hash_backup", "write", "read", "reload", "show", "restart")
    ]
    progress: list[str] = []
    out = await service.execute(plan, b, progress.append)
    assert out.code == 0, out.messages
    assert out.status == "ready"
    # the backup equals the old file; the new file has the new value; the fragment is untouched
    assert out.backup_path is not None
    assert _read(out.backup_path) == drop_before
    assert Path(out.backup_path).name.startswith("10-flags.conf.kvtui-")
    assert get_flag(u.dropin.read_text(), "unit", "mem-fraction-static") == "0.82"
    assert u.dropin.read_text() == drop_before.replace("0.80", "0.82")
    assert u.fragment.read_text() == frag_before
    assert oct(u.dropin.stat().st_mode & 0o777) == "0o640"
    assert u.dropin.stat().st_uid == _ids(OP_USER)[0]
    # daemon-reload happened before restart, with the ExecStart check between them
    c = calls(root_host)
    reload_i = c.index("daemon-reload")
    show_i = next(i for i, x in enumerate(c) if x.startswith("show") and "ExecStart" in x)
    restart_i = c.index("restart kvt-a.service")
    assert reload_i < show_i < restart_i
    # the restarted boot runs the new value (its own argument dump)
    assert out.boot is not None
    assert out.boot.flags.get("mem_fraction_static") == 0.82
    assert "the new boot's own argument dump carries the edits" in progress
    entry = read_entries()[-1]
    assert (entry["host"], entry["action"], entry["outcome"], entry["file"]) == ("a", "apply", "ready", str(u.dropin))
    assert "+    --mem-fraction-static 0.82" in str(entry["diff"])


async def test_failed_boot_rolls_back_over_ssh(root_host: Host, backends: list[SshBackend]) -> None:
    u = make_unit(root_host, "kvt-b", dropin=False)
    before = u.fragment.read_text()
    b, cfg = await connect(root_host, backends, "b", unit="kvt-b.service", log_file=str(u.log))
    plan = await changes.plan_apply("b", cfg, b, parse_edit_args(["mem-fraction-static=0.97"]),  # type: ignore[arg-type]
                                    restart=True, force=True, rollback_on_failure=True, timeout=60, predict=False)
    progress: list[str] = []
    out = await service.execute(plan, b, progress.append)
    assert out.code == 1
    assert out.rolled_back
    assert any("failed in graph capture: oom_graph_capture" in m for m in progress)
    assert "rolled back: the previous flags are back and the boot is ready" in out.messages
    assert u.fragment.read_text() == before
    restarts = [x for x in calls(root_host) if x.startswith("restart")]
    assert len(restarts) == 2  # the edit, then the rollback
    # the rollback's boot runs the old value again
    assert out.messages[-1].startswith("rolled back")


async def test_edit_not_in_effect_when_another_file_overrides(root_host: Host, backends: list[SshBackend]) -> None:
    # kvtui edits the fragment (the only file setting ExecStart when it read them); then a drop-in
    # appears that overrides ExecStart: after daemon-reload systemd runs the drop-in's flags
    u = make_unit(root_host, "kvt-c", dropin=False)
    before = u.fragment.read_text()
    b, cfg = await connect(root_host, backends, "c", unit="kvt-c.service", log_file=str(u.log))
    plan = await changes.plan_apply("c", cfg, b, parse_edit_args(["mem-fraction-static=0.83"]),  # type: ignore[arg-type]
                                    restart=True, timeout=30, predict=False)
    sneaky = u.dir / "kvt-c.service.d"
    sneaky.mkdir()
    (sneaky / "99-late.conf").write_text(DROPIN)
    root_host.tools.set_unit("kvt-c", DropInPaths=str(sneaky / "99-late.conf"))
    out = await service.execute(plan, b)
    assert out.code == 1
    assert "systemd's ExecStart does not carry the edit" in out.messages[-1]
    assert "--mem-fraction-static is 0.80, expected 0.83" in out.messages[-1]
    assert u.fragment.read_text() == before  # restored
    assert not any(x.startswith("restart") for x in calls(root_host))  # never restarted


# ---------------------------------------------------------------------------------------------
# fault injection: each leaves the original intact or restorable, and says what happened
# ---------------------------------------------------------------------------------------------


def _no_temp_files(d: Path) -> None:
    left = [p.name for p in d.rglob(".*kvtui-*")]
    assert left == [], left


async def test_directory_not_writable(op_host: Host, backends: list[SshBackend]) -> None:
    u = make_unit(op_host, "kvt-d", dropin=False)  # root-owned dir and file, 0755/0644
    before = u.fragment.read_text()
    b, cfg = await connect(op_host, backends, "d", unit="kvt-d.service", log_file=str(u.log))
    plan = await changes.plan_apply("d", cfg, b, parse_edit_args(["mem-fraction-static=0.82"]), predict=False)  # type: ignore[arg-type]
    out = await service.execute(plan, b)
    assert out.code == 3
    assert "cannot back up" in out.messages[-1]
    assert "Permission denied" in out.messages[-1]
    assert "nothing was written" in out.messages[-1]
    assert u.fragment.read_text() == before
    assert list(u.dir.iterdir()) == [u.fragment]
    assert read_entries()[-1]["outcome"] == "error"


async def test_permission_denied_on_owner(op_host: Host, backends: list[SshBackend]) -> None:
    # the directory is the login's, the file root's: the atomic write cannot keep the owner
    u = make_unit(op_host, "kvt-e", dropin=False)
    os.chown(u.dir, *_ids(OP_USER))
    before = u.fragment.read_text()
    b, cfg = await connect(op_host, backends, "e", unit="kvt-e.service", log_file=str(u.log))
    plan = await changes.plan_apply("e", cfg, b, parse_edit_args(["mem-fraction-static=0.82"]), predict=False)  # type: ignore[arg-type]
    out = await service.execute(plan, b)
    assert out.code == 3
    msg = out.messages[-1]
    assert f"cannot write {u.fragment}" in msg
    assert "Operation not permitted" in msg
    assert "the file is unchanged" in msg
    assert u.fragment.read_text() == before
    assert u.fragment.stat().st_uid == 0
    _no_temp_files(u.dir)
    assert out.backup_path
    assert _read(out.backup_path) == before  # restorable copy


def _ids(user: str) -> tuple[int, int]:
    import pwd

    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


@pytest.mark.parametrize("mode", ["short", "error"])
async def test_write_failing_midway(root_host: Host, backends: list[SshBackend], mode: str) -> None:
    u = make_unit(root_host, f"kvt-f{mode}", dropin=False)
    before = u.fragment.read_text()
    b, cfg = await connect(root_host, backends, "f", unit=f"kvt-f{mode}.service", log_file=str(u.log))
    plan = await changes.plan_apply("f", cfg, b, parse_edit_args(["mem-fraction-static=0.82"]), predict=False)  # type: ignore[arg-type]
    flag = root_host.tools.state / "cat.mode"
    flag.write_text(mode)
    try:
        out = await service.execute(plan, b)
    finally:
        flag.unlink()
    assert out.code == 3
    msg = out.messages[-1]
    if mode == "short":
        assert "arrived incomplete; the file was not replaced" in msg
    else:
        assert "No space left on device" in msg
        assert "the file is unchanged" in msg
    assert u.fragment.read_text() == before
    _no_temp_files(u.dir)
    assert "daemon-reload" not in calls(root_host)


async def test_file_changed_between_read_and_write(root_host: Host, backends: list[SshBackend]) -> None:
    u = make_unit(root_host, "kvt-g", dropin=False)
    b, cfg = await connect(root_host, backends, "g", unit="kvt-g.service", log_file=str(u.log))
    plan = await changes.plan_apply("g", cfg, b, parse_edit_args(["mem-fraction-static=0.82"]), predict=False)  # type: ignore[arg-type]
    concurrent = u.fragment.read_text().replace("--port 30000", "--port 30001")
    u.fragment.write_text(concurrent)  # someone else edits meanwhile
    out = await service.execute(plan, b)
    assert out.code == 4
    assert "changed since it was read" in out.messages[-1]
    assert "nothing was written" in out.messages[-1]
    assert u.fragment.read_text() == concurrent  # their edit survives
    assert list(u.dir.iterdir()) == [u.fragment]  # no backup of a file we did not read


async def test_connection_drops_between_write_and_restart(root_host: Host, backends: list[SshBackend]) -> None:
    u = make_unit(root_host, "kvt-h", dropin=False)
    before = u.fragment.read_text()
    proxy = await CutProxy(root_host.sshd.port).start()
    root_host.sshd.trust_port(proxy.port)
    try:
        b, cfg = await connect(root_host, backends, "h", port=proxy.port, unit="kvt-h.service", log_file=str(u.log))
        plan = await changes.plan_apply("h", cfg, b, parse_edit_args(["mem-fraction-static=0.82"]),  # type: ignore[arg-type]
                                        restart=True, timeout=3, predict=False)

        def progress(msg: str) -> None:
            if msg.startswith("systemctl restart"):
                proxy.refuse = True  # the network goes away right before the restart
                proxy.cut()

        out = await service.execute(plan, b, progress, settle_s=0.3)
        assert out.code == 3
        msg = out.messages[-1]
        assert "connection to the host failed" in msg
        assert "the new flags are written" in msg
        assert "was not restarted" in msg
        assert "kvtui rollback h" in msg
        assert get_flag(u.fragment.read_text(), "unit", "mem-fraction-static") == "0.82"
        assert out.backup_path
        assert _read(out.backup_path) == before
        assert not any(x.startswith("restart") for x in calls(root_host))
        # the network comes back: the rollback restores the original through the same path
        proxy.refuse = False
        b2, _ = await connect(root_host, backends, "h", port=proxy.port, unit="kvt-h.service", log_file=str(u.log))
        rb = await changes.plan_rollback("h", cfg, b2)  # type: ignore[arg-type]
        assert rb.backup_path == out.backup_path
        rb_out = await service.execute(rb, b2)
        assert rb_out.code == 0, rb_out.messages
        assert u.fragment.read_text() == before
    finally:
        await proxy.close()


# ---------------------------------------------------------------------------------------------
# a server started by a script (no unit): stop, wait for its GPU memory, start detached
# ---------------------------------------------------------------------------------------------


async def test_script_host_stop_wait_start_detached(root_host: Host, backends: list[SshBackend]) -> None:
    d = root_host.base / "script-host"
    d.mkdir()
    log, pidfile, script = d / "server.log", d / "server.pid", d / "launch.sh"
    engine = root_host.engine_dir / "python3"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        # started by start_command; the flags live here
        export ENGINE_STAY=1
        exec {engine} -m sglang.launch_server \\
          --model-path /models/Llama-3.1-8B \\
          --mem-fraction-static=0.85 \\
          --port 30000
        """))
    script.chmod(0o755)
    start = f"setsid nohup {script} >> {log} 2>&1 < /dev/null & echo $! > {pidfile}"
    stop = f"kill $(cat {pidfile})"
    _sh(start)  # the server runs
    first = int(pidfile.read_text())
    b, cfg = await connect(root_host, backends, "s", log_file=str(log), launch_script=str(script),
                           start_command=start, stop_command=stop)
    plan = await changes.plan_apply("s", cfg, b, parse_edit_args(["mem-fraction-static=0.9"]),  # type: ignore[arg-type]
                                    restart=True, timeout=60, predict=False)
    assert plan.source.kind == "script"
    assert "--mem-fraction-static=0.9 \\" in plan.new_text  # the =-style of its neighbours
    progress: list[str] = []
    out = await service.execute(plan, b, progress.append, stop_wait_s=20)
    assert out.code == 0, progress
    assert any(m.startswith(f"waiting for PIDs {first}") for m in progress)
    assert "the old server's GPU memory is free" in progress
    assert out.boot is not None
    assert out.boot.flags.get("mem_fraction_static") == 0.9
    await b.close()
    # the new server outlives the SSH session
    new = int(pidfile.read_text())
    assert new != first
    await asyncio.sleep(0.3)
    os.kill(new, 0)
    os.kill(new, 15)
    await asyncio.sleep(0)


# ---------------------------------------------------------------------------------------------
# the CLI over SSH
# ---------------------------------------------------------------------------------------------


def test_cli_apply_and_rollback_over_ssh(root_host: Host, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvtui.cli import main

    u = make_unit(root_host, "kvt-i", dropin=False)
    before = u.fragment.read_text()
    with u.log.open("ab") as fh:  # the server's current boot, for the calculator
        subprocess.run([str(root_host.engine_dir / "python3"), "-m", "sglang.launch_server", "--model-path",
                        "/models/Llama-3.1-8B", "--tp", "1", "--mem-fraction-static", "0.85"], stdout=fh, check=True)
    s = root_host.sshd
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(textwrap.dedent(f"""\
        [hosts.gpu]
        ssh = "{s.target}"
        port = {s.port}
        identity_file = "{s.client_key}"
        known_hosts = "{s.known_hosts}"
        unit = "kvt-i.service"
        log_file = "{u.log}"
        """))
    assert main(["--hosts", str(hosts), "apply", "gpu", "--set", "cuda-graph-max-bs=32", "--dry-run"]) == 0
    out, _ = capsys.readouterr()
    assert "+    --cuda-graph-max-bs 32 \\" in out
    assert "$ systemctl daemon-reload" in out  # the exact commands are shown
    assert "Prediction:" in out  # calibrated from the boot in the host's log (or why not)
    assert u.fragment.read_text() == before
    assert main(["--hosts", str(hosts), "apply", "gpu", "--set", "cuda-graph-max-bs=32", "--yes"]) == 0
    out, err = capsys.readouterr()
    assert "systemd's ExecStart carries the new flags" in err
    assert get_flag(u.fragment.read_text(), "unit", "cuda-graph-max-bs") == "32"
    assert main(["--hosts", str(hosts), "rollback", "gpu", "--yes"]) == 0
    assert u.fragment.read_text() == before
    assert [e["action"] for e in read_entries()][-2:] == ["apply", "rollback"]
