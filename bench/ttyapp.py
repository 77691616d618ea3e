"""Run ``kvtui`` as a user does: a real process on a pseudo-terminal of a given size, its output
read continuously (a terminal that is not read would block the app), its CPU time from /proc.

Only the process started here is ever signalled (by its PID)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from common import ROOT

BURST_GAP = 0.03  # output chunks closer than this belong to one frame (a pty answers no sync query)


def kvtui_argv(*args: str) -> list[str]:
    exe = Path(sys.executable).parent / "kvtui"
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "kvtui", *args]


def isolated_env(work: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """kvtui's config and state under ``work`` (never the user's), a 256-colour terminal.

    Python keeps compiled bytecode as a user's Python does (this sandbox sets
    ``PYTHONDONTWRITEBYTECODE``, which would make every start compile kvtui's ~50 modules again:
    ~0.3 s no installed copy pays after its first run), in ``work`` rather than next to the
    sources."""
    env = dict(os.environ)
    env.update({
        "XDG_STATE_HOME": str(work / "state"), "XDG_CONFIG_HOME": str(work / "config"),
        "TERM": "xterm-256color", "COLORTERM": "truecolor", "PYTHONPATH": str(ROOT),
        "PYTHONPYCACHEPREFIX": str(work / "pycache"),
    })
    env.pop("KVTUI_HOSTS", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra or {})
    return env


class TtyApp:
    """``argv`` on a pty of ``cols`` x ``rows``; ``output`` grows as the app writes."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], *, cols: int = 160, rows: int = 48,
                 cwd: Path | None = None) -> None:
        self.started = time.perf_counter()
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave, env=dict(env),
                                     cwd=str(cwd) if cwd else None, start_new_session=True, close_fds=True)
        os.close(slave)
        self._fd = master
        self.output = bytearray()
        self.chunks: list[tuple[float, int]] = []  # (time, len(output)) after each read
        self._lock = threading.Lock()
        self._stop = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._stop:
            try:
                ready, _, _ = select.select([self._fd], [], [], 0.05)
            except (OSError, ValueError):
                return
            if not ready:
                continue
            try:
                data = os.read(self._fd, 65536)
            except OSError:
                return
            if not data:
                return
            now = time.perf_counter()
            with self._lock:
                self.output += data
                self.chunks.append((now, len(self.output)))

    def wait_for_frame_with(self, needles: Sequence[bytes], timeout: float) -> float | None:
        """Seconds from start to the end of the first burst of output (a frame: chunks less than
        ``BURST_GAP`` apart) after which every needle has been written (None on timeout or exit)."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            time.sleep(0.01)
            with self._lock:
                chunks = list(self.chunks)
                out = bytes(self.output)
            hit = next((i for i, (_, end) in enumerate(chunks) if all(n in out[:end] for n in needles)), None)
            if hit is not None:
                j = hit
                while j + 1 < len(chunks) and chunks[j + 1][0] - chunks[j][0] < BURST_GAP:
                    j += 1
                if j + 1 < len(chunks) or time.perf_counter() - chunks[j][0] >= BURST_GAP:
                    return chunks[j][0] - self.started
            if self.proc.poll() is not None:
                return None
        return None

    def cpu_seconds(self) -> float:
        """User + system CPU time of the app process (and any threads) so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def send(self, data: bytes) -> None:
        os.write(self._fd, data)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send(b"q")
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=5)
        self._stop = True
        self._reader.join(timeout=2)
        os.close(self._fd)
