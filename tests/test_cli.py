"""The command line as a newcomer meets it (issue 10): global options anywhere, ``hosts --check``
validating what the console would reject later."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtui.cli import build_parser, main

COMMANDS = [
    ["connect", "demo"],
    ["wait", "demo"],
    ["replay", "x.log"],
    ["calc", "--log", "x.log"],
    ["apply", "demo", "--set", "tp=2"],
    ["rollback", "demo"],
    ["hosts", "--check"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: a[0])
def test_hosts_is_accepted_before_and_after_every_command(argv: list[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(["--hosts", "a.toml", *argv]).hosts == "a.toml"
    assert parser.parse_args([*argv, "--hosts", "b.toml"]).hosts == "b.toml"
    assert parser.parse_args([argv[0], "--hosts", "c.toml", *argv[1:]]).hosts == "c.toml"
    assert parser.parse_args(argv).hosts is None  # absent: the default lookup
    assert parser.parse_args(["--hosts", "a.toml", *argv, "--hosts", "b.toml"]).hosts == "b.toml"  # the last wins


def test_hosts_check_with_hosts_after_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kvtui hosts --check --hosts x.toml` failed with "unrecognized arguments"."""
    hosts = tmp_path / "x.toml"
    hosts.write_text('[hosts.lab]\ndemo = true\n')
    assert main(["hosts", "--check", "--hosts", str(hosts)]) == 0
    out, err = capsys.readouterr()
    assert "lab" in out
    assert f"{hosts}: 1 host(s) OK" in err
