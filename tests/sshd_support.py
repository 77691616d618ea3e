"""Reusable SSH test infrastructure: a real OpenSSH sshd on 127.0.0.1, fake GPU-host tools, a real
journal written with systemd-journal-remote, a loopback TCP proxy that cuts connections, and an
in-process asyncssh server.

Use from a test module (``tests/`` is on ``sys.path`` under pytest's default import mode)::

    from sshd_support import SshdInstance, start_sshd, requires_sshd, FakeTools, JournalWriter

    pytestmark = [pytest.mark.sshd, requires_sshd]

    @pytest.fixture(scope="module")
    def sshd(tmp_path_factory):
        tools = FakeTools.create(tmp_path_factory.mktemp("host"))
        inst = start_sshd(tmp_path_factory.mktemp("sshd"), user="root", path_prefix=tools.bin_dir)
        yield inst
        inst.stop()

    cfg = sshd.host_config(unit="sglang.service")     # a HostConfig that reaches it
    backend = SshBackend("t", cfg, ssh_config=[])

``start_sshd`` runs ``/usr/sbin/sshd -D -e -f CFG`` with its own host key, ``AuthorizedKeysFile``
and ``SetEnv PATH=<path_prefix>:…`` so the fake ``systemctl`` / ``nvidia-smi`` / ``journalctl`` /
``docker`` come first (tests must assert that before changing anything:
``sshd.assert_fake_path()``). The daemon is killed by its PID in ``stop()``.

Nothing here talks to anything but 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from kvtui.config import HostConfig

SSHD = Path("/usr/sbin/sshd")
JOURNAL_REMOTE = next(
    (p for p in (Path("/lib/systemd/systemd-journal-remote"), Path("/usr/lib/systemd/systemd-journal-remote"))
     if p.exists()),
    Path("/lib/systemd/systemd-journal-remote"),
)
REAL_JOURNALCTL = shutil.which("journalctl") or "/usr/bin/journalctl"


def sshd_available() -> bool:
    return SSHD.exists() and os.geteuid() == 0


def _require_reason() -> str | None:
    if not SSHD.exists():
        return f"{SSHD} is not installed"
    if os.geteuid() != 0:
        return "the test sshd needs root (to log in as a chosen user)"
    return None


def _required() -> bool:
    return os.environ.get("KVTUI_REQUIRE_SSHD") == "1"


def skip_or_fail(reason: str) -> None:
    """Skip (developer machine) or fail (CI: ``KVTUI_REQUIRE_SSHD=1``) for a missing tool."""
    if _required():
        pytest.fail(f"KVTUI_REQUIRE_SSHD=1 but {reason}")
    pytest.skip(reason)


# Mark a test (or ``pytestmark``) that needs the real sshd: skipped when it is missing, except in
# CI (``KVTUI_REQUIRE_SSHD=1``), where the test runs and ``start_sshd`` fails it.
requires_sshd = pytest.mark.skipif(_require_reason() is not None and not _required(),
                                   reason=_require_reason() or "")

requires_journal_remote = pytest.mark.skipif(
    not JOURNAL_REMOTE.exists() and not _required(),
    reason="systemd-journal-remote is not installed",
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SSHD_START_TIMEOUT = 30.0  # real seconds: a loaded machine starts sshd slowly
PORT_ATTEMPTS = 5


class PortInUse(RuntimeError):
    """The chosen port was bound by someone else between ``free_port()`` and the daemon's bind."""


def _write_key(path: Path, key: asyncssh.SSHKey) -> None:
    key.write_private_key(str(path))
    key.write_public_key(str(path) + ".pub")
    path.chmod(0o600)


# ---------------------------------------------------------------------------------------------
# A real OpenSSH sshd
# ---------------------------------------------------------------------------------------------


@dataclass
class SshdInstance:
    workdir: Path
    port: int
    user: str
    client_key: Path  # the login's private key (identity_file)
    known_hosts: Path  # pins this sshd's host key for [127.0.0.1]:port
    host_key: Path
    bin_dir: Path | None
    path_value: str  # the PATH every session gets
    config_path: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    host: str = "127.0.0.1"

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}"

    def host_config(self, port: int | None = None, **keys: Any) -> HostConfig:
        """A ``HostConfig`` for this sshd (pass ``port=`` to go through a proxy)."""
        keys.setdefault("identity_file", str(self.client_key))
        keys.setdefault("known_hosts", str(self.known_hosts))
        return HostConfig(ssh=self.target, port=port or self.port, **keys)

    def trust_port(self, port: int) -> None:
        """Also pin this sshd's host key for ``[127.0.0.1]:port`` (a proxy in front of it)."""
        pub = asyncssh.read_public_key(str(self.host_key) + ".pub").export_public_key().decode().strip()
        with self.known_hosts.open("a") as f:
            f.write(f"[127.0.0.1]:{port} {pub}\n")

    def ssh_argv(self, command: str, port: int | None = None) -> list[str]:
        """argv for the OpenSSH client running ``command`` on this sshd (for cross-checks)."""
        return [
            "ssh", "-F", "/dev/null", "-p", str(port or self.port), "-i", str(self.client_key),
            "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", self.target, command,
        ]

    def run(self, command: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
        """Run ``command`` over a real ``ssh`` client (blocking; for setup and assertions)."""
        return subprocess.run(self.ssh_argv(command), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)

    def assert_fake_path(self) -> None:
        """The session PATH puts the fake tools first: check before any test changes anything."""
        assert self.bin_dir is not None, "this sshd was started without a fake-tools dir"
        out = self.run("echo \"$PATH\"; command -v systemctl; command -v nvidia-smi; command -v journalctl")
        assert out.returncode == 0, out.stderr
        lines = out.stdout.split()
        # the login shell's rc files may prepend their own dirs; the fakes must precede the system's
        dirs = lines[0].split(":")
        assert str(self.bin_dir) in dirs, lines
        assert dirs.index(str(self.bin_dir)) < min(dirs.index(d) for d in ("/usr/bin", "/bin") if d in dirs), lines
        assert lines[1:] == [str(self.bin_dir / t) for t in ("systemctl", "nvidia-smi", "journalctl")], lines

    def rotate_host_key(self) -> None:
        """Restart the daemon with a *new* host key (known_hosts keeps the old one)."""
        self.stop()
        _write_key(self.host_key, asyncssh.generate_private_key("ssh-ed25519"))
        self._spawn()

    def _log_since(self, offset: int) -> str:
        """The log from byte ``offset`` on (sshd ends its lines with CRLF: text offsets differ)."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _spawn(self) -> None:
        """Start the daemon and return once *it* listens on ``port`` (its log says so: a banner
        on the port could be another sshd's — another test worker, another run on this machine —
        that took the port first). A port taken first raises ``PortInUse``."""
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        check = subprocess.run([str(SSHD), "-t", "-f", str(self.config_path)], capture_output=True, text=True,
                               check=False)
        if check.returncode != 0:
            raise RuntimeError(f"sshd -t rejected {self.config_path}: {check.stderr}")
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0  # a respawn appends
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(self.config_path)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )
        log.close()
        listening = f"Server listening on {self.host} port {self.port}."
        deadline = time.monotonic() + SSHD_START_TIMEOUT
        while time.monotonic() < deadline:
            exited = self.proc.poll() is not None
            text = self._log_since(offset)
            if listening in text:
                break
            if exited:
                self.proc = None
                if "Address already in use" in text:
                    raise PortInUse(f"port {self.port} was taken before sshd bound it: {text[-500:]}")
                raise RuntimeError(f"sshd exited: {text[-2000:]}")
            time.sleep(0.02)
        else:
            raise RuntimeError(f"sshd did not start listening within {SSHD_START_TIMEOUT:.0f} s")
        with socket.create_connection((self.host, self.port), timeout=SSHD_START_TIMEOUT) as s:
            s.settimeout(SSHD_START_TIMEOUT)
            banner = s.recv(64)
        if not banner.startswith(b"SSH-"):
            raise RuntimeError(f"sshd on port {self.port} answered {banner!r}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None


def ensure_user(name: str) -> pwd.struct_passwd:
    """An unlocked login account (created with ``useradd`` when missing; root only)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True, capture_output=True)
    # an unlocked account with no password: "*" not "!"
    subprocess.run(["usermod", "-p", "*", name], check=True, capture_output=True)
    return pwd.getpwnam(name)


def start_sshd(
    workdir: Path,
    *,
    user: str = "root",
    path_prefix: Path | None = None,
    extra_env: Mapping[str, str] | None = None,
    port: int | None = None,
    extra_config: Iterable[str] = (),
) -> SshdInstance:
    """Start an sshd on 127.0.0.1 that lets ``user`` log in with a fresh key. ``path_prefix`` is put
    first in every session's PATH (``SetEnv``); ``extra_env`` adds more variables."""
    if not sshd_available():
        skip_or_fail(_require_reason() or "sshd unavailable")
    workdir.mkdir(parents=True, exist_ok=True)
    os.chmod(workdir, 0o755)
    account = ensure_user(user)
    host_key = workdir / "ssh_host_ed25519_key"
    _write_key(host_key, asyncssh.generate_private_key("ssh-ed25519"))
    client_key = workdir / "id_ed25519"
    ckey = asyncssh.generate_private_key("ssh-ed25519")
    _write_key(client_key, ckey)
    auth_dir = workdir
    if account.pw_uid != 0:
        # sshd reads authorized_keys as the user: pytest's temp dirs (0700) are not traversable
        auth_dir = Path(tempfile.mkdtemp(prefix="kvtui-sshd-keys-", dir="/tmp"))
        auth_dir.chmod(0o755)
        atexit.register(shutil.rmtree, auth_dir, True)
    auth = auth_dir / f"authorized_keys_{user}"
    auth.write_bytes(ckey.export_public_key())
    os.chmod(auth, 0o644)
    if account.pw_uid != 0:  # the login must be able to read the key (StrictModes is off)
        os.chown(auth, account.pw_uid, account.pw_gid)
    # free_port() only names a port free a moment ago: another process (a test worker, another
    # run, a client's ephemeral port) may bind it before sshd does; the daemon then exits and
    # the next attempt takes another port (a port the caller chose is not changed).
    chosen = port
    for attempt in range(PORT_ATTEMPTS):
        port = chosen or free_port()
        known_hosts = workdir / "known_hosts"
        host_pub = asyncssh.read_public_key(str(host_key) + ".pub").export_public_key().decode().strip()
        known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub}\n")
        std_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        path_value = f"{path_prefix}:{std_path}" if path_prefix else std_path
        env = {"PATH": path_value, **(extra_env or {})}
        setenv = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        config = workdir / "sshd_config"
        config.write_text(
            textwrap.dedent(
                f"""\
                ListenAddress 127.0.0.1
                Port {port}
                HostKey {host_key}
                PidFile {workdir / "sshd.pid"}
                AuthorizedKeysFile {auth_dir}/authorized_keys_%u
                UsePAM no
                StrictModes no
                PasswordAuthentication no
                KbdInteractiveAuthentication no
                PubkeyAuthentication yes
                PermitRootLogin prohibit-password
                AllowUsers {user}
                SetEnv {setenv}
                PrintMotd no
                PrintLastLog no
                MaxSessions 64
                MaxStartups 64
                LogLevel VERBOSE
                """
            )
            + "".join(line + "\n" for line in extra_config)
        )
        inst = SshdInstance(
            workdir=workdir, port=port, user=user, client_key=client_key, known_hosts=known_hosts, host_key=host_key,
            bin_dir=path_prefix, path_value=path_value, config_path=config, log_path=workdir / "sshd.log",
        )
        try:
            inst._spawn()
        except PortInUse:
            if chosen is not None or attempt == PORT_ATTEMPTS - 1:
                raise
            continue  # another process took the port after free_port(): take another
        return inst
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------------
# Fake GPU-host tools (PATH prefix) and a real journal
# ---------------------------------------------------------------------------------------------

_FAKE_SYSTEMCTL = r'''
"""Fake systemctl: records every call; answers `show` from STATE/units/UNIT/PROP files.

STATE/systemctl.calls gets one line per call (args joined by spaces, shell-quoted).
A hook STATE/hooks/<verb> (executable) runs with the unit as argument for start/stop/restart/
daemon-reload, so a test can make a restart do something real.
"""
import os, shlex, subprocess, sys
STATE = os.environ.get("KVTUI_FAKE_STATE") or {state!r}
args = sys.argv[1:]
with open(os.path.join(STATE, "systemctl.calls"), "a") as f:
    f.write(" ".join(shlex.quote(a) for a in args) + "\n")
opts = [a for a in args if a.startswith("-")]
words = []
props = []
i = 0
while i < len(args):
    a = args[i]
    if a in ("-p", "--property"):
        props += args[i + 1].split(","); i += 2; continue
    if a.startswith("--property="):
        props += a.split("=", 1)[1].split(","); i += 1; continue
    if a.startswith("-p") and len(a) > 2:
        props += a[2:].split(","); i += 1; continue
    if not a.startswith("-"):
        words.append(a)
    i += 1
verb = words[0] if words else ""
units = words[1:]
def unit_dir(u):
    if "." not in u: u += ".service"
    return os.path.join(STATE, "units", u)
if verb == "show":
    value_only = "--value" in opts
    for u in units or [""]:
        d = unit_dir(u)
        for p in props:
            try:
                v = open(os.path.join(d, p)).read().rstrip("\n")
            except OSError:
                v = ""
            print(v if value_only else f"{{p}}={{v}}")
    sys.exit(0)
if verb == "is-active":
    try:
        v = open(os.path.join(unit_dir(units[0]), "ActiveState")).read().strip()
    except (OSError, IndexError):
        v = "inactive"
    print(v); sys.exit(0 if v == "active" else 3)
if verb in ("start", "stop", "restart", "daemon-reload", "reload", "kill", "reset-failed"):
    hook = os.path.join(STATE, "hooks", verb)
    if os.access(hook, os.X_OK):
        sys.exit(subprocess.call([hook, *units]))
    sys.exit(0)
if verb == "cat":
    for u in units:
        try:
            sys.stdout.write(open(os.path.join(unit_dir(u), "unit_file")).read())
        except OSError:
            print(f"No files found for {{u}}.", file=sys.stderr); sys.exit(1)
    sys.exit(0)
print(f"fake systemctl: unsupported: {{args}}", file=sys.stderr)
sys.exit(1)
'''

_FAKE_NVIDIA_SMI = r'''
"""Fake nvidia-smi: --query-gpu answers STATE/gpu.csv (re-read every tick, so tests can change
it); -lms N / -l N repeat every interval; --query-compute-apps answers STATE/apps.csv.
STATE/nvidia-smi.delay (seconds) delays each tick (a slow host)."""
import os, sys, time
STATE = os.environ.get("KVTUI_FAKE_STATE") or {state!r}
args = sys.argv[1:]
def read(name):
    try:
        return open(os.path.join(STATE, name)).read()
    except OSError:
        return ""
interval = None
for i, a in enumerate(args):
    if a.startswith("-lms="): interval = int(a[5:]) / 1000
    elif a == "-lms": interval = int(args[i + 1]) / 1000
    elif a.startswith("--loop-ms="): interval = int(a.split("=")[1]) / 1000
    elif a in ("-l", "--loop"): interval = float(args[i + 1])
    elif a.startswith("--loop="): interval = float(a.split("=")[1])
if any(a.startswith("--query-compute-apps") for a in args):
    sys.stdout.write(read("apps.csv")); sys.exit(0)
if not any(a.startswith("--query-gpu") for a in args):
    print("fake nvidia-smi: unsupported", args, file=sys.stderr); sys.exit(2)
while True:
    delay = read("nvidia-smi.delay").strip()
    if delay:
        time.sleep(float(delay))
    sys.stdout.write(read("gpu.csv")); sys.stdout.flush()
    if interval is None:
        break
    time.sleep(interval)
'''

_FAKE_DOCKER = r'''
"""Fake docker: `logs [-f] [--timestamps] [--since TS] [--until TS] [--tail N] NAME` prints
STATE/docker.log (lines "TS message", TS as docker prints it), following appends when -f, until
STATE/docker.inspect.State says the container stopped ("false …"); `inspect -f FMT NAME` answers
STATE/docker.inspect.<key> (the whole state line, "RUNNING STARTEDAT EXITCODE OOMKILLED", for
kvtui's liveness format; `{{json .Path}} {{json .Args}}`: STATE/docker.inspect.Cmd)."""
import os, sys, time
STATE = os.environ.get("KVTUI_FAKE_STATE") or {state!r}
args = sys.argv[1:]
def state_line():
    """The container's state: a real process (STATE/docker.pid) runs it when that file exists."""
    try:
        pid = int(open(os.path.join(STATE, "docker.pid")).read())
    except (OSError, ValueError):
        try:
            return open(os.path.join(STATE, "docker.inspect.State")).read().strip()
        except OSError:
            return None
    try:
        alive = open(f"/proc/{{pid}}/stat").read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        alive = False
    started = open(os.path.join(STATE, "docker.inspect.StartedAt")).read().strip()
    return f"{{'true' if alive else 'false'}} {{started}} {{0 if alive else 137}} false"
def stopped():
    line = state_line()
    return line is not None and line.startswith("false")
if args[:1] == ["inspect"]:
    fmt = args[args.index("-f") + 1] if "-f" in args else ""
    if fmt.startswith("{{{{.State.Running}}}} "):
        line = state_line()
        if line is None:
            print("Error: No such object: " + args[-1], file=sys.stderr); sys.exit(1)
        print(line); sys.exit(0)
    else:
        key = ("StartedAt" if "StartedAt" in fmt else "Pid" if "Pid" in fmt else "Cmd" if ".Args" in fmt
               else "Running")
    try:
        print(open(os.path.join(STATE, "docker.inspect." + key)).read().strip()); sys.exit(0)
    except OSError:
        print("Error: No such object: " + args[-1], file=sys.stderr); sys.exit(1)
if args[:1] == ["logs"]:
    # as docker's daemon does (daemon/logger: since inclusive — not Before(since) —, until
    # inclusive — stops only After(until) —, --tail N first: the last N lines, then the filters;
    # --timestamps: RFC3339Nano with 9 fraction digits, UTC); every call is logged with the bytes
    # it wrote (STATE/docker.calls) so tests can tell what a command read
    import calendar, re, signal
    follow = "-f" in args or "--follow" in args
    ts = "--timestamps" in args or "-t" in args
    opt = {{}}
    i = 1
    while i < len(args):
        a = args[i]
        if a in ("--since", "--until", "--tail", "-n"):
            opt["tail" if a == "-n" else a[2:]] = args[i + 1]; i += 2; continue
        for k in ("since", "until", "tail"):
            if a.startswith("--" + k + "="):
                opt[k] = a.split("=", 1)[1]
        i += 1
    def to_fixed(v):
        """A --since/--until value (RFC 3339 with any fraction and zone, or unix seconds[.nanos]) as
        docker's fixed stamp, which sorts as a string."""
        m = re.match(r"^(\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{{1,9}}))?(Z|[+-]\d\d:\d\d)$", v)
        if m:
            sec = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
            if m.group(3) != "Z":
                sign = 1 if m.group(3)[0] == "+" else -1
                sec -= sign * (int(m.group(3)[1:3]) * 3600 + int(m.group(3)[4:6]) * 60)
            frac = (m.group(2) or "").ljust(9, "0")
        else:
            whole, _, frac = v.partition(".")
            sec, frac = int(whole), frac.ljust(9, "0")
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)) + "." + frac + "Z"
    since = to_fixed(opt["since"]) if "since" in opt else None
    until = to_fixed(opt["until"]) if opt.get("until") not in (None, "", "0") else None
    tail = opt.get("tail", "all")
    tail_n = int(tail) if tail.isdigit() else None
    path = os.path.join(STATE, "docker.log")
    def log_call(n):
        try:
            with open(os.path.join(STATE, "docker.calls"), "a") as f:
                f.write(" ".join(args) + f" bytes={{n}}\n")
        except OSError:
            pass
    def last_lines(n):
        """The byte offset where the last ``n`` lines begin (read backwards, as docker does)."""
        try:
            f = open(path, "rb")
        except OSError:
            return 0
        with f:
            f.seek(0, 2); end = f.tell(); pos = end; count = -1 if n else 0
            if n == 0:
                return end
            while pos > 0:
                step = min(1 << 16, pos); pos -= step; f.seek(pos); block = f.read(step)
                if pos + step == end and block.endswith(b"\n"):
                    block = block[:-1]
                k = len(block)
                while True:
                    k = block.rfind(b"\n", 0, k)
                    if k < 0:
                        break
                    count += 1
                    if count + 1 >= n:
                        return pos + k + 1
            return 0
    pos = last_lines(tail_n) if tail_n is not None else 0
    out = sys.stdout.buffer
    written = 0
    done = False
    try:
        while True:
            try:
                with open(path, "rb") as f:
                    f.seek(pos); data = f.read()
            except OSError:
                data = b""
            cut = data.rfind(b"\n") + 1
            data = data[:cut]; pos += cut
            buf = []
            for line in data.splitlines(keepends=True):
                stamp, _, rest = line.partition(b" ")
                st = stamp.decode()
                if len(st) != 30 or not st.endswith("Z"):
                    try:
                        st = to_fixed(st)
                    except ValueError:
                        pass
                if since and st < since:
                    continue
                if until and st > until:
                    done = True
                    break
                buf.append(line if ts else rest)
                if len(buf) >= 512:
                    chunk = b"".join(buf); out.write(chunk); written += len(chunk); buf = []
            chunk = b"".join(buf); out.write(chunk); written += len(chunk)
            out.flush()
            if done or not follow or stopped():
                break
            time.sleep(0.05)
    except BrokenPipeError:
        log_call(written)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGPIPE)
    log_call(written)
    sys.exit(0)
print("fake docker: unsupported", args, file=sys.stderr); sys.exit(1)
'''


@dataclass
class FakeTools:
    """A PATH-prefix dir of fake tools (``systemctl``, ``nvidia-smi``, ``docker``) and a
    ``journalctl`` wrapper that execs the real one on ``journal_dir``; their state in ``state``."""

    root: Path
    bin_dir: Path
    state: Path
    journal_dir: Path

    @classmethod
    def create(cls, root: Path, python: str = sys.executable) -> FakeTools:
        bin_dir, state, jdir = root / "bin", root / "state", root / "journal"
        for d in (bin_dir, state, state / "units", state / "hooks", jdir):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
        for d in (bin_dir, state, state / "units", jdir):
            os.chmod(d, 0o777)
        for name, body in (("systemctl", _FAKE_SYSTEMCTL), ("nvidia-smi", _FAKE_NVIDIA_SMI),
                           ("docker", _FAKE_DOCKER)):
            p = bin_dir / name
            p.write_text(f"#!{python}\n" + body.format(state=str(state)))
            p.chmod(0o755)
        jc = bin_dir / "journalctl"
        jc.write_text(f"#!/bin/sh\nexec {shlex.quote(REAL_JOURNALCTL)} --directory={shlex.quote(str(jdir))} \"$@\"\n")
        jc.chmod(0o755)
        (state / "systemctl.calls").touch()
        os.chmod(state / "systemctl.calls", 0o666)
        return cls(root=root, bin_dir=bin_dir, state=state, journal_dir=jdir)

    def set_unit(self, unit: str, **props: str | int) -> None:
        """Answer ``systemctl show -p PROP UNIT`` with these values."""
        d = self.state / "units" / (unit if "." in unit else unit + ".service")
        d.mkdir(parents=True, exist_ok=True)
        for k, v in props.items():
            (d / k).write_text(f"{v}\n")

    def systemctl_calls(self) -> list[str]:
        return (self.state / "systemctl.calls").read_text().splitlines()

    def set_gpus(self, csv: str) -> None:
        _atomic_write(self.state / "gpu.csv", csv)

    def set_apps(self, csv: str) -> None:
        _atomic_write(self.state / "apps.csv", csv)

    def set_gpu_delay(self, seconds: float | None) -> None:
        _atomic_write(self.state / "nvidia-smi.delay", "" if seconds is None else str(seconds))


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o666)
    tmp.replace(path)


@dataclass
class JournalWriter:
    """Writes a real journal file with ``systemd-journal-remote`` from export format while
    followers read it (``journalctl --directory``): cursors are journald's own.

    ``write()`` buffers entries; ``flush()`` appends them in one ``systemd-journal-remote`` run
    (which closes the file, so ``journalctl -f`` is woken reliably; a long-running
    journal-remote does not always notify followers of its writes)."""

    directory: Path
    boot_id: str = "0123456789abcdef0123456789abcdef"
    hostname: str = "gpu-test"
    autoflush: int = 0  # flush every N entries (0: only on flush()/close())
    _pending: bytearray = field(default_factory=bytearray)
    _pending_count: int = 0
    _seq: int = 0
    _t0_us: int = field(default_factory=lambda: int(time.time() * 1_000_000))

    @property
    def path(self) -> Path:
        return self.directory / "remote.journal"

    def start(self) -> JournalWriter:
        if not JOURNAL_REMOTE.exists():
            skip_or_fail(f"{JOURNAL_REMOTE} is not installed (Debian package systemd-journal-remote)")
        self.directory.mkdir(parents=True, exist_ok=True)
        return self

    def write(self, message: str | bytes, **fields: str | int) -> None:
        """One entry; ``fields`` e.g. ``_SYSTEMD_UNIT="sglang.service", _PID=7``."""
        self._seq += 1
        base: dict[str, str | int] = {
            "__REALTIME_TIMESTAMP": self._t0_us + self._seq * 1000,
            "__MONOTONIC_TIMESTAMP": 1_000_000 + self._seq * 1000,
            "_BOOT_ID": self.boot_id,
            "_HOSTNAME": self.hostname,
            "SYSLOG_IDENTIFIER": "python3",
            "PRIORITY": 6,
        }
        base.update(fields)
        out = self._pending
        for k, v in base.items():
            out += f"{k}={v}\n".encode()
        msg = message.encode() if isinstance(message, str) else message
        if b"\n" in msg:  # binary-safe field form: NAME\n<le64 size><data>\n
            out += b"MESSAGE\n" + len(msg).to_bytes(8, "little") + msg + b"\n"
        else:
            out += b"MESSAGE=" + msg + b"\n"
        out += b"\n"
        self._pending_count += 1
        if self.autoflush and self._pending_count >= self.autoflush:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        res = subprocess.run([str(JOURNAL_REMOTE), f"--output={self.path}", "-"], input=bytes(self._pending),
                             capture_output=True, timeout=30, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"systemd-journal-remote failed: {res.stderr.decode(errors='replace')}")
        self._pending.clear()
        self._pending_count = 0

    def close(self) -> None:
        self.flush()


def processes_matching(marker: str, names: Iterable[str] = ("journalctl", "tail", "nvidia-smi", "docker"),
                       exclude: Iterable[str] = ()) -> list[str]:
    """``ps`` lines of processes whose command line holds ``marker`` and one of ``names`` and
    none of ``exclude`` (the remote followers a test started; ``marker`` is a unique temp path
    or unit name). kvtui's guard shells hold the follower's command line too and contain
    ``kvtui-guard``: exclude that to count the followers themselves."""
    exclude = tuple(exclude)
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,user=,args="], capture_output=True, text=True,
                         check=True).stdout
    me = str(os.getpid())
    hits = []
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 4 or parts[0] == me:
            continue
        args = parts[3]
        if (marker in args and any(n in args for n in names) and not args.startswith("ps ")
                and not any(x in args for x in exclude)):
            hits.append(line.strip())
    return hits


async def wait_no_processes(marker: str, names: Iterable[str] = ("journalctl", "tail", "nvidia-smi", "docker"),
                            timeout: float = 5.0, exclude: Iterable[str] = ()) -> list[str]:
    """Poll until no matching process is left (or the timeout); returns what is left."""
    names, exclude = tuple(names), tuple(exclude)
    deadline = time.monotonic() + timeout
    left = processes_matching(marker, names, exclude)
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        left = processes_matching(marker, names, exclude)
    return left


# ---------------------------------------------------------------------------------------------
# A loopback TCP proxy that can cut every connection through it
# ---------------------------------------------------------------------------------------------


class CutProxy:
    """``127.0.0.1:<port>`` -> ``127.0.0.1:<target>``. ``cut()`` aborts every live connection
    (both sides see a reset), like a network drop; new connections are accepted afterwards
    unless ``refuse`` is set. ``hold()``: a slow network — new connections are accepted but
    not passed on (``held`` counts them) until ``release()``."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections = 0
        self.cuts = 0
        self.refuse = False
        self._server: asyncio.base_events.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._open = asyncio.Event()
        self._open.set()
        self.held = 0  # connections waiting for release()

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    async def start(self) -> CutProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refuse:
            writer.transport.abort()
            return
        if not self._open.is_set():
            self.held += 1
            await self._open.wait()
            self.held -= 1
        try:
            ur, uw = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        pair = (writer, uw)
        self._pairs.add(pair)

        async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                w.transport.abort()

        t1 = asyncio.create_task(pump(reader, uw))
        t2 = asyncio.create_task(pump(ur, writer))
        for t in (t1, t2):
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        await asyncio.gather(t1, t2, return_exceptions=True)
        self._pairs.discard(pair)

    def cut(self) -> int:
        """Abort every live connection; returns how many were cut."""
        n = len(self._pairs)
        for a, b in list(self._pairs):
            a.transport.abort()
            b.transport.abort()
        self._pairs.clear()
        self.cuts += 1
        return n

    @property
    def live(self) -> int:
        return len(self._pairs)

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


# ---------------------------------------------------------------------------------------------
# An in-process asyncssh server (style.md §7, option 1)
# ---------------------------------------------------------------------------------------------

Handler = Callable[[asyncssh.SSHServerProcess[bytes]], Awaitable[None]]


class _NoAuthServer(asyncssh.SSHServer):
    def __init__(self, owner: FakeSshServer) -> None:
        self.owner = owner

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.owner.connections.append(conn)

    def begin_auth(self, username: str) -> bool:
        return False  # no authentication needed


@dataclass
class FakeSshServer:
    """An asyncssh server in the test's own event loop. ``handler(process)`` answers each command
    (``process.command`` is the exact string the client sent; see ``inner_command``)."""

    handler: Handler
    workdir: Path
    port: int = 0
    host_key: asyncssh.SSHKey = field(default_factory=lambda: asyncssh.generate_private_key("ssh-ed25519"))
    commands: list[str] = field(default_factory=list)
    connections: list[asyncssh.SSHServerConnection] = field(default_factory=list)
    _server: asyncssh.SSHAcceptor | None = None

    @property
    def known_hosts(self) -> Path:
        return self.workdir / "known_hosts"

    async def start(self) -> FakeSshServer:
        async def factory(process: asyncssh.SSHServerProcess[bytes]) -> None:
            self.commands.append(process.command or "")
            try:
                await self.handler(process)
            except (asyncssh.Error, OSError, BrokenPipeError):
                pass
            finally:
                if not process.is_closing():
                    process.exit(0)

        self._server = await asyncssh.create_server(
            lambda: _NoAuthServer(self), "127.0.0.1", self.port, server_host_keys=[self.host_key],
            process_factory=factory, encoding=None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.workdir.mkdir(parents=True, exist_ok=True)
        pub = self.host_key.export_public_key().decode().strip()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {pub}\n")
        return self

    def host_config(self, port: int | None = None, **keys: Any) -> HostConfig:
        keys.setdefault("unit", "sglang.service")
        keys.setdefault("known_hosts", str(self.known_hosts))
        return HostConfig(ssh="tester@127.0.0.1", port=port or self.port, **keys)

    def drop_connections(self) -> None:
        for c in self.connections:
            c.abort()
        self.connections.clear()

    async def close(self) -> None:
        self.drop_connections()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@contextlib.asynccontextmanager
async def fake_ssh_server(handler: Handler, workdir: Path) -> AsyncIterator[FakeSshServer]:
    srv = await FakeSshServer(handler, workdir).start()
    try:
        yield srv
    finally:
        await srv.close()


class ThreadedFakeSshServer:
    """A ``FakeSshServer`` on its own event loop in a thread, for code under test that runs its
    own ``asyncio.run`` (CLI commands). ``handler`` runs on the server's loop."""

    def __init__(self, handler: Handler, workdir: Path) -> None:
        import threading

        self._handler = handler
        self._workdir = workdir
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.server: FakeSshServer | None = None

    def __enter__(self) -> FakeSshServer:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(FakeSshServer(self._handler, self._workdir).start(), self._loop)
        self.server = fut.result(timeout=10)
        return self.server

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            asyncio.run_coroutine_threadsafe(self.server.close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


def inner_command(command: str) -> str:
    """The command inside kvtui's stream guard (``sh -c '<guard> CMD …'``), else ``command``."""
    from kvtui.hosts.shellcmd import unwrap_guard

    return unwrap_guard(command)
