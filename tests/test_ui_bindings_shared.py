"""One binding table (issue 23): a deployment's node panes are host panes, bound by the main
screen's table; the deployment's own key (``#``, id ``node.filter``) is one of its rows."""

from __future__ import annotations

from textual.binding import Binding

from kvtui.ui.app import KvtuiApp
from kvtui.ui.bindings import MAIN_BINDINGS


def test_the_node_key_is_a_main_binding_and_every_id_is_bound_once() -> None:
    main = [b for b in MAIN_BINDINGS if isinstance(b, Binding)]
    ids = [b.id for b in main]
    assert len(ids) == len(set(ids))
    node = next(b for b in main if b.id == "node.filter")
    assert (node.key, node.action) == ("number_sign", "next_node")
    assert KvtuiApp.binding_ids().count("node.filter") == 1
    assert "gpu.plot" not in KvtuiApp.binding_ids()  # the deployment screen's own plot key went with it
