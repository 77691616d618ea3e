"""Files: read, hash, atomic write, backup."""

from __future__ import annotations

import re

from kvtui.hosts.shellcmd.base import qpath, sh_c, sudo_prefix


def read_file(path: str, *, sudo: bool = False) -> str:
    return f"{sudo_prefix(sudo)}cat -- {qpath(path)}"


def file_sha256(path: str, *, sudo: bool = False) -> str:
    """Prints the hex SHA-256 of the file (first word; read from stdin so that no file name
    escaping can prefix the digest)."""
    return f"{sudo_prefix(sudo)}{sh_c(f'sha256sum < {qpath(path)}')}"


EXIT_CHANGED = 17  # write_file_atomic: the file is not the one that was read
EXIT_EXISTS = 18  # backup_copy: the backup name is taken
EXIT_INCOMPLETE = 19  # write_file_atomic: the received text does not have the announced hash


def write_file_atomic(
    path: str, *, sudo: bool = False, expect_sha256: str | None = None, content_sha256: str | None = None
) -> str:
    """Replace ``path`` with stdin atomically: a temp file in the same directory, mode and owner
    copied from the old file, fsync, ``mv`` over it, fsync the directory. With ``expect_sha256``
    the current file must still have that hash (else exit 17, nothing written). With
    ``content_sha256`` the received text must have that hash before the rename (else exit 19:
    a transfer cut midway never replaces the file)."""
    if expect_sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", expect_sha256):
        raise ValueError("expect_sha256 must be 64 hex digits")
    if content_sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", content_sha256):
        raise ValueError("content_sha256 must be 64 hex digits")
    verify = ""
    if content_sha256:
        verify = (f'n=$(sha256sum < "$t" | cut -d" " -f1)\n'
                  f'[ "$n" = {content_sha256} ] || {{ echo "kvtui: the new content of $f arrived incomplete" >&2; '
                  f"exit {EXIT_INCOMPLETE}; }}\n")
    check = ""
    if expect_sha256:
        check = (f'h=$(sha256sum < "$f" 2>/dev/null | cut -d" " -f1)\n'
                 f'[ "$h" = {expect_sha256} ] || {{ echo "kvtui: $f changed since it was read" >&2; '
                 f"exit {EXIT_CHANGED}; }}\n")
    script = f"""set -e
f={qpath(path)}
d=$(dirname -- "$f"); b=$(basename -- "$f")
{check}t=$(mktemp "$d/.$b.kvtui-XXXXXX")
trap 'rm -f -- "$t"' EXIT
cat > "$t"
{verify}if [ -e "$f" ]; then
  chmod --reference="$f" -- "$t"
  chown --reference="$f" -- "$t"
fi
sync -- "$t" 2>/dev/null || sync
mv -f -- "$t" "$f"
trap - EXIT
sync -- "$d" 2>/dev/null || true"""
    return f"{sudo_prefix(sudo)}{sh_c(script)}"


def list_backups(path: str, *, sudo: bool = False) -> str:
    """Prints kvtui's backups of ``path`` (``<path>.kvtui-*``), one per line, sorted by name."""
    script = f"""for b in {qpath(path)}.kvtui-*; do [ -e "$b" ] && printf '%s\\n' "$b"; done | LC_ALL=C sort
exit 0"""
    return f"{sudo_prefix(sudo)}{sh_c(script)}"


def backup_copy(path: str, backup_path: str, *, sudo: bool = False) -> str:
    """Copy ``path`` to ``backup_path`` keeping mode, owner and times; refuses (exit 18) to
    overwrite an existing backup."""
    script = f"""set -e
s={qpath(path)}; t={qpath(backup_path)}
if [ -e "$t" ]; then echo "kvtui: backup $t already exists" >&2; exit {EXIT_EXISTS}; fi
cp -p -- "$s" "$t"
sync -- "$t" 2>/dev/null || true"""
    return f"{sudo_prefix(sudo)}{sh_c(script)}"
