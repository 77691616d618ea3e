"""``kvtui hosts [--check] [--connect]`` through the real CLI entry point."""

from __future__ import annotations

import asyncio
import io
import socket
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest
from sshd_support import (
    FakeTools,
    SshdInstance,
    ThreadedFakeSshServer,
    inner_command,
    requires_sshd,
    start_sshd,
)

from kvtui import cli
from kvtui.commands import hosts as hosts_cmd

GOOD = """
[hosts.dflash-train]
ssh = "root@gpu-a.example"
unit = "sglang-k26-ddtree"

[hosts.b6000]
ssh = "b6000"
log_file = "/root/dsv4.log"
launch_script = "/root/launch-dsv4.sh"
start_command = "setsid nohup /root/launch-dsv4.sh >> /root/dsv4.log 2>&1 < /dev/null & echo $! > /root/dsv4.pid"
stop_command = "kill $(cat /root/dsv4.pid)"
gpus = "0-3,6"
readonly = true
strict_host_key = false

[hosts.demo-b]
demo = true
demo_speed = 10.0
"""


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_lists_every_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hosts.toml").write_text(GOOD)
    code, out, err = run_cli(["hosts"], capsys)  # ./hosts.toml (the test's cwd)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "TARGET", "FOLLOWS", "GPUS", "NOTES"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == ["dflash-train", "b6000", "demo-b", "demo"]
    assert rows["dflash-train"].split()[1:5] == ["ssh", "root@gpu-a.example", "unit", "sglang-k26-ddtree"]
    assert "file /root/dsv4.log" in rows["b6000"]
    assert "0-3,6" in rows["b6000"]
    assert "readonly" in rows["b6000"]
    assert "HOST KEY NOT CHECKED" in rows["b6000"]
    assert "speed 10x" in rows["demo-b"]
    assert "built in" in rows["demo"]
    assert err == ""


def test_no_file_lists_the_builtin_demo(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["hosts"], capsys)
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["demo"]
    assert "no hosts file found" in err


def test_bad_file_exits_3_with_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[hosts.a]\nssh = "a b"\nunit = "u"\n[hosts.b]\nlocal = true\n[ui]\nlog_lines = 1\n')
    for argv in (["--hosts", str(bad), "hosts"], ["--hosts", str(bad), "hosts", "--check"]):
        code, out, err = run_cli(argv, capsys)
        assert code == 3
        assert out == ""
        assert f"{bad}: 3 problems" in err
        assert f'{bad}: [hosts.a] ssh = "a b"' in err
        assert f"{bad}: [hosts.b] needs at least one of unit" in err
        assert f"{bad}: [ui] log_lines = 1" in err
        assert "Traceback" not in err


def test_check_looks_at_files_on_this_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "id_ok"
    key.write_text("k")
    f = tmp_path / "h.toml"
    f.write_text(GOOD + f'\n[hosts.x]\nssh = "x"\nunit = "u"\nidentity_file = "{tmp_path}/id_missing"\n'
                 f'\n[hosts.y]\nssh = "y"\nunit = "u"\nidentity_file = "{key}"\n')
    code, _out, err = run_cli(["--hosts", str(f), "hosts", "--check"], capsys)
    assert code == 3
    assert f'{f}: [hosts.x] identity_file = "{tmp_path}/id_missing": expected an existing private key file' in err
    assert "[hosts.y]" not in err
    assert "warning:" in err
    assert "[hosts.b6000] strict_host_key = false" in err
    f.write_text(GOOD)
    code, _out, err = run_cli(["--hosts", str(f), "hosts", "--check"], capsys)
    assert code == 0
    assert "4 host(s) (1 built in) OK" in err


def test_format_gpus() -> None:
    assert hosts_cmd.format_gpus([0, 1, 2, 3, 6, 8, 9]) == "0-3,6,8-9"
    assert hosts_cmd.format_gpus(None) == "all"
    assert hosts_cmd.format_gpus([5]) == "5"


async def _probe_handler(process: asyncssh.SSHServerProcess[bytes]) -> None:
    cmd = inner_command(process.command or "")
    if "user=" in cmd:
        process.stdout.write(b"user=tester\ngpus=8\nunit=loaded/active\njournal=ok\n")
        process.exit(0)
    else:
        process.exit(127)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connect_reaches_every_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ThreadedFakeSshServer(_probe_handler, tmp_path / "srv") as srv:
        empty = tmp_path / "empty_known_hosts"
        empty.write_text("")
        f = tmp_path / "h.toml"
        f.write_text(
            f'[hosts.gpu-a]\nssh = "tester@127.0.0.1"\nport = {srv.port}\nknown_hosts = "{srv.known_hosts}"\n'
            'unit = "sglang.service"\n'
            f'[hosts.gone]\nssh = "tester@127.0.0.1"\nport = {_closed_port()}\nknown_hosts = "{srv.known_hosts}"\n'
            'unit = "sglang.service"\n'
            f'[hosts.stranger]\nssh = "tester@127.0.0.1"\nport = {srv.port}\nknown_hosts = "{empty}"\n'
            'unit = "sglang.service"\n'
            "[hosts.sim]\ndemo = true\ndemo_speed = 50.0\n"
        )
        code, out, _err = run_cli(["--hosts", str(f), "hosts", "--connect"], capsys)
    results = {line.split()[1]: line for line in out.splitlines() if line.startswith(("ok", "FAIL"))}
    assert results["gpu-a"].startswith("ok")
    assert "8 GPUs, unit sglang.service active" in results["gpu-a"]
    assert results["gone"].startswith("FAIL")
    assert "unreachable: connection refused" in results["gone"]
    assert results["stranger"].startswith("FAIL")
    assert srv.host_key.get_fingerprint("sha256") in results["stranger"]
    assert "is not known" in results["stranger"]
    assert results["sim"].startswith("ok")
    assert results["demo"].startswith("ok")
    assert code == 3


# --- against a real sshd --------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SshdInstance, FakeTools]]:
    tools = FakeTools.create(tmp_path_factory.mktemp("host"))
    inst = start_sshd(tmp_path_factory.mktemp("sshd"), user="root", path_prefix=tools.bin_dir,
                      extra_env={"KVTUI_FAKE_STATE": str(tools.state)})
    inst.assert_fake_path()
    yield inst, tools
    inst.stop()


@pytest.mark.sshd
@requires_sshd
def test_connect_probes_a_real_host(tmp_path: Path, real_host: tuple[SshdInstance, FakeTools],
                                    capsys: pytest.CaptureFixture[str], fixtures: Path) -> None:
    sshd, tools = real_host
    tools.set_gpus((fixtures / "nvidia-smi-query-8gpu.csv").read_text())
    tools.set_unit("sglang.service", LoadState="loaded", ActiveState="activating")
    log = tools.root / "dsv4.log"
    log.write_text("hello\n")
    base = (f'ssh = "root@127.0.0.1"\nport = {sshd.port}\nidentity_file = "{sshd.client_key}"\n'
            f'known_hosts = "{sshd.known_hosts}"\n')
    f = tmp_path / "h.toml"
    f.write_text(f'[hosts.unit]\n{base}unit = "sglang.service"\n'
                 f'[hosts.file]\n{base}log_file = "{log}"\n'
                 f'[hosts.nofile]\n{base}log_file = "{tools.root}/missing.log"\n')
    code, out, _err = run_cli(["--hosts", str(f), "hosts", "--connect"], capsys)
    results = {line.split()[1]: line for line in out.splitlines() if line.startswith(("ok", "FAIL"))}
    assert results["unit"].startswith("ok")
    assert f"root@127.0.0.1:{sshd.port} (as root): 8 GPUs, unit sglang.service activating" in results["unit"]
    assert results["file"].startswith("ok")
    assert f"log {log} (6 bytes)" in results["file"]
    assert results["nofile"].startswith("FAIL")
    assert "MISSING" in results["nofile"]
    assert code == 3


def test_run_takes_injected_streams(tmp_path: Path) -> None:
    import argparse

    out, err = io.StringIO(), io.StringIO()
    code = hosts_cmd.run(argparse.Namespace(hosts=None, check=False, connect=False), stdout=out, stderr=err)
    assert code == 0
    assert out.getvalue().splitlines()[1].startswith("demo")
    assert asyncio.iscoroutinefunction(hosts_cmd.connect_one)
