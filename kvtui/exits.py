"""kvtui's exit codes, the same for every command (DESIGN: "Exit codes").

0 ok / ready; 1 the boot failed, or the prediction says it will; 2 usage error (also an edit
malformed as given); 3 connection, config or unreadable input (text without a boot is not
unreadable: see ``kvtui.commands.logfile``); 4 refused (readonly host, unsafe edit, a prediction of
``no_fit``/``oom_risk`` without ``--force``, a file changed since it was read); 5 timed out.
"""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INPUT: Final = 3
EXIT_REFUSED: Final = 4
EXIT_TIMEOUT: Final = 5
EXIT_INTERRUPTED: Final = 130  # Ctrl-C (128 + SIGINT), as a shell reports it
