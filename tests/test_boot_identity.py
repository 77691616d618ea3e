"""Issue 22 #2: one boot identity everywhere. The same boot was ``boot 13`` in the console header,
``boot 1`` after a reconnect, ``#13`` in the history, ``boot 1 is ready`` in ``kvtui wait`` and
``boot 1 of 1 …`` in ``calc --host``. Now every view and JSON names it by its number in the
history (``boot #13``, ``"boot": 13``); without a history, by its place in the log read (``boot 2
of this log``), which cannot be taken for a history number. (The console and the monitor across a
reconnect: tests/test_history_monitor.py, tests/test_ui_console.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvtui.cli import main
from kvtui.history import open_store
from kvtui.history.ident import label

HOSTS = "[hosts.demo]\ndemo = true\ndemo_speed = 600.0\n"


def test_the_two_spellings() -> None:
    assert label(13, 2) == "boot #13"  # the history's number wins
    assert label(None, 2) == "boot 2 of this log"
    assert label(None) == "boot"


def test_wait_calc_and_history_name_the_boot_by_the_same_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    assert main(["--hosts", str(hosts), "wait", "demo", "--json", "--timeout", "60"]) == 0
    out, err = capsys.readouterr()
    waited = json.loads(out)
    number = waited["boot"]
    assert isinstance(number, int)
    assert f"kvtui wait: demo: boot #{number} is ready" in err
    assert re.search(r"\bboot \d+ is ready", err) is None  # no per-follow index beside it
    with open_store(readonly=True) as store:
        (row,) = store.boots("demo")
    assert (row.id, row.key) == (number, waited["boot_key"])

    # calc --host calibrates on the same boot and says so by the same number, in words and in JSON
    assert main(["--hosts", str(hosts), "calc", "--host", "demo", "--set", "mem-fraction-static=0.9"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert f"boot #{number} of host demo" in head
    assert "boot 1 of 1" not in head
    assert main(["--hosts", str(hosts), "calc", "--host", "demo", "--set", "mem-fraction-static=0.9", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["boot"], doc["boot_key"]) == (number, waited["boot_key"])

    # the history lists it under that number (``#N``) and shows it as ``Boot #N``
    assert main(["--hosts", str(hosts), "history", "demo", "--json"]) == 0
    assert [b["id"] for b in json.loads(capsys.readouterr().out)["boots"]] == [number]
    assert main(["--hosts", str(hosts), "history", "demo"]) == 0
    assert f"#{number}" in capsys.readouterr().out

    # a second wait on the same boot (another reader, another follow): the same number
    assert main(["--hosts", str(hosts), "wait", "demo", "--json", "--timeout", "60"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["boot"] == number
    assert f"boot #{number} is ready" in err
    assert f"Boot #{number} of demo" not in out  # (--json: the object only)
    assert main(["--hosts", str(hosts), "wait", "demo", "--timeout", "60"]) == 0
    assert capsys.readouterr().out.startswith(f"Boot #{number} of demo · ")


def test_without_a_history_the_boot_is_named_by_its_place_in_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS + "\n[history]\nrecord = false\n")
    assert main(["--hosts", str(hosts), "wait", "demo", "--json", "--timeout", "60"]) == 0
    out, err = capsys.readouterr()
    assert "kvtui wait: demo: boot 1 of this log is ready" in err
    doc = json.loads(out)
    assert (doc["boot"], doc["boot_key"]) == (None, None)
    assert main(["--hosts", str(hosts), "calc", "--host", "demo", "--set", "mem-fraction-static=0.9"]) == 0
    assert "boot 1 of this log from host demo" in capsys.readouterr().out.splitlines()[0]
    with open_store(readonly=True) as store:
        assert store.count("demo") == 0  # nothing recorded, by calc --host either
