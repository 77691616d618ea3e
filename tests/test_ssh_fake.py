"""SshBackend against an in-process asyncssh server (fast): connection states, host keys,
lossless journal resume across server-side drops, GPU stream and staleness, one-shot commands.

The fake host answers the *commands kvtui builds* (``kvtui.hosts.shellcmd``), unwrapping the
stream guard; it is not a shell."""

from __future__ import annotations

import asyncio
import json
import random
import re
import shlex
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from sshd_support import FakeSshServer, fake_ssh_server, inner_command

from kvtui.config import HostConfig
from kvtui.engines.events import LogRecord
from kvtui.hosts import shellcmd as C
from kvtui.hosts.backend import BackendError, ConnState, HostBackend, LogStart
from kvtui.hosts.ssh import Backoff, SshBackend

GPU_CSV = "".join(
    f"{i}, GPU-{i:08x}-0000-0000-0000-000000000000, NVIDIA H100 80GB HBM3, {1000 + i * 10}, 81559, {i}, 40, 100.5\n"
    for i in range(8)
)


class FakeHost:
    """A scripted GPU host: a journal of N entries (cursors c1..cN) that grows, nvidia-smi."""

    def __init__(self, n: int = 0, invocation_start: int = 1) -> None:
        self.entries: list[dict[str, str]] = []
        self.new_entry = asyncio.Event()
        self.invocation_start = invocation_start
        self.gpu_csv = GPU_CSV
        self.gpu_paused = asyncio.Event()
        self.gpu_paused.set()
        self.old_driver = False  # an nvidia-smi that knows no power.limit / throttle reasons
        self.follow_commands: list[str] = []
        self.ran: list[str] = []
        for _ in range(n):
            self.add()

    def add(self, text: str | None = None) -> None:
        i = len(self.entries) + 1
        self.entries.append({
            "__CURSOR": f"s=fake;i={i}",
            "__REALTIME_TIMESTAMP": str(1_700_000_000_000_000 + i * 1000),
            "_PID": "4242",
            "SYSLOG_IDENTIFIER": "python3",
            "MESSAGE": text if text is not None else f"[TP0] line {i}",
        })
        self.new_entry.set()
        self.new_entry = asyncio.Event()

    def index_of(self, cursor: str) -> int:
        return int(cursor.rsplit("=", 1)[1]) - 1

    async def handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        cmd = process.command or ""
        inner = inner_command(cmd)
        self.ran.append(inner)
        if "journalctl" in inner and " -f" in inner:
            await self._follow(process, inner)
        elif "invocation=" in inner:  # journal_boot_start
            e = self.entries[self.invocation_start - 1] if self.entries else None
            process.stdout.write(b"invocation=0123456789abcdef0123456789abcdef\n")
            if e:
                process.stdout.write(json.dumps(e).encode() + b"\n")
            process.exit(0)
        elif "journalctl" in inner and "-n 1" in inner:  # journal_last_cursor
            if self.entries:
                process.stdout.write(json.dumps(self.entries[-1]).encode() + b"\n")
            process.exit(0)
        elif inner.startswith("nvidia-smi --query-gpu") and self.old_driver and "power.limit" in inner:
            process.stderr.write(b'Field "power.limit" is not a valid field to query.\n')
            process.exit(2)
        elif inner.startswith("nvidia-smi --query-gpu") and "-lms" in inner:
            await self._gpu(process, inner)
        elif inner.startswith("nvidia-smi --query-gpu"):
            process.stdout.write(self.gpu_csv.encode())
            process.exit(0)
        elif inner.startswith("nvidia-smi --query-compute-apps"):
            process.stdout.write(b"GPU-00000001-0000-0000-0000-000000000000, 4242, python3, 70000\n"
                                 b"GPU-00000005-0000-0000-0000-000000000000, 999, python, 512\n")
            process.exit(0)
        elif inner == "cat":  # echo stdin back
            data = await process.stdin.read()
            process.stdout.write(data)
            process.exit(3)
        elif inner.startswith("echo "):
            process.stdout.write(" ".join(shlex.split(inner)[1:]).encode() + b"\n")
            process.exit(0)
        elif inner.startswith("sleep "):
            await asyncio.sleep(float(inner.split()[1]))
            process.exit(0)
        else:
            process.stderr.write(f"fake host: not found: {inner[:80]}\n".encode())
            process.exit(127)

    async def _follow(self, process: asyncssh.SSHServerProcess[bytes], inner: str) -> None:
        if "kvtui:startup" in inner:  # commands.journal_uptime: a short journal reads to its end
            await self._uptime(process, inner)
            return
        self.follow_commands.append(inner)
        m = re.search(r"--after-cursor=(\S+)", inner)
        c = re.search(r"--cursor=(\S+)", inner)
        if m:
            pos = self.index_of(shlex.split(m.group(1))[0]) + 1
        elif c:
            pos = self.index_of(shlex.split(c.group(1))[0])
        elif "-n 0" in inner:
            pos = len(self.entries)
        else:
            pos = 0
        if "--no-tail" not in inner and not re.search(r" -n \d", inner):
            pos = max(pos, len(self.entries) - 10)  # like journalctl -f: only the last 10 entries
        while True:
            while pos < len(self.entries):
                process.stdout.write(json.dumps(self.entries[pos]).encode() + b"\n")
                pos += 1
                if pos % 7 == 0:
                    await process.stdout.drain()
            await self.new_entry.wait()

    async def _uptime(self, process: asyncssh.SSHServerProcess[bytes], inner: str) -> None:
        """``commands.journal_uptime`` on a journal this short: the startup part reaches the
        journal's end (``stop=0``), then ``-f`` after its last entry. Recorded in
        ``follow_commands`` as ``uptime --cursor=…`` / ``uptime --after-cursor=…``."""
        script = shlex.split(inner)[-1]
        so = re.search(r"(--(?:after-)?cursor=)(\S+)", script)
        assert so is not None, script
        self.follow_commands.append(f"uptime {so.group(1)}{so.group(2)}")
        pos = self.index_of(shlex.split(so.group(2))[0]) + (1 if so.group(1) == "--after-cursor=" else 0)
        end = len(self.entries)
        for e in self.entries[pos:end]:
            process.stdout.write(json.dumps(e).encode() + b"\n")
        last = self.entries[end - 1] if end > pos else None
        cur = last["__CURSOR"] if last else "-"
        ts = last["__REALTIME_TIMESTAMP"] if last else "-"
        process.stdout.write(f"\0kvtui:startup stop=0 cursor={cur} ts={ts} next=-\n".encode())
        pos = end
        while True:
            while pos < len(self.entries):
                process.stdout.write(json.dumps(self.entries[pos]).encode() + b"\n")
                pos += 1
            await self.new_entry.wait()

    async def _gpu(self, process: asyncssh.SSHServerProcess[bytes], inner: str) -> None:
        interval = int(inner.rsplit("-lms", 1)[1].split()[0]) / 1000
        while True:
            await self.gpu_paused.wait()
            process.stdout.write(self.gpu_csv.encode())
            await asyncio.sleep(interval)


@pytest.fixture
async def host_and_server(tmp_path: Path) -> AsyncIterator[tuple[FakeHost, FakeSshServer]]:
    host = FakeHost(n=0)
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        yield host, srv


def backend(srv: FakeSshServer, **keys: Any) -> SshBackend:
    return SshBackend("gpu-a", srv.host_config(**keys), ssh_config=[], connect_timeout=5,
                      backoff=Backoff(initial=0.05, cap=0.2, rng=random.Random(1)), keepalive_interval=5)


async def wait_until(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def collect(it: AsyncIterator[list[LogRecord]], n: int, timeout: float = 60.0) -> list[LogRecord]:
    out: list[LogRecord] = []

    async def go() -> None:
        async for batch in it:
            out.extend(batch)
            if len(out) >= n:
                return

    await asyncio.wait_for(go(), timeout)
    return out


async def test_connect_run_and_protocol(host_and_server: tuple[FakeHost, FakeSshServer]) -> None:
    _host, srv = host_and_server
    b = backend(srv)
    assert isinstance(b, HostBackend)
    await b.start()
    st = b.status()
    assert st.state is ConnState.CONNECTED
    assert st.detail == f"tester@127.0.0.1:{srv.port}"
    assert st.strict_host_key is True
    res = await b.run("echo 'a b'")
    assert (res.exit_status, res.stdout, res.ok) == (0, "a b\n", True)
    res = await b.run("cat", input=b"payload\xff")
    assert res.exit_status == 3
    assert res.stdout == "payload\ufffd"
    res = await b.run("nope")
    assert res.exit_status == 127
    assert "not found" in res.stderr
    with pytest.raises(BackendError, match=r"timed out after 0\.2 s"):
        await b.run("sleep 5", timeout=0.2)
    await b.close()
    assert b.status().state is ConnState.CLOSED
    with pytest.raises(BackendError, match="closed"):
        await b.run("echo x")


async def test_unknown_host_key_refused_with_fingerprint_then_trusted(tmp_path: Path) -> None:
    host = FakeHost()
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        kh = tmp_path / "empty_known_hosts"
        kh.write_text("")
        b = SshBackend("gpu-a", srv.host_config(known_hosts=str(kh)), ssh_config=[], connect_timeout=5)
        with pytest.raises(BackendError) as ei:
            await b.start()
        fp = srv.host_key.get_fingerprint("sha256")
        st = b.status()
        assert st.state is ConnState.HOSTKEY_REFUSED
        assert st.fingerprint == fp
        assert fp in str(ei.value)
        assert "is not known" in st.detail
        assert f"ssh-keyscan -p {srv.port} 127.0.0.1 >> {kh}" in st.detail
        assert host.ran == []  # nothing ran on an untrusted host
        # refused is not retried blindly
        await asyncio.sleep(0.3)
        assert len(srv.connections) == 2  # the refused attempt and the fingerprint probe only
        path = await b.trust_host_key()
        assert path == kh
        assert f"[127.0.0.1]:{srv.port} ssh-ed25519 " in kh.read_text()
        assert b.status().state is ConnState.CONNECTED
        assert (await b.run("echo ok")).stdout == "ok\n"
        await b.close()


async def test_changed_host_key_refused_and_not_auto_trusted(tmp_path: Path) -> None:
    host = FakeHost()
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
        kh = tmp_path / "kh"
        kh.write_text(f"[127.0.0.1]:{srv.port} {other}\n")
        b = SshBackend("gpu-a", srv.host_config(known_hosts=str(kh)), ssh_config=[], connect_timeout=5)
        with pytest.raises(BackendError, match="CHANGED"):
            await b.start()
        st = b.status()
        assert st.state is ConnState.HOSTKEY_REFUSED
        assert st.fingerprint == srv.host_key.get_fingerprint("sha256")
        assert f"ssh-keygen -R '[127.0.0.1]:{srv.port}'" in st.detail
        with pytest.raises(BackendError, match="remove the old entry"):
            await b.trust_host_key()
        assert kh.read_text().count("\n") == 1
        await b.close()


async def test_strict_host_key_false_is_explicit(tmp_path: Path) -> None:
    host = FakeHost()
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        kh = tmp_path / "empty"
        kh.write_text("")
        b = SshBackend("gpu-a", srv.host_config(known_hosts=str(kh), strict_host_key=False), ssh_config=[])
        await b.start()
        assert b.status().state is ConnState.CONNECTED
        assert b.status().strict_host_key is False
        await b.close()


class _AuthServer(asyncssh.SSHServer):
    attempts = 0

    def begin_auth(self, username: str) -> bool:
        type(self).attempts += 1
        return True

    def password_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return False


async def test_auth_failure_is_not_retried(tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.create_server(_AuthServer, "127.0.0.1", 0, server_host_keys=[key])
    port = server.sockets[0].getsockname()[1]
    kh = tmp_path / "kh"
    kh.write_text(f"[127.0.0.1]:{port} {key.export_public_key().decode().strip()}\n")
    client_key = tmp_path / "id"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(client_key))
    cfg = HostConfig(ssh="nobody@127.0.0.1", port=port, known_hosts=str(kh), identity_file=str(client_key),
                     unit="u")
    b = SshBackend("gpu-a", cfg, ssh_config=[], options={"agent_path": None})
    try:
        with pytest.raises(BackendError, match="authentication failed"):
            await b.start()
        assert b.status().state is ConnState.AUTH_FAILED
        before = _AuthServer.attempts
        await asyncio.sleep(0.3)
        assert _AuthServer.attempts == before
        with pytest.raises(BackendError, match="authentication failed"):
            await b.run("echo x")
    finally:
        await b.close()
        server.close()
        await server.wait_closed()


async def test_bad_identity_file_is_a_config_failure(tmp_path: Path) -> None:
    host = FakeHost()
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        bad = tmp_path / "id_bad"
        bad.write_text("not a key\n")
        b = SshBackend("gpu-a", srv.host_config(identity_file=str(bad)), ssh_config=[])
        with pytest.raises(BackendError):
            await b.start()
        assert b.status().state is ConnState.FAILED
        await b.close()


async def test_unreachable_host_reconnects_with_backoff(tmp_path: Path) -> None:
    host = FakeHost(n=3)
    srv = await FakeSshServer(host.handle, tmp_path / "srv").start()
    port = srv.port
    await srv.close()
    states: list[tuple[ConnState, float | None]] = []
    b = SshBackend("gpu-a", srv.host_config(port=port), ssh_config=[], connect_timeout=2,
                   backoff=Backoff(initial=0.05, cap=0.1, rng=random.Random(0)))
    two_waits = asyncio.Event()

    def listen(s: Any) -> None:
        states.append((s.state, s.retry_in))
        if sum(st is ConnState.RECONNECTING and r is not None for st, r in states) >= 2:
            two_waits.set()

    b.add_status_listener(listen)
    with pytest.raises(BackendError, match="unreachable: connection refused"):
        await b.start()
    assert b.status().state is ConnState.RECONNECTING
    assert "refused" in b.status().detail
    with pytest.raises(BackendError, match="unreachable"):
        await b.run("echo x")  # a one-shot command does not wait for an unreachable host
    # a stream connects by itself, with backoff
    it = b.follow_log()
    nxt = asyncio.ensure_future(it.__anext__())
    await asyncio.wait_for(two_waits.wait(), 30)  # the second announced retry (not a fixed 0.4 s)
    waits = [r for s, r in states if s is ConnState.RECONNECTING and r is not None]
    assert len(waits) >= 2  # it kept trying, saying when the next attempt comes
    assert all(r <= 0.1 for r in waits)  # capped
    # the host comes back on the same port: the backend reconnects by itself
    srv2 = await FakeSshServer(host.handle, tmp_path / "srv2", port=port, host_key=srv.host_key).start()
    try:
        first = await asyncio.wait_for(nxt, 10)
        records = first + (await collect(it, 3 - len(first)) if len(first) < 3 else [])
        assert [r.text for r in records] == ["[TP0] line 1", "[TP0] line 2", "[TP0] line 3"]
        assert b.status().state is ConnState.CONNECTED
    finally:
        await b.close()
        await srv2.close()


def test_backoff_is_capped_exponential_with_jitter() -> None:
    bo = Backoff(initial=1.0, cap=8.0, jitter=0.5, rng=random.Random(3))
    delays = [bo.next() for _ in range(8)]
    assert delays[0] == 0.0
    for n, d in enumerate(delays[1:], start=1):
        base = min(8.0, 2.0 ** (n - 1))
        assert base * 0.5 <= d <= base
    assert len(set(delays[4:])) > 1  # jittered, not a constant
    bo.reset()
    assert bo.next() == 0.0


async def test_journal_current_boot_then_lossless_across_drops(tmp_path: Path) -> None:
    host = FakeHost(n=40, invocation_start=11)  # the current boot starts at entry 11
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        b = backend(srv)
        await b.start()
        it = b.follow_log(LogStart.CURRENT_BOOT)
        got = await collect(it, 30)
        assert [r.text for r in got[:2]] == ["[TP0] line 11", "[TP0] line 12"]
        assert got[0].source == "journal"
        assert got[0].pid == 4242
        assert got[0].cursor == "s=fake;i=11"
        assert got[0].ts is not None
        assert got[0].ts.year == 2023
        # grow the journal while cutting the connection from the server side, N times
        drops = 5
        for k in range(drops):
            for _ in range(25):
                host.add()
            await wait_until(lambda: b.reconnects == k and b.status().state is ConnState.CONNECTED)  # noqa: B023
            await asyncio.sleep(0.01)
            srv.drop_connections()
            for _ in range(25):
                host.add()
        total = len(host.entries) - 10
        rest = await collect(it, total - len(got), timeout=20)
        seen = [r.text for r in got + rest]
        assert seen == [f"[TP0] line {i}" for i in range(11, len(host.entries) + 1)]
        assert b.reconnects >= drops
        # every reconnect resumed after the last cursor seen (or at the start, inclusive)
        assert host.follow_commands[0].count("--cursor=") == 1
        assert all("--after-cursor=" in c for c in host.follow_commands[1:])
        await it.aclose()
        await b.close()


async def test_journal_next_boot_starts_after_the_newest_entry(tmp_path: Path) -> None:
    host = FakeHost(n=5)
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        b = backend(srv)
        positioned = asyncio.Event()
        it = b.follow_log(LogStart.NEXT_BOOT, positioned=positioned.set)
        task = asyncio.ensure_future(collect(it, 2))
        await asyncio.wait_for(positioned.wait(), 60)  # the newest entry located (not a fixed 0.3 s)
        host.add("new 1")
        host.add("new 2")
        got = await task
        assert [r.text for r in got] == ["new 1", "new 2"]
        assert "--after-cursor=" in host.follow_commands[0]
        # and a consumer resuming from a cursor gets exactly what follows it
        it2 = b.follow_log(after_cursor=got[0].cursor)
        again = await collect(it2, 1)
        assert [r.text for r in again] == ["new 2"]
        await b.close()


async def test_close_ends_streams_and_channels(tmp_path: Path) -> None:
    host = FakeHost(n=2)
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        b = backend(srv)
        it = b.follow_log()
        await collect(it, 2)
        nxt = asyncio.ensure_future(it.__anext__())
        await asyncio.sleep(0.05)
        await b.close()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(nxt, 5)
        assert b.status().state is ConnState.CLOSED


async def test_gpu_stream_filters_and_marks_stale(tmp_path: Path) -> None:
    host = FakeHost()
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        clock_value = [1000.0]
        b = SshBackend("gpu-a", srv.host_config(gpus="0-3"), ssh_config=[], stale_after=2.0,
                       clock=lambda: clock_value[0])
        it = b.gpu_stream(interval_s=0.05)
        first = await asyncio.wait_for(it.__anext__(), 5)
        assert [s.index for s in first] == [0, 1, 2, 3]
        assert first[1].used_mib == 1010
        assert first[1].total_mib == 81559
        assert first[0].ts == 1000.0
        assert not any(s.stale for s in first)
        ticks = [await asyncio.wait_for(it.__anext__(), 5) for _ in range(5)]
        assert all(len(t) == 4 and not t[0].stale for t in ticks)
        # the host goes quiet: the last good sample comes back, marked stale
        host.gpu_paused.clear()
        stale = None
        for _ in range(40):
            t = await asyncio.wait_for(it.__anext__(), 5)
            if t[0].stale:
                stale = t
                break
        assert stale is not None
        assert [s.used_mib for s in stale] == [1000, 1010, 1020, 1030]
        host.gpu_paused.set()
        for _ in range(40):
            t = await asyncio.wait_for(it.__anext__(), 5)
            if not t[0].stale:
                break
        assert not t[0].stale
        procs = await b.gpu_processes()
        assert [(p.pid, p.gpu_index, p.used_mib) for p in procs] == [(4242, 1, 70000.0)]  # GPU 5 filtered out
        await it.aclose()
        await b.close()


async def test_gpu_stream_asks_an_older_nvidia_smi_for_the_fields_it_knows(tmp_path: Path) -> None:
    host = FakeHost()
    host.old_driver = True
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        b = SshBackend("gpu-a", srv.host_config(gpus="0-3"), ssh_config=[], clock=lambda: 1000.0)
        it = b.gpu_stream(interval_s=0.05)
        first = await asyncio.wait_for(it.__anext__(), 5)  # at once: no 5 s wait after the refusal
        assert [s.index for s in first] == [0, 1, 2, 3]
        assert (first[0].power_limit_w, first[0].throttle) == (None, None)
        await asyncio.wait_for(it.__anext__(), 5)  # a tick of the stream, asked for the old fields
        assert any("power.limit" in c for c in host.ran)
        assert "power.limit" not in [c for c in host.ran if "-lms" in c][-1]
        await it.aclose()
        await b.close()


async def test_gpu_stream_survives_a_drop(tmp_path: Path) -> None:
    host = FakeHost()
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        b = backend(srv)
        it = b.gpu_stream(interval_s=0.05)
        await asyncio.wait_for(it.__anext__(), 5)
        srv.drop_connections()
        fresh = 0
        for _ in range(50):
            t = await asyncio.wait_for(it.__anext__(), 5)
            fresh += not t[0].stale
            if b.reconnects >= 1 and fresh >= 3:
                break
        assert b.reconnects >= 1
        assert len(t) == 8
        await b.close()


def test_server_pids_parsing() -> None:
    out = ("MainPID=100\ncgroup=100\ncgroup=101\n--ps--\n"
           "  100     1\n  101   100\n  102   101\n  103   102\n  200     1\n")
    assert C.parse_server_pids(out) == {100, 101, 102, 103}
    assert C.parse_server_pids("MainPID=0\n--ps--\n 1 0\n") == set()
    assert C.pidfile_from_commands(
        "setsid nohup /root/launch.sh >> /root/x.log 2>&1 < /dev/null & echo $! > /root/dsv4.pid", None
    ) == "/root/dsv4.pid"
    assert C.pidfile_from_commands(None, "kill $(cat '/run/my server.pid')") == "/run/my server.pid"
    assert C.pidfile_from_commands("start.sh", "pkill -f sglang") is None


async def test_server_pids_choose_the_right_source(tmp_path: Path) -> None:
    seen: list[str] = []

    async def handle(process: asyncssh.SSHServerProcess[bytes]) -> None:
        seen.append(inner_command(process.command or ""))
        process.stdout.write(b"MainPID=10\n--ps--\n10 1\n11 10\n")
        process.exit(0)

    async with fake_ssh_server(handle, tmp_path / "srv") as srv:
        b = SshBackend("a", srv.host_config(unit="sglang.service", sudo=True), ssh_config=[])
        assert await b.server_pids() == {10, 11}
        b2 = SshBackend("b", srv.host_config(unit=None, log_file="/root/x.log", start_command="go & echo $! > /r/p",
                                             stop_command="kill $(cat /r/p)"), ssh_config=[])
        assert await b2.server_pids() == {10, 11}
        assert "systemctl show -p MainPID" in seen[0]
        assert "sudo -n systemctl" in seen[0]
        assert "head -n 1 -- /r/p" in seen[1]
        await b.close()
        await b2.close()


# ---------------------------------------------------------------------------------------------
# The followers' byte -> record state machines (pure)
# ---------------------------------------------------------------------------------------------


def _file_follower(after: str | None = "0") -> Any:
    from kvtui.hosts.ssh.followers import _FileFollower

    b = SshBackend("x", HostConfig(ssh="h", log_file="/var/log/s.log"))
    return _FileFollower(b, LogStart.CURRENT_BOOT, after)


FILE_BYTES = (b"first line\n" b"Loading 10%\rLoading 50%\rLoading 100%\r\n" b"\n" b"caf\xc3\xa9 \xff bad\n"
              b"tail: not a notice, a log line\n" b"last\n")


def _expected_file_records(data: bytes) -> list[tuple[str, str]]:
    """(text, cursor) by a straightforward reading of the bytes."""
    out = []
    piece = b""
    for i, byte in enumerate(data):
        ch = bytes([byte])
        if ch in (b"\n", b"\r"):
            if piece:
                out.append((piece.decode("utf-8", "replace"), str(i + 1)))
            piece = b""
        else:
            piece += ch
    return out


@pytest.mark.parametrize("seed", range(6))
def test_file_follower_offsets_are_exact_under_any_chunking(seed: int) -> None:
    rng = random.Random(seed)
    f = _file_follower()
    got: list[tuple[str, str | None]] = []
    pos = 0
    while pos < len(FILE_BYTES):
        n = rng.randint(1, 9)
        got += [(r.text, r.cursor) for r in f.feed(FILE_BYTES[pos : pos + n])]
        pos += n
    assert got == _expected_file_records(FILE_BYTES)
    assert f.offset == len(FILE_BYTES)
    # a progress redraw is delivered at its \r, before any newline arrives
    f2 = _file_follower()
    assert [r.text for r in f2.feed(b"Capturing 1/9\rCapturing 2/9\rCaptu")] == ["Capturing 1/9", "Capturing 2/9"]
    assert f2.offset == len(b"Capturing 1/9\rCapturing 2/9\r")


def test_file_follower_control_lines_and_tail_notices() -> None:
    f = _file_follower(None)
    f.offset = 7
    recs = f.feed(b"\x00kvtui:follow ino=42 off=100\nabc\n")
    assert (f.inode, [r.cursor for r in recs]) == (42, ["104"])
    # tail's notices are not file bytes and not log lines; a file that appeared is read from 0
    f.inode = None
    recs = f.feed(b"x\ntail: '/var/log/s.log' has appeared;  following new file\nnew\n")
    assert [(r.text, r.cursor) for r in recs] == [("x", "106"), ("new", "4")]
    assert f.inode is None
    assert f.want_inode
    # a notice glued to an unterminated last line of the old file
    recs = f.feed(b"partialtail: '/var/log/s.log' has appeared;  following new file\nz\n")
    assert [(r.text, r.cursor) for r in recs] == [("partial", "11"), ("z", "2")]
    # the reconnect prelude's control lines
    f.offset = 50
    recs = f.feed(b"rest of old\n\x00kvtui:rotated\n\x00kvtui:follow ino=7 off=0\nnew file\n")
    assert [(r.text, r.cursor) for r in recs] == [("rest of old", "62"), ("new file", "9")]
    assert "rotated while disconnected" in f.note
    assert f.inode == 7


def test_file_follower_starts_again_when_tail_sees_the_file_replaced_or_truncated() -> None:
    """Issue 21: what tail prints after 'replaced' / 'truncated' is dropped; the follower starts
    again from where it was (the old file's rest by inode, or copytruncate's copy, first)."""
    from kvtui.hosts.ssh.followers import _FileFollower

    f = _file_follower(None)
    f.feed(b"\x00kvtui:follow ino=42 off=100\nabc\n")
    recs = f.feed(b"x\ntail: '/var/log/s.log' has been replaced;  following new file\nnew\n")
    assert [(r.text, r.cursor) for r in recs] == [("x", "106")]
    assert f.restart
    assert (f.offset, f.inode) == (106, 42)
    assert f.feed(b"more of the new file\n") == []
    b = SshBackend("x", HostConfig(ssh="h", log_file="/var/log/s.log"))
    g = _FileFollower(b, LogStart.CURRENT_BOOT, "0")
    g.feed(b"one\ntwo\n")
    assert [r.text for r in g.feed(b"tail: /var/log/s.log: file truncated\nagain\n")] == []
    assert g.restart
    assert g.offset == 8
    assert g._tail == b"one\ntwo\n"


def test_file_follower_locates_the_boot_and_plans_its_parts() -> None:
    # the last server start wins; vLLM's version line just before its args line is the start
    f = _file_follower(None)
    f._apply_locate("stat 9 90000\nsibs\nm 10 [x] server_args=ServerArgs(a\n"
                    "m 5000 (APIServer pid=1) INFO vLLM API server version 0.11.0\n"
                    "m 5080 (APIServer pid=1) INFO non-default args: {'a': 1}\nready 90000\ntail 90000\n")
    assert (f.offset, f.inode, f.plan) == (5000, 9, [])
    # a boot far from the tail: its startup part, one gap, the tail
    f = _file_follower(None)
    f._apply_locate("stat 9 250000000\nsibs .1 .2.gz\nm 347 [x] server_args=ServerArgs(a\nready 63514\n"
                    "tail 248951000\n")
    assert [(s.kind, s.a, s.b) for s in f.plan] == [("part", 347, 63514), ("gap", 63514, 248951000)]
    assert f.tail_at == 248951000
    recs = f.feed(b"\x00kvtui:seg 0 off=347\nstart\n\x00kvtui:gap 1 1990000 248951000 [2026-02-10 03:12:00] a\t"
                  b"[2026-02-10 04:00:00] b\n\x00kvtui:follow ino=9 off=248951000\nnow\n")
    assert [(r.text, r.cursor) for r in recs] == [
        ("start", "353"),
        ("kvtui: 1990000 lines not read [bytes=63514-248951000] (2026-02-10T03:12:00 → 2026-02-10T04:00:00)", None),
        ("now", "248951004")]
    # the start in a rotated copy: its lines carry no cursor, each file's range is one gap
    f = _file_follower(None)
    f._apply_locate("stat 9 5000\nsibs .1 .2.gz\nin .2.gz 1 800000\nm 100 [x] server_args=ServerArgs(a\n"
                    "ready 9000\ntail 0\n")
    assert [(s.kind, s.path, s.a, s.b) for s in f.plan] == [
        ("part", "/var/log/s.log.2.gz", 100, 9000), ("gap", "/var/log/s.log.2.gz", 9000, 800000),
        ("gap", "/var/log/s.log.1", 0, None)]
    recs = f.feed(b"\x00kvtui:seg 0 off=100\nstart\n")
    assert [(r.text, r.cursor) for r in recs] == [("start", None)]
    # no start anywhere, a server running: said, with its command line, before the tail
    f = _file_follower(None)
    f._apply_locate("stat 9 5000\nsibs .1\npid 77 Sat Dec  6 06:33:46 2025\n"
                    "cmd cHl0aG9uMwAtbQBzZ2xhbmcubGF1bmNoX3NlcnZlcgAtLXRwADIA\nserves 12\ntail 4000\n")
    recs = f.feed(b"\x00kvtui:seg 0\n")
    assert [r.text for r in recs] == [
        "kvtui: the server's start is not in the log (not in s.log or its rotated copies (s.log.1); "
        "the server has run since Sat Dec 6 06:33:46 2025)",
        "kvtui: the running server's command line (pid 77): python3 -m sglang.launch_server --tp 2"]
    # ... but a server whose recent lines do not serve is starting: its start line is still to come
    # (a wait begun with the server found a log of import warnings and called it serving)
    f = _file_follower(None)
    f._apply_locate("stat 9 5000\nsibs\npid 77 Sat Dec  6 06:33:46 2025\n"
                    "cmd cHl0aG9uMwAtbQBzZ2xhbmcubGF1bmNoX3NlcnZlcgAtLXRwADIA\nserves 0\ntail 0\n")
    assert not any(st.records for st in f.plan)
    assert "do not serve" in f.note
    f._apply_locate("missing\n")
    assert (f.offset, f.inode) == (0, None)


def test_file_follower_resumes_inside_its_plan_and_never_says_a_gap_twice() -> None:
    """A drop inside the startup part goes on from the offset reached (the gap still to come);
    after the gap, a drop follows the file as ever: no second gap, no startup part again."""
    f = _file_follower(None)
    f._apply_locate("stat 9 250000000\nsibs\nm 347 [x] server_args=ServerArgs(a\nready 63514\ntail 248951000\n")
    f.located = True
    f.feed(b"\x00kvtui:seg 0 off=347\nstart\nmore\n")
    f.reset()
    cmd = asyncio.run(f.command(None))  # type: ignore[arg-type]
    assert "kvtui:seg 0 off=358" in cmd
    assert "kvtui:gap 1 " in cmd
    recs = f.feed(b"\x00kvtui:seg 0 off=358\n\x00kvtui:gap 1 1990000 248951000 x\t\n"
                  b"\x00kvtui:follow ino=9 off=248951000\nnow\n")
    assert [r.text[:12] for r in recs] == ["kvtui: 19900", "now"]
    f.reset()
    cmd = asyncio.run(f.command(None))  # type: ignore[arg-type]
    assert "kvtui:seg" not in cmd
    assert "kvtui:gap" not in cmd
    assert "off=248951004;" in cmd


def test_docker_follower_cursor_skips_what_was_delivered() -> None:
    from kvtui.hosts.ssh.followers import _DockerFollower

    b = SshBackend("x", HostConfig(ssh="h", container="vllm"))
    d = _DockerFollower(b, LogStart.CURRENT_BOOT, "2026-03-04T09:12:00.000000002Z#2")
    d._skip = d.seen_at_since
    lines = (b"2026-03-04T09:12:00.000000002Z a\n2026-03-04T09:12:00.000000002Z b\n"
             b"2026-03-04T09:12:00.000000002Z c\n2026-03-04T09:12:01.000000000Z d\r\n"
             b"Error response from daemon: boom\n")
    recs = d.feed(lines)
    assert [(r.text, r.cursor) for r in recs] == [("c", "2026-03-04T09:12:00.000000002Z#3"),
                                                  ("d", "2026-03-04T09:12:01.000000000Z#1")]
    assert recs[1].ts is not None
    assert recs[1].ts.second == 1
    assert d.note == "Error response from daemon: boom"


def test_journal_follower_splits_multiline_entries_sharing_the_cursor() -> None:
    from kvtui.hosts.ssh.followers import _JournalFollower

    b = SshBackend("x", HostConfig(ssh="h", unit="u"))
    j = _JournalFollower(b, LogStart.CURRENT_BOOT, None)
    e1 = json.dumps({"__CURSOR": "c1", "MESSAGE": "a\nb\r\nc"}).encode()
    e2 = json.dumps({"__CURSOR": "c2", "MESSAGE": [104, 105, 255]}).encode()
    recs = j.feed(e1 + b"\n" + e2[:10])
    assert [(r.text, r.cursor) for r in recs] == [("a", "c1"), ("b", "c1"), ("c", "c1")]
    assert j.resume == ("after", "c1")
    recs = j.feed(e2[10:] + b"\nnot json\n")
    assert [(r.text, r.cursor) for r in recs] == [("hi\ufffd", "c2")]
    j.reset()  # a dropped channel forgets a partial line; the cursor says where to resume
    assert j.resume == ("after", "c2")


async def test_ssh_config_alias_is_honoured_and_trusted_under_its_real_name(tmp_path: Path) -> None:
    host = FakeHost()
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        cfg = tmp_path / "ssh_config"
        cfg.write_text(f"Host gpu-box\n  HostName 127.0.0.1\n  Port {srv.port}\n  User tester\n")
        kh = tmp_path / "kh"
        kh.write_text("")
        b = SshBackend("box", HostConfig(ssh="gpu-box", unit="u", known_hosts=str(kh)), ssh_config=[str(cfg)],
                       connect_timeout=5)
        with pytest.raises(BackendError) as ei:
            await b.start()
        assert f"[127.0.0.1]:{srv.port}" in str(ei.value)
        await b.trust_host_key()
        assert kh.read_text().startswith(f"[127.0.0.1]:{srv.port} ssh-ed25519 ")
        assert b.status().state is ConnState.CONNECTED
        assert b.status().detail == f"tester@gpu-box:{srv.port}"
        assert (await b.run("echo via alias")).stdout == "via alias\n"
        await b.close()


@pytest.mark.parametrize("stamp", ["2026-03-04T09:12:00.123456789Z", "2026-03-04T09:12:00Z",
                                   "2026-03-04T09:12:00.5+02:00", "2026-03-04T09:12:00-05:30"])
def test_docker_timestamps_cached_parse_matches_full_parse(stamp: str) -> None:
    from kvtui.hosts.dockerlog import parse_docker_ts
    from kvtui.hosts.ssh.followers import _DockerFollower

    d = _DockerFollower(SshBackend("x", HostConfig(ssh="h", container="c")), LogStart.CURRENT_BOOT, None)
    d._ts("2026-03-04T09:12:00.000000001Z")  # prime the cache with the same second
    assert d._ts(stamp) == parse_docker_ts(stamp)
    assert parse_docker_ts(stamp) is not None
    recs = d.feed(f"{stamp} hello world\n".encode())
    assert [(r.text, r.ts) for r in recs] == [("hello world", parse_docker_ts(stamp))]


async def test_aes_gcm_is_offered_first_unless_the_ssh_config_chooses(tmp_path: Path) -> None:
    """kvtui offers AES-GCM first (cheaper per byte than chacha20-poly1305 with AES instructions);
    a ``Ciphers`` line in the user's ssh config is honoured as it is."""
    host = FakeHost()
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        b = backend(srv)
        assert b._connect_kwargs()["encryption_algs"] == "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"
        await b.start()
        assert b._conn is not None
        assert b._conn.get_extra_info("recv_cipher") == "aes128-gcm@openssh.com"
        assert (await b.run("echo gcm")).stdout == "gcm\n"
        await b.close()
        cfg = tmp_path / "ssh_config"
        cfg.write_text("Host *\n  Ciphers chacha20-poly1305@openssh.com\n")
        b = SshBackend("gpu-a", srv.host_config(), ssh_config=[str(cfg)], connect_timeout=5,
                       options={"agent_path": None})
        assert "encryption_algs" not in b._connect_kwargs()
        await b.start()
        assert b._conn is not None
        assert b._conn.get_extra_info("recv_cipher") == "chacha20-poly1305@openssh.com"
        await b.close()
