"""The command palette (ctrl+p): the console's actions, host switching and themes, grouped by
topic ("log: search", "host: switch to demo-b", "theme: kvtui-light")."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from kvtui.ui.app import MainScreen

Command = tuple[str, str, Callable[[], object]]


@runtime_checkable
class PaletteScreen(Protocol):
    """A screen whose palette ``KvtuiCommands`` fills (``MainScreen``: ``main_screen_commands``);
    the provider asks the screen, so this module does not import the app that imports it."""

    def palette_commands(self) -> list[Command]: ...

# binding id -> palette topic
TOPICS: dict[str, str] = {
    "help": "help",
    "search": "log",
    "search.next": "log",
    "search.previous": "log",
    "search.backward": "log",
    "filter": "log",
    "follow": "log",
    "error.next": "log",
    "error.previous": "log",
    "timestamps": "log",
    "wrap": "log",
    "mark": "log",
    "copy.line": "log",
    "copy.boot": "log",
    "calculator": "calculator",
    "explain": "calculator",
    "processes": "gpu",
    "restart": "server",
    "apply": "server",
    "rollback": "server",
    "change.cancel": "server",
    "demo.speed": "server",
    "zoom": "view",
    "theme.next": "view",
    "host.next": "host",
    "host.previous": "host",
    "fleet": "fleet",
}


def main_screen_commands(screen: MainScreen) -> list[Command]:
    """Every command the palette offers on ``screen`` (hidden actions are left out)."""
    commands: list[Command] = []
    for binding in screen.command_bindings():
        topic = TOPICS.get(binding.id or "", "")
        if not topic:
            continue
        action = binding.action
        name = action.split("(")[0]
        if screen.check_action(name, ()) is False:
            continue
        title = f"{topic}: {binding.description.lower()}"
        run = partial(screen.call_later, screen.run_action, action)
        commands.append((title, binding.tooltip or binding.description, run))
    for name in screen.host_names:
        if len(screen.host_names) > 1:
            commands.append(
                (f"host: switch to {name}", f"show {name}'s tab", partial(screen.switch_host, name))
            )
    app = screen.app
    kvtui_first = sorted(app.available_themes, key=lambda n: (not n.startswith("kvtui-"), n))
    for theme in kvtui_first:
        commands.append((f"theme: {theme}", "switch the colour theme", partial(setattr, app, "theme", theme)))
    return commands


class KvtuiCommands(Provider):
    """Palette provider for the main screen."""

    def _commands(self) -> list[Command]:
        screen = self.screen
        if not isinstance(screen, PaletteScreen):
            return []
        return screen.palette_commands()

    async def discover(self) -> Hits:
        for title, help_text, callback in self._commands():
            if not title.startswith("theme:"):
                yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, help=help_text)
