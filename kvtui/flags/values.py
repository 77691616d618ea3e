"""Flag values: what the engine (and the shell) would refuse, and whether two values are the same.

``validate_value`` checks a value the way the engine would (a fraction outside (0, 1), a negative
count, a non-number, a value for a switch) and refuses shell or systemd metacharacters: kvtui writes
every value as one plain word. ``same_value`` compares a value read back (from the file or the
engine's argument dump) with what an edit asked for, numbers as numbers.
"""

from __future__ import annotations

import math
import re

from kvtui.engines.events import Engine
from kvtui.flags.errors import BadValue
from kvtui.knobs import Knob, ValueKind

_VL = Engine.VLLM
EditValue = str | bool | None  # str: a value; True: a bare boolean flag; False: boolean off; None: unset


# What a value may contain: it is written into a unit or a shell script as one word, unquoted.
_SAFE_VALUE = re.compile(r"[A-Za-z0-9._,:/=+@-]+")
_META_NAMES = {
    " ": "a space",
    "\t": "a tab",
    "\n": "a newline",
    "$": "'$' (variable expansion)",
    "`": "'`' (command substitution)",
    ";": "';' (command separator)",
    "&": "'&'",
    "|": "'|' (pipe)",
    "<": "'<' (redirection)",
    ">": "'>' (redirection)",
    "(": "'('",
    ")": "')'",
    "'": "a quote",
    '"': "a quote",
    "\\": "a backslash",
    "*": "'*' (glob)",
    "?": "'?' (glob)",
    "[": "'[' (glob)",
    "]": "']' (glob)",
    "{": "'{' (brace expansion)",
    "}": "'}' (brace expansion)",
    "~": "'~' (home expansion)",
    "#": "'#' (comment)",
    "!": "'!' (history expansion)",
    "%": "'%' (a systemd specifier)",
}
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
_LEN_RE = re.compile(r"(\d+)([kKmMgG]?)")


def _check_safe(flag: str, value: str) -> None:
    if value == "":
        raise BadValue(f"--{flag}: empty value; give one (--set {flag}=VALUE) or remove the flag (--unset {flag})")
    if _SAFE_VALUE.fullmatch(value):
        return
    bad = next(c for c in value if not _SAFE_VALUE.fullmatch(c))
    what = _META_NAMES.get(bad, f"{bad!r}")
    raise BadValue(
        f"--{flag}={value!r}: the value contains {what}, which the shell or systemd would interpret; "
        "kvtui writes only plain values (letters, digits and . _ , : / = + @ -)"
    )


def validate_value(engine: Engine, spec: Knob | None, flag: str, value: str) -> str:
    """Check a value the way the engine would; return it as it will be written.

    Raises FlagError saying why the engine (or the shell) would refuse it.
    """
    _check_safe(flag, value)
    if spec is None:
        return value
    kind = spec.kind
    eng = "vLLM" if engine is _VL else "SGLang"
    if kind is ValueKind.FRACTION:
        try:
            f = float(value)
        except ValueError:
            raise BadValue(f"--{flag}={value}: not a number; expected a fraction such as 0.85") from None
        upper_ok = engine is _VL and f == 1.0
        if not (math.isfinite(f) and 0.0 < f < 1.0) and not upper_ok:
            rng = "(0, 1]" if engine is _VL else "(0, 1)"
            raise BadValue(
                f"--{flag}={value}: a memory fraction must lie in {rng}; {eng} refuses {value} "
                "(it is the share of GPU memory the server may claim)"
            )
        return value
    if kind in (ValueKind.POS_INT, ValueKind.NONNEG_INT, ValueKind.CHUNK, ValueKind.PORT):
        try:
            n = int(value, 10)
        except ValueError:
            raise BadValue(f"--{flag}={value}: not an integer; expected a whole number") from None
        if kind is ValueKind.POS_INT and n <= 0:
            what = "a negative count" if n < 0 else "zero"
            raise BadValue(f"--{flag}={value}: {what}; {eng} needs a whole number above 0")
        if kind is ValueKind.NONNEG_INT and n < 0:
            raise BadValue(f"--{flag}={value}: a negative count; {eng} needs 0 or more")
        if kind is ValueKind.CHUNK and (n == 0 or n < -1):
            raise BadValue(f"--{flag}={value}: expected a size above 0 (or -1 to disable chunking)")
        if kind is ValueKind.PORT and not 1 <= n <= 65535:
            raise BadValue(f"--{flag}={value}: a TCP port must be 1-65535")
        return value
    if kind is ValueKind.LEN:
        m = _LEN_RE.fullmatch(value)
        if m is None or (m.group(2) and engine is not _VL):
            if value.lstrip("-").isdigit():
                raise BadValue(f"--{flag}={value}: a negative length; {eng} needs a number of tokens above 0")
            raise BadValue(f"--{flag}={value}: expected a number of tokens, such as 131072")
        if int(m.group(1)) <= 0:
            raise BadValue(f"--{flag}={value}: zero; {eng} needs a number of tokens above 0")
        return value
    if kind is ValueKind.NONNEG_FLOAT:
        try:
            x = float(value)
        except ValueError:
            raise BadValue(f"--{flag}={value}: not a number") from None
        if not math.isfinite(x) or x < 0:
            raise BadValue(f"--{flag}={value}: {eng} needs a number of 0 or more")
        return value
    if kind is ValueKind.INT_LIST:
        parts = [p for p in value.split(",") if p]
        try:
            nums = [int(p) for p in parts]
        except ValueError:
            raise BadValue(f"--{flag}={value}: expected whole numbers separated by commas (1,2,4,8)") from None
        if not nums or any(n <= 0 for n in nums):
            raise BadValue(f"--{flag}={value}: batch sizes must be whole numbers above 0")
        return value
    if kind is ValueKind.BOOL:
        raise BadValue(f"--{flag} is a switch; use --set {flag} to turn it on or --unset {flag} to turn it off")
    return value


def same_value(actual: object, expected: EditValue) -> bool:
    """Whether a parsed or dumped value equals what an edit asked for (numbers compared as numbers)."""
    if expected is None:
        return actual is None
    if isinstance(expected, bool):
        if isinstance(actual, bool):
            return actual is expected
        if isinstance(actual, str):
            return (actual.lower() in _TRUE) if expected else (actual.lower() in _FALSE)
        return actual is None and not expected
    if actual is None or isinstance(actual, bool):
        return False
    if isinstance(actual, (list, tuple)):
        return [str(x) for x in actual] == [p for p in re.split(r"[,\s]+", expected) if p]
    a = str(actual).strip().strip("'\"")
    e = expected.strip()
    if a == e:
        return True
    try:
        return math.isclose(float(a), float(_expand_len(e)), rel_tol=1e-9, abs_tol=1e-12)
    except ValueError:
        return False


def _expand_len(v: str) -> str:
    m = _LEN_RE.fullmatch(v)
    if m is None or not m.group(2):
        return v
    mult = {"k": 1000, "m": 1000**2, "g": 1000**3}[m.group(2).lower()]
    return str(int(m.group(1)) * mult)
