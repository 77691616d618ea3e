"""Incident bundles: one remembered boot in a ``.tar.gz`` that someone else can open offline
(``kvtui replay BUNDLE``): the boot's log from the spool, the stored document, the diff against
the last good boot, and the ``replay --json`` document of the log — with secrets masked (flags and
environment variables whose names look like tokens, keys, passwords or secrets; in the log too).

Members: ``manifest.json`` (``{"kvtui_bundle": 1, "host", "boot", "created", "members", "notes"}``),
``boot.json``, ``log.txt``, ``diff.txt`` (when there is a last good boot), ``replay.json``, and when
known: ``gpu.json`` (the boot's GPU readings: ``record.GpuSeries``), ``calc.json`` / ``calc.txt``
(the calculator's state: its prediction with the reasons and explain lines), ``flags-before.txt``
/ ``flags-after.txt`` (a kvtui-applied edit: the backup taken before it and the file as it is
now), ``screenshot.svg`` (a bundle written from the console). ``notes`` says what could not be
added and why."""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from kvtui.history.doc import BootDoc

BUNDLE_VERSION: Final = 1
MASK: Final = "***"
# a name whose last part (split at _ - .) is a secret word: api_key, HF_TOKEN, DB_PASSWORD, auth;
# not tokenizer_path, token_usage or max_total_num_tokens
_SECRET: Final = r"(?:[a-z0-9]+[_.-])*(?:token|key|apikey|secret|password|passwd|pwd|credentials?|auth)(?![a-z0-9])"
# --api-key VALUE / --api-key=VALUE ; NAME=VALUE (env, shell) ; name='value' (a Python repr dump)
_FLAG_RE: Final = re.compile(rf"(?<![\w-])(--{_SECRET})([ =])(\"[^\"]*\"|'[^']*'|\S+)", re.IGNORECASE)
_REPR_RE: Final = re.compile(rf"(\b{_SECRET}=)('[^']*'|\"[^\"]*\")", re.IGNORECASE)
_ENV_RE: Final = re.compile(rf"(\b{_SECRET}=)([^\s'\",;)]+)", re.IGNORECASE)
_NAME_RE: Final = re.compile(rf"^{_SECRET}$", re.IGNORECASE)


def secret_name(name: str) -> bool:
    """A flag or variable name that looks like it holds a secret."""
    return bool(_NAME_RE.match(name.lstrip("-")))


def mask_text(text: str) -> str:
    """``text`` with the values of secret-looking flags and variables replaced by ``***``."""
    text = _FLAG_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _REPR_RE.sub(lambda m: f"{m.group(1)}'{MASK}'", text)
    return _ENV_RE.sub(lambda m: f"{m.group(1)}{MASK}", text)


def mask_doc(value: Any, key: str = "") -> Any:
    """A stored document with secret-looking keys' values masked (recursively), and every
    string masked as text."""
    if key and secret_name(key) and value is not None:
        return MASK
    if isinstance(value, dict):
        return {k: mask_doc(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_doc(v) for v in value]
    if isinstance(value, str):
        return mask_text(value)
    return value


_SVG_SEP: Final = "[ =\u00a0]"
_SVG_QUOTE: Final = "(?:'|\"|&#x27;|&#39;|&quot;)?"
_SVG_VALUE: Final = "[^\\s<&\"',;)]+"
_SVG_FLAG_RE: Final = re.compile(rf"(?<![\w-])(--{_SECRET}{_SVG_SEP}+{_SVG_QUOTE}){_SVG_VALUE}", re.IGNORECASE)
_SVG_ENV_RE: Final = re.compile(rf"(\b{_SECRET}={_SVG_QUOTE}){_SVG_VALUE}", re.IGNORECASE)


def mask_svg(svg: str) -> str:
    """A screenshot (Textual's SVG export) with secret-looking values masked in its text (the
    export writes spaces as ``&#160;`` and quotes as entities)."""
    text = svg.replace("&#160;", "\u00a0")
    text = _SVG_FLAG_RE.sub(lambda m: f"{m.group(1)}{MASK}", text)
    text = _SVG_ENV_RE.sub(lambda m: f"{m.group(1)}{MASK}", text)
    return text.replace("\u00a0", "&#160;")


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(mtime)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def write_bundle(path: Path, *, host: str, boot_id: int, doc: BootDoc, log_lines: Sequence[str],
                 replay_doc: Mapping[str, object], diff_lines: Sequence[str] = (), now: float | None = None,
                 texts: Mapping[str, str] | None = None, docs: Mapping[str, object] | None = None,
                 svg: str | None = None, notes: Sequence[str] = ()) -> Path:
    """Write the bundle (atomically: a temporary name, then renamed). ``texts`` and ``docs``: more
    members (text / JSON), masked like the rest; ``svg``: the console's screenshot."""
    created = time.time() if now is None else now
    members: list[tuple[str, bytes]] = [
        ("boot.json", json.dumps(mask_doc(doc.to_json()), indent=2, ensure_ascii=False).encode()),
        ("log.txt", "".join(mask_text(ln) + "\n" for ln in log_lines).encode()),
    ]
    if diff_lines:
        members.append(("diff.txt", "".join(mask_text(ln) + "\n" for ln in diff_lines).encode()))
    members.append(("replay.json", json.dumps(mask_doc(dict(replay_doc)), indent=2, ensure_ascii=False).encode()))
    for name, value in (docs or {}).items():
        members.append((name, json.dumps(mask_doc(value), indent=2, ensure_ascii=False).encode()))
    for name, text in (texts or {}).items():
        members.append((name, mask_text(text).encode()))
    if svg is not None:
        members.append(("screenshot.svg", mask_svg(svg).encode()))
    manifest = {"kvtui_bundle": BUNDLE_VERSION, "host": host, "boot": boot_id, "created": created,
                "members": [n for n, _ in members], "notes": [mask_text(n) for n in notes]}
    tmp = path.with_name(path.name + ".part")
    with tarfile.open(tmp, "w:gz") as tar:
        _add(tar, "manifest.json", json.dumps(manifest, indent=2).encode(), created)
        for name, data in members:
            _add(tar, name, data, created)
    tmp.replace(path)
    return path


def read_members(path: str | Path) -> dict[str, bytes] | None:
    """Every member of a kvtui bundle (None when ``path`` is not one)."""
    try:
        if not tarfile.is_tarfile(path):
            return None
        out: dict[str, bytes] = {}
        with tarfile.open(path, "r:*") as tar:
            for info in tar.getmembers():
                if info.isfile() and info.size <= 256 << 20:
                    fh = tar.extractfile(info)
                    if fh is not None:
                        out[info.name] = fh.read()
    except (OSError, tarfile.TarError):
        return None
    try:
        manifest = json.loads(out.get("manifest.json", b""))
    except ValueError:
        return None
    if not isinstance(manifest, dict) or manifest.get("kvtui_bundle") != BUNDLE_VERSION:
        return None
    return out


def read_member(path: str | Path, name: str) -> bytes | None:
    """A member of a kvtui bundle; None when ``path`` is not one (or lacks the member)."""
    try:
        if not tarfile.is_tarfile(path):
            return None
        with tarfile.open(path, "r:*") as tar:
            try:
                manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
            except (KeyError, AttributeError, ValueError):
                return None
            if not isinstance(manifest, dict) or manifest.get("kvtui_bundle") != BUNDLE_VERSION:
                return None
            try:
                member = tar.extractfile(name)
            except KeyError:
                return None
            return member.read() if member is not None else None
    except (OSError, tarfile.TarError):
        return None
