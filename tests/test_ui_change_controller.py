"""One change controller for a host and a deployment (issue 23 item 1: a host is a deployment of
one node): the same apply on a host's console and on a one-node deployment's console ends the same
(the banner's headline, the file written, the history's record), and ``O`` tunes a deployment
from its console. The real app on demo hosts (their unit files on disk), keys pressed with Pilot."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest
from test_demo_2node import _hosts as two_node_hosts
from textual.pilot import Pilot
from textual.widgets import Input

from kvtui.boot import BootStatus
from kvtui.commands.connect import expand_names
from kvtui.config import parse_config
from kvtui.flags import get_flag
from kvtui.history import open_store
from kvtui.hosts.factory import make_backend
from kvtui.ui.app import KvtuiApp
from kvtui.ui.host_pane import HostSpec
from kvtui.ui.screens import ApplyScreen, ConfirmScreen, TuneScreen

SIZE = (130, 40)
ONE_NODE = '[hosts.solo]\ndemo = true\ndemo_speed = 500\n[deployments.one]\nnodes = ["solo"]\n'


async def _until(pilot: Pilot[Any], pred: Any, timeout: float = 90.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError("condition not met")
        await pilot.pause(0.05)


def _app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, deployment: str | None) -> KvtuiApp:
    """The console on a host (``deployment`` None: ``solo``) or a deployment, its state under ``tmp_path``."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    cfg = parse_config(text, tmp_path / "hosts.toml")
    names = ["solo"] if deployment is None else [deployment]  # as ``kvtui connect NAME`` opens it
    return KvtuiApp([HostSpec(n, cfg.host(n)) for n in expand_names(cfg, names)], backend_factory=make_backend,
                    config=cfg, clock=time.time, deployments=[n for n in names if cfg.deployment(n) is not None])


def _pane(app: KvtuiApp) -> Any:
    """The pane whose ``changes`` the keys drive: the host's, or node 0's of a deployment."""
    return app.main_screen.active_pane


async def _apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deployment: str | None) -> dict[str, Any]:
    """``c`` 0.86, ``a``, ``y`` in the apply dialog, until the change ends: what it left."""
    app = _app(tmp_path, monkeypatch, ONE_NODE, deployment)
    async with app.run_test(size=SIZE) as pilot:
        pane = _pane(app)
        await _until(pilot, lambda: pane.boot is not None and pane.boot.status is BootStatus.READY
                     and pane.calculator.result is not None)
        await pilot.press("c", *"0.86", "enter", "escape")
        await _until(pilot, lambda: pane.calculator.result is not None
                     and pane.calculator.result["edits"] == {"mem_fraction_static": 0.86})
        await pilot.press("a")
        await _until(pilot, lambda: isinstance(app.screen, ApplyScreen))  # the diff and the prediction
        await pilot.press("y")
        await _until(pilot, lambda: pane.busy is None and pane.changes.last_code is not None)
        units = list((tmp_path / "state" / "kvtui" / "demo" / "solo").glob("*.service"))
        assert len(units) == 1
        with open_store(readonly=True) as store:
            restarts = [r.doc["restart"] for r in store.boots("solo", limit=20) if r.doc.get("restart")]
        assert len(restarts) == 1
        state = str(tmp_path / "state")

        def same(v: object) -> str:  # the state directory and the backup's time differ between the runs
            return re.sub(r"kvtui-\d{8}T[\d.]+Z", "kvtui-TIME", str(v).replace(state, "STATE"))

        return {"pane": type(pane).__name__, "group": pane.group, "code": pane.changes.last_code,
                "headline": pane.action_banner.headline,
                "unit": same(units[0].read_text()), "record": {k: same(v) for k, v in restarts[0].items()}}


async def test_the_same_apply_on_a_host_and_on_a_one_node_deployment_ends_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = await _apply(tmp_path / "host", monkeypatch, None)
    dep = await _apply(tmp_path / "deployment", monkeypatch, "one")
    assert host["code"] == 0
    assert host["headline"] == "solo: applied; the new boot is ready"
    assert get_flag(host["unit"], "unit", "mem-fraction-static") == "0.86"
    assert host["record"]["edit"] == "['--set mem-fraction-static=0.86']"
    assert host["record"]["outcome"] == "ready"
    assert host["pane"] == "HostPane"
    assert host["group"] is None  # a deployment of one node is its host's pane: no group, no strip
    assert dep == host  # the same pane, the headline, the file written, the history's record


async def test_O_tunes_every_node_of_a_deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(tmp_path, monkeypatch, two_node_hosts(), "r1")
    async with app.run_test(size=SIZE) as pilot:
        pane = _pane(app)
        await _until(pilot, lambda: pane.boot is not None and pane.boot.status is BootStatus.READY)
        keys = {row[2] for row in app.main_screen.key_rows()}
        assert {"tune", "fleet"} <= keys  # O and F, as the host console has them
        await pilot.press("O")
        await _until(pilot, lambda: isinstance(app.screen, TuneScreen))
        app.screen.query_one("#tune-max-boots", Input).value = "1"
        await pilot.press("enter")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "goal max-tokens" in str(app.screen.body)  # type: ignore[attr-defined]
        assert pane.busy == "a tune"
        assert app.main_screen.panes[1].busy == "a tune"  # node 1's console: the same change
        await pilot.press("y")
        await _until(pilot, lambda: pane.busy is None and pane.changes.last_tune is not None, timeout=120)
        result = pane.changes.last_tune
        assert [s.outcome for s in result.steps] == ["ready"], result.reason
        assert pane.action_banner.headline.startswith("r1: tune: ")
        final = f"{result.steps[-1].candidate.fraction:.3f}"
        demo = tmp_path / "state" / "kvtui" / "demo"
        units = [(demo / n / "sglang-r1.service").read_text() for n in ("r1-a", "r1-b")]
        assert [float(str(get_flag(u, "unit", "mem-fraction-static"))) for u in units] == [float(final)] * 2


async def test_an_apply_of_every_node_records_each_node_s_edit_in_the_history(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # as `kvtui apply r1 --restart` does (changes.record_nodes), and the host console's apply
    app = _app(tmp_path, monkeypatch, two_node_hosts(), "r1")
    async with app.run_test(size=SIZE) as pilot:
        pane = _pane(app)
        await _until(pilot, lambda: pane.boot is not None and pane.boot.status is BootStatus.READY
                     and pane.calculator.result is not None)
        await pilot.press("c", *"0.85", "enter", "escape")
        await _until(pilot, lambda: pane.calculator.result is not None
                     and pane.calculator.result["edits"] == {"mem_fraction_static": 0.85})
        await pilot.press("a")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))  # one confirmation for every node
        await pilot.press("y")
        await _until(pilot, lambda: pane.busy is None and pane.changes.last_code is not None)
        assert pane.changes.last_code == 0, pane.action_banner.detail
        with open_store(readonly=True) as store:
            for node in ("r1-a", "r1-b"):
                restarts = [r.doc["restart"] for r in store.boots(node, limit=20) if r.doc.get("restart")]
                assert [(r["action"], r["edit"], r["outcome"]) for r in restarts] == [  # type: ignore[index,call-overload]
                    ("apply", ["--set mem-fraction-static=0.85"], "ready")], node


async def test_a_failed_apply_of_two_nodes_rolls_every_node_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # all or nothing, as a host's apply (one path: service.execute_nodes): node 0's server does not
    # answer the new boot's 1-token request (a model it does not serve: 404), so the change fails;
    # the running boot was ready, so the automatic rollback is on: BOTH nodes' files go back
    text = two_node_hosts().replace("[hosts.r1-a]\n", '[hosts.r1-a]\nprobe_model = "no-such-model"\n', 1)
    app = _app(tmp_path, monkeypatch, text, "r1")
    demo = tmp_path / "state" / "kvtui" / "demo"

    def fractions() -> list[str | None]:
        return [get_flag((demo / n / "sglang-r1.service").read_text(), "unit", "mem-fraction-static")
                for n in ("r1-a", "r1-b")]

    async with app.run_test(size=SIZE) as pilot:
        pane = _pane(app)
        await _until(pilot, lambda: pane.boot is not None and pane.boot.status is BootStatus.READY
                     and pane.calculator.result is not None)
        assert fractions() == ["0.88", "0.88"]
        await pilot.press("c", *"0.85", "enter", "escape")
        await _until(pilot, lambda: pane.calculator.result is not None
                     and pane.calculator.result["edits"] == {"mem_fraction_static": 0.85})
        await pilot.press("a")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "every node is rolled back (automatic rollback on by default" in str(app.screen.body)  # type: ignore[attr-defined]
        await pilot.press("y")
        await _until(pilot, lambda: pane.busy is None and pane.changes.last_code is not None, timeout=150)
        assert pane.changes.last_code == 1, pane.action_banner.detail
        assert pane.action_banner.headline.startswith("apply on r1: ready on every node, but node 0's server")
        assert "rolling back every node (--rollback-on-failure)" in pane.changes.last_outcome.messages
        assert fractions() == ["0.88", "0.88"]  # both nodes back on the flags they ran before
