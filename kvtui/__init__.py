"""kvtui: watch LLM inference servers boot, predict their KV pool, apply edits safely.

Importing ``kvtui`` must stay cheap: no textual, no asyncssh here.
"""

__version__ = "0.1.0"
