"""Reading a saved log, the rule of every command that reads one (``replay``, ``calc --log``):
input that cannot be read as text (missing, a directory, no permission, a read error, damaged
gzip, binary data) is *unreadable* (``InputError``: exit 3 with the reason); readable text that
holds no SGLang or vLLM boot is not unreadable (``no_boot_found`` says so in one sentence).

The stream is read in chunks (gzip decompressed on the fly), so a multi-GB journal never sits in
memory as one string; ``kvtui.bootlog.read_log`` turns the chunks into boots.
"""

from __future__ import annotations

import gzip
import io
import sys
from collections.abc import Iterator
from typing import BinaryIO, Protocol

CHUNK_BYTES = 4 << 20


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class InputError(Exception):
    """The input cannot be read (exit 3)."""


def open_log(path: str) -> BinaryIO:
    """The file at ``path`` (``-``: standard input), opened for reading bytes; ``InputError`` when
    it cannot be opened."""
    if path == "-":
        return sys.stdin.buffer
    try:
        f: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed by the caller
    except FileNotFoundError as exc:
        raise InputError(f"{path}: no such file") from exc
    except IsADirectoryError as exc:
        raise InputError(f"{path}: is a directory, expected a log file") from exc
    except PermissionError as exc:
        raise InputError(f"{path}: permission denied") from exc
    except OSError as exc:
        raise InputError(f"{path}: cannot open ({exc.strerror or exc})") from exc
    return f


_TEXT_CONTROLS = frozenset(b"\t\n\r\x0c\x08\x1b")


def check_text(head: bytes, name: str) -> None:
    """Raise ``InputError`` when the start of an input is binary data, not a text log: a NUL byte,
    or more than a tenth of control bytes / bytes that are not UTF-8 text (logs are text; a
    journal in ``-o export`` or a core dump is not)."""
    sample = head[:65536]
    if not sample:
        return
    nul = sample.find(b"\x00")
    if nul >= 0:
        raise InputError(f"{name}: binary data, not a text log (a NUL byte at offset {nul:,})")
    controls = sum(1 for b in sample if b < 0x20 and b not in _TEXT_CONTROLS)
    bad = sample.decode("utf-8", errors="replace").count("\ufffd")
    if controls + bad > len(sample) // 10:
        raise InputError(f"{name}: binary data, not a text log ({controls + bad:,} of the first "
                         f"{len(sample):,} bytes are neither text nor UTF-8)")


def read_chunks(stream: Readable, name: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The stream in chunks; gzip input is decompressed on the fly. Binary data (``check_text``)
    raises ``InputError`` before the first chunk."""
    try:
        head = stream.read(chunk_bytes)
    except OSError as exc:
        raise InputError(f"{name}: cannot read ({exc.strerror or exc})") from exc
    if head[:2] == b"\x1f\x8b":
        gz = gzip.GzipFile(fileobj=RawView(stream, head), mode="rb")
        stream = gz
        try:
            head = gz.read(chunk_bytes)
        except (OSError, EOFError) as exc:
            raise InputError(f"{name}: damaged gzip data ({exc})") from exc
    check_text(head, name)
    while head:
        yield head
        try:
            head = stream.read(chunk_bytes)
        except (OSError, EOFError) as exc:
            raise InputError(f"{name}: read failed ({exc})") from exc


class RawView(io.RawIOBase):
    """A raw stream over ``rest``: ``first`` (bytes already read from it, to sniff gzip) comes before it,
    and no more than ``limit`` bytes in all are read (None: to its end)."""

    def __init__(self, rest: Readable, first: bytes = b"", limit: int | None = None) -> None:
        self._first = first
        self._rest = rest
        self._left = limit

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        n = len(b) if self._left is None else min(len(b), self._left)
        if n <= 0:
            return 0
        if self._first:
            data, self._first = self._first[:n], self._first[n:]
        else:
            data = self._rest.read(n)
        b[: len(data)] = data
        if self._left is not None:
            self._left -= len(data)
        return len(data)


def no_boot_found(source: str) -> str:
    """The one sentence for readable text that holds no boot (``replay``, ``calc --log``)."""
    return f"no SGLang or vLLM boot found in {source} (the text holds no engine start line kvtui recognises)"
