"""SGLang log grammar: one line of SGLang output -> a ``ParsedLine`` with typed events.

Covers the formats of SGLang 0.4.10, 0.5.10-0.5.16 and 0.5.23 (``engines.md`` section 1): the
``[YYYY-MM-DD HH:MM:SS(.mmm)( DP0)( PP1)( TP3)( EP0)…]`` prefix, every startup phase line, the
failure lines, tqdm progress bars and the serving lines.

Modules: ``grammar`` (``SglangGrammar``), ``patterns`` (the regexes and small readers),
``failures`` (plain Python / PyTorch / NCCL failure text), ``args`` (the argument dump). The
public names are re-exported here.

The grammar is stateful per boot: inside one scheduler SGLang runs the target model through
init -> weights -> KV pool -> graph capture and then a speculative draft worker through its own
weights -> KV pool -> capture (newer builds load the draft weights before the target's pool).
A rank's second ``Load weight begin``, and its KV lines after its own target ``Memory pool end``,
belong to the draft (``Model.DRAFT``). ``reset()`` forgets that state (a new boot).

Pure core: no I/O, no textual/asyncssh. Hot path: serving lines (``Decode batch``) are ~90 % of
a long log, so they are recognised with ``str.startswith`` and read with ``str.find``.
"""

from __future__ import annotations

from kvtui.engines.sglang.args import parse_server_args
from kvtui.engines.sglang.grammar import SglangGrammar
from kvtui.engines.sglang.patterns import rank_of_process_title

__all__ = [
    "SglangGrammar",
    "parse_server_args",
    "rank_of_process_title",
]
