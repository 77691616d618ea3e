"""A model's config.json on the host (the calculator of a server whose start is not in the log)."""

from __future__ import annotations

import re
import shlex

from kvtui.hosts.shellcmd.base import q

MODEL_CONFIG_TAG = "kvtui-model-config"
MODEL_CONFIG_MAX_BYTES = 1024 * 1024  # a config.json is a few KiB; more is not a model's config
MODEL_CONFIG_FOUND = "kvtui-config "  # stdout's first line: the file read, then its bytes
MODEL_CONFIG_TRIED = "kvtui-tried "  # stdout when none is found: one line per path tried
_HF_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")

# $1 the model as the flags say it, $2 a directory to look in ('' none), $3 the Hugging Face cache
# folder of the repo id ('' none), $4 the server's pid ('' unknown: its HF_HOME / HF_HUB_CACHE and
# working directory are read from /proc when readable). Prints MODEL_CONFIG_FOUND PATH and the
# file's first MAX+1 bytes, or MODEL_CONFIG_TRIED PATH lines and exits 3.
_MODEL_CONFIG_SCRIPT = r"""m=$1 dir=$2 repo=$3 pid=$4 max=$5
penv() { [ -n "$pid" ] && tr '\000' '\n' < /proc/"$pid"/environ 2>/dev/null | sed -n "s/^$1=//p" | head -n 1; }
found() { printf '@FOUND@%s\n' "$1"; head -c "$max" -- "$1"; exit 0; }
tried=''
try() { if [ -f "$1" ] && [ -r "$1" ]; then found "$1"; fi; tried="${tried}@TRIED@$1
"; }
if [ -n "$dir" ]; then
  case $dir in
    /*) try "$dir/config.json" ;;
    *) cwd=$( [ -n "$pid" ] && readlink /proc/"$pid"/cwd 2>/dev/null )
       [ -n "$cwd" ] && try "$cwd/$dir/config.json"
       try "$dir/config.json" ;;
  esac
fi
if [ -n "$repo" ]; then
  p_hub=$(penv HF_HUB_CACHE); p_home=$(penv HF_HOME)
  for hub in "$p_hub" "${p_home:+$p_home/hub}" "${HF_HUB_CACHE:-}" "${HF_HOME:+$HF_HOME/hub}" \
             "$HOME/.cache/huggingface/hub"; do
    [ -n "$hub" ] || continue
    d="$hub/$repo"
    if [ -r "$d/refs/main" ]; then try "$d/snapshots/$(head -c 200 "$d/refs/main")/config.json"; fi
    newest=$(ls -t -- "$d"/snapshots/*/config.json 2>/dev/null | head -n 1)
    if [ -n "$newest" ]; then try "$newest"; else try "$d/snapshots/*/config.json"; fi
  done
fi
printf '%s' "$tried"
exit 3""".replace("@FOUND@", MODEL_CONFIG_FOUND).replace("@TRIED@", MODEL_CONFIG_TRIED)


def model_config(model: str, *, pid: int | None = None, max_bytes: int = MODEL_CONFIG_MAX_BYTES) -> str:
    """Print the ``config.json`` of the model a server runs (its ``--model-path`` / ``--model``):
    ``MODEL/config.json`` when it names a directory (a relative one from the server's working
    directory, ``/proc/PID/cwd``), else — for a Hugging Face id ``ORG/NAME`` — the cache's
    ``models--ORG--NAME/snapshots/<refs/main or newest>/config.json`` under the server's
    ``HF_HUB_CACHE`` / ``HF_HOME`` (from ``/proc/PID/environ``), the login's, then
    ``~/.cache/huggingface/hub``. At most ``max_bytes`` + 1 bytes come back (``parse_model_config``
    says a larger file is too large). Every value is a positional argument of ``sh -c``: data,
    never code."""
    model = model.strip()
    repo = "models--" + model.replace("/", "--") if _HF_REPO_RE.match(model) else ""
    args = [MODEL_CONFIG_TAG, model, model.rstrip("/") or "/", repo, str(int(pid)) if pid else "", str(max_bytes + 1)]
    return "sh -c " + q(_MODEL_CONFIG_SCRIPT) + " " + " ".join(q(a) for a in args)


def model_config_request(command: str) -> str | None:
    """The model a ``model_config`` command asks about (a simulated host answers it without a
    shell); None for any other command."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    for i, word in enumerate(argv[:-1]):
        if word == MODEL_CONFIG_TAG and i >= 2 and argv[i - 2] == "-c":
            return argv[i + 1]
    return None


class ModelConfigError(ValueError):
    """The model's config.json could not be read; ``str()`` is one line: the paths tried, why."""


def parse_model_config(exit_status: int, stdout: str, stderr: str, *,
                       max_bytes: int = MODEL_CONFIG_MAX_BYTES) -> tuple[str, str]:
    """(path, text) from ``model_config``'s output; ``ModelConfigError`` says why not."""
    head, _, text = stdout.partition("\n")
    if exit_status == 0 and head.startswith(MODEL_CONFIG_FOUND):
        path = head[len(MODEL_CONFIG_FOUND):]
        if len(text.encode("utf-8", "surrogateescape")) > max_bytes:
            raise ModelConfigError(f"{path}: larger than {max_bytes // 1024} KiB, not a model's config.json")
        return path, text
    tried = [ln[len(MODEL_CONFIG_TRIED):] for ln in stdout.splitlines() if ln.startswith(MODEL_CONFIG_TRIED)]
    if exit_status == 3 and tried:
        shown = ", ".join(tried[:4]) + (f" (+{len(tried) - 4} more)" if len(tried) > 4 else "")
        raise ModelConfigError("no config.json at " + shown)
    why = (stderr.strip().splitlines() or [f"exit status {exit_status}"])[-1]
    raise ModelConfigError(f"cannot read the model's config.json ({why})")
