"""The deployment console's bindings are the host console's by id (issue 23: one table)."""

from __future__ import annotations

from textual.binding import Binding

from kvtui.ui.bindings import DEPLOYMENT_BINDING_IDS, MAIN_BINDINGS, shared_bindings
from kvtui.ui.deployment_screen import DEPLOYMENT_BINDINGS


def _main() -> dict[str, Binding]:
    return {b.id: b for b in MAIN_BINDINGS if isinstance(b, Binding) and b.id}


def test_shared_bindings_takes_key_action_and_description_from_main_with_the_screen_s_tooltips() -> None:
    own = Binding("g", "gpu_plot", "GPU plot", id="gpu.plot")
    got = shared_bindings(["help", own, "processes"], tooltips={"processes": "on every node"},
                          hidden=frozenset({"processes"}))
    main = _main()
    assert got[0] == main["help"]
    assert got[1] is own
    assert isinstance(got[2], Binding)
    assert (got[2].key, got[2].action, got[2].description) == ("p", "processes", "Processes")
    assert got[2].tooltip == "on every node"
    assert not got[2].show
    assert main["processes"].show


def test_every_deployment_binding_but_its_own_is_a_main_binding_with_the_same_key_and_action() -> None:
    main = _main()
    for b in DEPLOYMENT_BINDINGS:
        assert isinstance(b, Binding)
        assert b.id
        if b.id in DEPLOYMENT_BINDING_IDS:
            continue
        m = main[b.id]
        assert (b.key, b.action, b.description, b.priority) == (m.key, m.action, m.description, m.priority)
