"""Keys that keep their order in a burst.

Textual hands each key to the widget focused when the app takes it off its queue, and a binding
runs only once the key has bubbled back up to the app. Keys typed quickly (a paste, a fast
typist, ``tmux send-keys``) are therefore all handed to the widget focused *before* the first of
them moved focus: ``c`` then ``0.9`` put ``0.9`` in the log, not in the calculator. kvtui keeps
the order two ways:

* the keys that move focus (``c``, ``/``, ``&``, ``tab``…) are *priority* bindings of the main
  screen, which run as the app takes the key, before it hands on the next one (a widget that
  consumes printable keys — a field being edited — filters them out, so they are typed there);
* a text widget that receives a key after focus moved on (``esc`` then ``x`` in one burst) hands
  it back to the app (:func:`refocus_key`), which delivers it where focus is now.
"""

from __future__ import annotations

from textual import events
from textual.keys import key_to_character
from textual.widget import Widget

# Names Textual gives printable keys without mapping them back to their character
# (``key_to_character("slash")`` is None in Textual 8).
_PRINTABLE_NAMES = frozenset({"slash", "backslash", "space"})


def is_printable_key(key: str) -> bool:
    """Whether pressing ``key`` (a binding's key, e.g. ``x``, ``N``, ``slash``, ``ctrl+x``) types
    a character in a text field."""
    if len(key) == 1:
        return key.isprintable()
    if key in _PRINTABLE_NAMES:
        return True
    character = key_to_character(key)
    return character is not None and len(character) == 1 and character.isprintable()


def refocus_key(widget: Widget, event: events.Key) -> bool:
    """If ``widget`` lost focus since ``event`` was handed to it, give the key back to the app
    (as if just typed) and return True: the caller must not handle it."""
    if not widget.is_attached:
        return False
    try:
        focused = widget.screen.focused  # not ``has_focus``: that follows the Blur event, queued behind
    except Exception:
        return False
    if focused is widget:
        return False
    event.stop()
    event.prevent_default()
    widget.app.post_message(events.Key(event.key, event.character))
    return True


async def run_own_binding(widget: Widget, event: events.Key) -> bool:
    """Run ``widget``'s own binding for ``event``'s key now (keymap remaps applied), not after the
    key bubbled to the app: the keys typed after it, already in the widget's queue, then meet the
    state it left (a field left with ``esc`` no longer takes them). True when one ran."""
    try:
        active = widget.screen.active_bindings.get(event.key)
    except Exception:
        return False
    if active is None or active.node is not widget or not active.enabled:
        return False
    event.stop()
    event.prevent_default()
    await widget.run_action(active.binding.action)
    return True
