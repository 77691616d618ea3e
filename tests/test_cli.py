"""The command line as a newcomer meets it (issue 10): global options anywhere, ``hosts --check``
validating what the console would reject later."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtui.cli import build_parser, main

COMMANDS = [
    ["connect", "demo"],
    ["wait", "demo"],
    ["watch", "demo"],
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
    # the count is of the hosts listed: lab and the built-in demo (issue 22 #15: it said 1 of 2)
    assert f"{hosts}: 2 host(s) (1 built in) OK" in err
    assert out.count("\n") == 3  # the heading and two rows


def _console_start_problems(hosts: Path) -> list[str]:
    """What the console itself reports at start for this hosts file (its own checks)."""
    from kvtui.config import load_config
    from kvtui.hosts.factory import make_backend
    from kvtui.ui.app import KvtuiApp
    from kvtui.ui.host_pane import HostSpec

    config = load_config(str(hosts))
    app = KvtuiApp([HostSpec("demo", config.host("demo"))], backend_factory=make_backend, config=config)
    return list(app.startup_problems)


@pytest.mark.parametrize(
    ("ui", "fragment"),
    [
        ('[ui]\ntheme = "nope"\n', '[ui] theme = "nope": expected one of the themes'),
        ('[ui]\ntheme = "kvtui-drak"\n', "(did you mean 'kvtui-dark'?)"),
        ('[keymap]\nnosuch = "x"\n', '[keymap] nosuch = "x": expected a binding id, one of'),
        ('[keymap]\nserach = "ctrl+f"\n', "(did you mean 'search'?)"),
    ],
    ids=["unknown-theme", "misspelt-theme", "unknown-binding", "misspelt-binding"],
)
def test_hosts_check_rejects_what_the_console_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ui: str, fragment: str
) -> None:
    """Issue 10, item 12: `[ui] theme = "nope"` passed `hosts --check`; the console then complained."""
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(ui)
    assert main(["hosts", "--check", "--hosts", str(hosts)]) == 3
    err = capsys.readouterr().err
    assert f"kvtui hosts: {hosts}: " in err  # file, key, value, expectation
    assert fragment in err
    assert _console_start_problems(hosts)  # and the console does reject it


def test_a_theme_hosts_check_accepts_is_one_the_console_uses(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[ui]\ntheme = "kvtui-light"\n\n[keymap]\nsearch = "ctrl+f"\n')
    assert main(["hosts", "--check", "--hosts", str(hosts)]) == 0
    assert _console_start_problems(hosts) == []


def test_every_option_of_every_command_is_described() -> None:
    """Issue 22 #15: `rollback --restart/--yes/--timeout`, `apply --timeout` and every HOST had no
    help text in `--help`."""
    import argparse

    from kvtui.cli import build_parser

    undescribed = []
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                undescribed += [f"{name} {' / '.join(a.option_strings) or a.dest}" for a in sub._actions
                                if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()]
    assert undescribed == []


def test_an_unknown_option_is_refused_with_the_command_s_own_usage(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 22 #15: `kvtui replay LOG --bogus` printed kvtui's top-level usage."""
    from kvtui.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["replay", "x.log", "--bogus"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kvtui replay")
    assert "kvtui replay: error: unrecognized arguments: --bogus" in err
