"""Incident bundles: one remembered boot in a ``.tar.gz`` that someone else can open offline
(``kvtui replay BUNDLE``): the boot's log from the spool, the stored document, the diff against
the last good boot, and the ``replay --json`` document of the log — with secrets masked (flags and
environment variables whose names look like tokens, keys, passwords or secrets; in the log too).

Members: ``manifest.json`` (``{"kvtui_bundle": 1, "host", "boot", "created"}``), ``boot.json``,
``log.txt``, ``diff.txt`` (when there is a last good boot), ``replay.json``."""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

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


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(mtime)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def write_bundle(path: Path, *, host: str, boot_id: int, doc: Mapping[str, Any], log_lines: Sequence[str],
                 replay_doc: Mapping[str, Any], diff_lines: Sequence[str] = (), now: float | None = None) -> Path:
    """Write the bundle (atomically: a temporary name, then renamed)."""
    created = time.time() if now is None else now
    manifest = {"kvtui_bundle": BUNDLE_VERSION, "host": host, "boot": boot_id, "created": created}
    tmp = path.with_name(path.name + ".part")
    with tarfile.open(tmp, "w:gz") as tar:
        _add(tar, "manifest.json", json.dumps(manifest, indent=2).encode(), created)
        _add(tar, "boot.json", json.dumps(mask_doc(dict(doc)), indent=2, ensure_ascii=False).encode(), created)
        _add(tar, "log.txt", "".join(mask_text(ln) + "\n" for ln in log_lines).encode(), created)
        if diff_lines:
            _add(tar, "diff.txt", "".join(mask_text(ln) + "\n" for ln in diff_lines).encode(), created)
        _add(tar, "replay.json", json.dumps(mask_doc(dict(replay_doc)), indent=2, ensure_ascii=False).encode(),
             created)
    tmp.replace(path)
    return path


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
