"""hosts.toml: the inventory (``[hosts.NAME]``) plus ``[ui]``, ``[keymap]`` and ``[calc]``.

Pure core: pydantic + tomllib, no asyncssh/textual. ``load_config`` reads one file (the only I/O
here, on the path it is given or finds) and reports *every* problem of that file at once in one
``ConfigError`` whose lines name the file, the table, the key, the value and what was expected.

Lookup order (``find_hosts_file``): ``--hosts PATH``, ``$KVTUI_HOSTS``, ``./hosts.toml``,
``$XDG_CONFIG_HOME/kvtui/hosts.toml`` (default ``~/.config``). The host name ``demo`` always
exists (a default simulated host) unless the file defines it.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self, TextIO, TypeAlias

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from kvtui.config_checks import MAX_GPUS as MAX_GPUS
from kvtui.config_checks import demo_gpu_problems, demo_preset_problems, kube_target, kube_target_problems
from kvtui.config_checks import parse_gpus as parse_gpus
from kvtui.config_paths import find_hosts_file as find_hosts_file
from kvtui.config_paths import search_locations as search_locations
from kvtui.config_paths import state_dir as state_dir
from kvtui.sim.presets import PRESET_NODES, PresetError, resolve_preset_name

HOST_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
UNIT_RE = re.compile(r"^[A-Za-z0-9:_.\\@-]+$")
CONTAINER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

DEFAULT_THEME = "kvtui-dark"
DEFAULT_STALL_SECONDS = 120.0
DEFAULT_LOG_LINES = 5000

# A demo host's simulation runs this many times faster than real time unless ``demo_speed`` says
# otherwise: the default preset's first boot is ready in ~35 s instead of ~4.7 minutes (every
# phase keeps its share; the console's header says "demo ×8"; demo_speed = 1 is real time).
DEMO_DEFAULT_SPEED = 8.0

_REMOTE_PATH_EXPECTED = "expected an absolute path on the host (or one starting with ~/)"


class ConfigError(Exception):
    """A hosts file (or a host name) is wrong. ``str()`` is the user-facing message: one line per
    problem; ``problems`` holds them for a UI."""

    def __init__(self, message: str, problems: list[ConfigProblem] | None = None) -> None:
        super().__init__(message)
        self.problems: list[ConfigProblem] = problems or []


_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem: where (file, ``[table]``, key), the offending value, and what was expected."""

    file: str
    table: str  # "hosts.NAME", "ui", "keymap", "calc", or "" for the top level
    key: str | None
    expected: str
    value: Any = _MISSING

    def __str__(self) -> str:
        where = f"[{self.table}] " if self.table else ""
        if self.key is None:
            return f"{self.file}: {where}{self.expected}"
        if self.value is _MISSING:
            return f"{self.file}: {where}{self.key}: {self.expected}"
        return f"{self.file}: {where}{self.key} = {format_value(self.value)}: {self.expected}"


def format_value(value: object, limit: int = 80) -> str:
    """A value as TOML would spell it (strings double-quoted with escapes), cut to ``limit``."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, int | float):
        text = repr(value)
    elif isinstance(value, dict):
        text = "a table {" + ", ".join(str(k) for k in list(value)[:6]) + ("…}" if len(value) > 6 else "}")
    elif isinstance(value, list):
        text = "[" + ", ".join(format_value(v, limit) for v in value) + "]"
    else:
        text = str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


# ---------------------------------------------------------------------------------------------
# Value parsers (also used by the models' validators)
# ---------------------------------------------------------------------------------------------


def _check_text(value: str, what: str) -> str:
    if not value.strip():
        raise ValueError(f"expected {what}, got an empty string")
    if "\x00" in value:
        raise ValueError(f"expected {what} without NUL bytes")
    return value


def _check_remote_path(value: str) -> str:
    _check_text(value, "a path")
    if "\n" in value or "\r" in value:
        raise ValueError(_REMOTE_PATH_EXPECTED + ", without line breaks")
    if not (value.startswith("/") or value.startswith("~/")):
        raise ValueError(_REMOTE_PATH_EXPECTED)
    return value


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, validate_default=False)


# -- the keys' types (each check written once, shared by every kind of host that has the key) --


def _ssh_target(v: str) -> str:
    expected = 'expected "user@host", "host" or an ~/.ssh/config alias'
    if not v or any(c.isspace() or ord(c) < 32 for c in v) or v.startswith("-"):
        raise ValueError(expected + " (no spaces, not starting with '-')")
    user, at, host = v.rpartition("@")
    if at and (not user or not host):
        raise ValueError(expected)
    return v


def _unit_name(v: str) -> str:
    if not UNIT_RE.match(v) or len(v) > 256:
        raise ValueError(
            "expected a systemd unit name like \"sglang.service\" (letters, digits, ':', '_', '.', '@', '-')"
        )
    return v


def _container_name(v: str) -> str:
    if not CONTAINER_RE.match(v) or len(v) > 256:
        raise ValueError("expected a Docker container name or id (letters, digits, '_', '.', '-')")
    return v


SshTarget = Annotated[str, AfterValidator(_ssh_target)]
UnitName = Annotated[str, AfterValidator(_unit_name)]
ContainerName = Annotated[str, AfterValidator(_container_name)]
RemotePath = Annotated[str, AfterValidator(_check_remote_path)]
LocalPath = Annotated[str, AfterValidator(lambda v: _check_text(v, "a path on this machine"))]
NonEmpty = Annotated[str, AfterValidator(lambda v: _check_text(v, "a non-empty string"))]
GpuList = Annotated[list[int] | None, BeforeValidator(parse_gpus)]


def _prom_instance(v: str) -> str:
    v = _check_text(v, "a non-empty string")
    if not re.fullmatch(r"[^\s/\"'{}=,]+", v):
        raise ValueError('expected the "instance" label Prometheus gives this server\'s /metrics target, like '
                         '"10.0.0.5:8000" (kvtui fleet --json shows each row\'s instance)')
    return v


PromInstance = Annotated[str, AfterValidator(_prom_instance)]
EngineName = Literal["sglang", "vllm", "auto"]


class _HostBase(_Strict):
    """What every ``[hosts.NAME]`` table may say, whatever its kind. ``HostConfig(**keys)`` at run
    time builds the kind the keys name (``SshHost``, ``LocalHost`` or ``DemoHost``), checking the
    same rules as ``parse_config``; for type checkers ``HostConfig`` is their union."""

    gpus: GpuList = None
    readonly: bool = False
    probe: bool = True  # after the ready line, ask the server for one token (issue 14)
    probe_model: NonEmpty | None = None  # the model name the probe asks for (else /v1/models' first)
    # the fleet screen's drill-in (issue 26): the ``instance`` label Prometheus gives this server
    prometheus_instance: PromInstance | None = None

    def __new__(cls, *args: Any, **keys: Any) -> Any:
        if cls is _HostBase:
            return host_config(keys)
        return super().__new__(cls)

    @classmethod
    def model_construct(cls, _fields_set: set[str] | None = None, **values: Any) -> Any:  # type: ignore[override]
        """Without validation (tests); on ``HostConfig`` itself, the kind the values name."""
        if cls is _HostBase:
            variant = _VARIANTS.get(_kind_of(values) or "", LocalHost)
            return variant.model_construct(_fields_set, **{k: v for k, v in values.items()
                                                           if k in variant.model_fields})
        return super().model_construct(_fields_set, **values)

    kind: ClassVar[str] = ""  # the key that names a kind of host: ssh, local, demo or kube

    @model_validator(mode="after")
    def _rules(self) -> Self:
        """The cross-key rules on the keys given (the kind's own key always counts as given)."""
        if self.kind:
            kind = {self.kind: getattr(self, self.kind)}
            _raise_rules({k: getattr(self, k) for k in self.model_fields_set} | kind)
        return self


class _RealServer:
    """What a server host and a pod say the same way: a real server (not the demo's), of the engine
    their ``engine`` key declares."""

    if TYPE_CHECKING:
        engine: str

    @property
    def demo(self) -> Literal[False]:
        return False

    @property
    def server_engine(self) -> str:
        """The engine the host declares (``auto``: detect it from the log)."""
        return self.engine


class ServerHost(_RealServer, _HostBase):
    """A host that runs a real server (over SSH or on this machine): what kvtui follows (``unit``,
    ``log_file``, ``container``: at least one), where the flags live, how it restarts."""

    # (in this order: the order "not for demo hosts" problems are listed in)
    unit: UnitName | None = None
    log_file: RemotePath | None = None
    container: ContainerName | None = None
    launch_script: RemotePath | None = None
    start_command: NonEmpty | None = None
    stop_command: NonEmpty | None = None
    sudo: bool = False
    engine: EngineName = "auto"
    pid_file: RemotePath | None = None  # the server's pid file (liveness); else the one start_command writes

    @property
    def log_source(self) -> Literal["file", "docker", "journal"]:
        """What ``follow_log`` follows: a log file wins over a container, which wins over the
        unit's journal (a unit may still own restarts)."""
        if self.log_file:
            return "file"
        if self.container:
            return "docker"
        return "journal"

    @property
    def source_label(self) -> str:
        """``unit X`` / ``file Y`` / ``container Z`` (joined with ``, `` when several)."""
        parts = []
        if self.unit:
            parts.append(f"unit {self.unit}")
        if self.log_file:
            parts.append(f"file {self.log_file}")
        if self.container:
            parts.append(f"container {self.container}")
        return ", ".join(parts)


class SshHost(ServerHost):
    """``ssh = "user@host"``: a remote host over SSH."""

    kind: ClassVar[Literal["ssh"]] = "ssh"  # (the key that names it)

    ssh: SshTarget
    port: int | None = Field(default=None, ge=1, le=65535)
    identity_file: LocalPath | None = None
    known_hosts: LocalPath | None = None
    strict_host_key: bool = True

    @property
    def target(self) -> str:
        """Where it runs, for listings: the ssh target (with a non-default port)."""
        return f"{self.ssh}:{self.port}" if self.port else self.ssh

    @property
    def ssh_user(self) -> str | None:
        return self.ssh.rpartition("@")[0] if "@" in self.ssh else None

    @property
    def ssh_host(self) -> str:
        host = self.ssh.rpartition("@")[2]
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        return host

    @property
    def identity_path(self) -> Path | None:
        return Path(self.identity_file).expanduser() if self.identity_file else None

    @property
    def known_hosts_path(self) -> Path | None:
        return Path(self.known_hosts).expanduser() if self.known_hosts else None


class LocalHost(ServerHost):
    """``local = true``: the machine kvtui runs on."""

    kind: ClassVar[Literal["local"]] = "local"  # (the key that names it)

    local: Literal[True]

    @property
    def target(self) -> str:
        return "localhost"


class DemoHost(_HostBase):
    """``demo = true``: the built-in simulated 8-GPU host (``kvtui.sim``)."""

    kind: ClassVar[Literal["demo"]] = "demo"  # (the key that names it)

    demo: Literal[True] = True
    demo_speed: float = Field(default=DEMO_DEFAULT_SPEED, gt=0, le=100000)
    demo_seed: int = 0
    demo_engine: Literal["sglang", "vllm"] = "sglang"
    demo_model: NonEmpty | None = None
    demo_node: int | None = Field(default=None, ge=0, le=63)  # a multi-node preset: this host's node
    demo_stall_node: int | None = Field(default=None, ge=0, le=63)  # ... and the node that never arrives
    # a server up for days: the simulated server started this many hours before the demo's state
    # was created (its follower reads the start, a gap record, the newest serving lines; the
    # gap is searched on the simulated host) ...
    demo_uptime_h: float | None = Field(default=None, gt=0, le=24 * 366)
    # ... and its start is gone from the log (rotated away): the follower says so and gives the
    # running process's command line instead (kvtui.engines.source_records)
    demo_start_missing: bool = False
    # a fixed offered load (0..2; above 1 more than the pool holds: a full pool with a queue, the
    # engine retracting or preempting) instead of the simulation's slow waves (issue 24's incident)
    demo_load: float | None = Field(default=None, ge=0, le=2)

    @property
    def target(self) -> str:
        return "simulated"

    @property
    def server_engine(self) -> str:
        return self.demo_engine

    @property
    def log_source(self) -> Literal["demo"]:
        return "demo"

    @property
    def source_label(self) -> str:
        return "simulated unit"

    # a simulated server has no unit file, log file or container of its own to name (class
    # constants, not keys)
    unit: ClassVar[None] = None
    log_file: ClassVar[None] = None
    container: ClassVar[None] = None


KubeTarget = Annotated[str, AfterValidator(kube_target)]


class KubeHost(_RealServer, _HostBase):
    """``kube = "CONTEXT/NAMESPACE/POD"`` (or ``"CONTEXT/NAMESPACE"`` + ``selector``): a server in a
    Kubernetes pod, followed with the operator's own ``kubectl`` (``kvtui.hosts.kube``)."""

    kind: ClassVar[Literal["kube"]] = "kube"  # (the key that names it)

    kube: KubeTarget
    selector: NonEmpty | None = None
    container: ContainerName | None = None
    engine: EngineName = "auto"
    gpu_metrics_url: NonEmpty | None = None  # a DCGM exporter's in-cluster URL (read through the API server)

    @property
    def target(self) -> str:
        return self.kube + (f" ({self.selector})" if self.selector else "")

    @property
    def log_source(self) -> Literal["kube"]:
        return "kube"

    @property
    def source_label(self) -> str:
        what = f"pods {self.selector}" if self.selector else f"pod {self.kube.rpartition('/')[2]}"
        return what + (f", container {self.container}" if self.container else "")

    # what a server host has and a pod does not: kvtui neither edits nor restarts a pod itself yet
    # (class constants, not keys: a kube table that sets one is refused as any unknown key)
    unit: ClassVar[None] = None
    log_file: ClassVar[None] = None
    launch_script: ClassVar[None] = None
    start_command: ClassVar[None] = None
    stop_command: ClassVar[None] = None
    pid_file: ClassVar[None] = None
    sudo: ClassVar[bool] = False


if TYPE_CHECKING:
    HostConfig: TypeAlias = SshHost | LocalHost | DemoHost | KubeHost
else:
    HostConfig = _HostBase

_VARIANTS: dict[str, type[SshHost] | type[LocalHost] | type[DemoHost] | type[KubeHost]] = {
    "ssh": SshHost,
    "local": LocalHost,
    "demo": DemoHost,
    "kube": KubeHost,
}
# Every key a host table may have, in the order messages list them; each belongs to the kinds
# whose model has it (the rules below are derived from that).
HOST_KEYS = ("ssh", "local", "demo", "kube", "selector", "port", "identity_file", "known_hosts", "strict_host_key",
             "engine", "unit", "log_file", "container", "launch_script", "start_command", "stop_command", "pid_file",
             "gpus", "sudo", "readonly", "probe", "probe_model", "prometheus_instance",
             "gpu_metrics_url", "demo_speed", "demo_seed",
             "demo_engine", "demo_model", "demo_node", "demo_stall_node", "demo_uptime_h", "demo_start_missing",
             "demo_load")
_KEYS_OF = {kind: tuple(model.model_fields) for kind, model in _VARIANTS.items()}
assert set(HOST_KEYS) == {k for keys in _KEYS_OF.values() for k in keys}, "HOST_KEYS lists every host key once"


def _only(kind: str) -> tuple[str, ...]:
    """The keys only ``kind`` hosts have (besides the one that names the kind), in its model's order."""
    return tuple(k for k in _KEYS_OF[kind] if k != kind and all(k not in _KEYS_OF[o] for o in _VARIANTS if o != kind))


KIND_KEYS = tuple(_VARIANTS)
_TEXT_KINDS = ("ssh", "kube")  # kinds named by a string value (the others by = true)
SSH_ONLY_KEYS = _only("ssh")
DEMO_ONLY_KEYS = _only("demo")
KUBE_ONLY_KEYS = _only("kube")
# a pod is neither edited nor restarted by kvtui (yet): the keys describing that are refused there
NOT_ON_KUBE_KEYS = tuple(k for k in ServerHost.model_fields if k not in KubeHost.model_fields)
# A demo host simulates its own unit and GPUs: the keys describing a real server are refused there.
NOT_ON_DEMO_KEYS = tuple(k for k in ServerHost.model_fields if k not in DemoHost.model_fields)
SOURCE_KEYS = ("unit", "log_file", "container")

# The keys' checks in one model, in HOST_KEYS order: parse_config reports every wrong value and
# unknown key of a table at once (before the kind is known), then the rules.
def _key_field(key: str) -> tuple[Any, Any]:
    if key == "ssh":
        return SshTarget | None, None
    if key == "kube":
        return KubeTarget | None, None
    if key in KIND_KEYS:
        return bool, False  # local = false is a value, not a kind: the rules say what is missing
    fi = next(m.model_fields[key] for m in _VARIANTS.values() if key in m.model_fields)
    return fi.annotation, fi


_KEY_FIELDS: dict[str, Any] = {k: _key_field(k) for k in HOST_KEYS}
_HostKeys: type[_Strict] = create_model("_HostKeys", __base__=_Strict, **_KEY_FIELDS)


def _kind_of(keys: Mapping[str, object]) -> str | None:
    """The kind a table's keys name (exactly one of ``ssh`` / ``local = true`` / ``demo = true`` /
    ``kube``)."""
    kinds = [k for k in KIND_KEYS if (keys.get(k) is not None if k in _TEXT_KINDS else keys.get(k) is True)]
    return kinds[0] if len(kinds) == 1 else None


def _raise_rules(keys: Mapping[str, object]) -> None:
    problems = host_rule_problems(keys)
    if problems:
        raise ValueError("; ".join(f"{k}: {m}" if k else m for k, m, _ in problems))


def host_config(keys: Mapping[str, object]) -> HostConfig:
    """A host from a table's keys, checked as ``parse_config`` checks it: wrong values and unknown
    keys, then the rules; raises ``ValueError`` (``pydantic.ValidationError`` for values)."""
    _HostKeys.model_validate(dict(keys))
    _raise_rules(keys)
    kind = _kind_of(keys)
    assert kind is not None  # a table without exactly one kind breaks a rule
    return _VARIANTS[kind].model_validate(dict(keys))


def host_rule_problems(given: Mapping[str, object]) -> list[tuple[str | None, str, object]]:
    """Cross-key rules of one host table, on the keys *given* (raw TOML values or a model's
    set fields): ``(key or None, expected, value or _MISSING)`` per broken rule."""
    out: list[tuple[str | None, str, object]] = []
    kinds = [k for k in KIND_KEYS if (given.get(k) is not None if k in _TEXT_KINDS else given.get(k) is True)]
    if not kinds:
        out.append((None, 'needs exactly one of ssh = "user@host", local = true, demo = true or '
                    'kube = "CONTEXT/NAMESPACE/POD": none is set', _MISSING))
    elif len(kinds) > 1:
        out.append((None, f"needs exactly one of ssh, local = true, demo = true or kube: {' and '.join(kinds)} "
                    "are set", _MISSING))
    kind = kinds[0] if len(kinds) == 1 else None
    if kind in ("ssh", "local") and not any(given.get(k) is not None for k in SOURCE_KEYS):
        out.append((None, "needs at least one of unit, log_file or container (what to follow): none is set",
                    _MISSING))
    has_start = given.get("start_command") is not None
    has_stop = given.get("stop_command") is not None
    if has_start != has_stop:
        key, other = ("start_command", "stop_command") if has_start else ("stop_command", "start_command")
        out.append((key, f"{other} is missing: restarting without a unit needs both (or neither)", given[key]))
    if kind is not None and kind != "demo":
        for key in DEMO_ONLY_KEYS:
            if key in given:
                out.append((key, "only for demo hosts (demo = true)", given[key]))
    if kind is not None and kind != "ssh":
        for key in SSH_ONLY_KEYS:
            if key in given:
                out.append((key, "only for ssh hosts", given[key]))
    if kind is not None and kind != "kube":
        for key in KUBE_ONLY_KEYS:
            if key in given:
                out.append((key, "only for kube hosts", given[key]))
    if kind == "kube":
        for key in NOT_ON_KUBE_KEYS:
            if key in given:
                out.append((key, "not for kube hosts (kvtui follows the pod through kubectl and edits the "
                            "container args of its controller)", given[key]))
        out.extend(kube_target_problems(given))
    if kind == "demo":
        for key in NOT_ON_DEMO_KEYS:
            if key in given:
                hint = "use demo_engine" if key == "engine" else "a demo host simulates its own server"
                out.append((key, f"not for demo hosts ({hint})", given[key]))
        out.extend(demo_preset_problems(given))
        out.extend(demo_gpu_problems(given))
    return out


class UiConfig(_Strict):
    theme: str = DEFAULT_THEME
    stall_seconds: float = Field(default=DEFAULT_STALL_SECONDS, gt=0, le=86400)
    log_lines: int = Field(default=DEFAULT_LOG_LINES, ge=100, le=10_000_000)

    @field_validator("theme")
    @classmethod
    def _theme(cls, v: str) -> str:
        return _check_text(v, "a theme name")


class CalcConfig(_Strict):
    graph_margin_gib: float | None = Field(default=None, ge=0, le=1024)


class PrometheusConfig(_Strict):
    """``[prometheus]``: the Prometheus that already scrapes the fleet (``kvtui fleet``, issue 26).
    ``url`` is its base (``http://prom:9090``, or a path prefix behind a proxy); auth is a bearer
    token read from a file, or basic auth whose password is read from an environment variable
    (never written in hosts.toml); ``ca_file`` checks an https server against that CA bundle."""

    url: str
    bearer_token_file: str | None = None
    basic_auth_user: str | None = None
    basic_auth_password_env: str | None = None
    ca_file: str | None = None
    timeout: float = Field(default=10.0, gt=0, le=600)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        v = _check_text(v, "a URL").strip()
        if not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("expected an http:// or https:// URL like \"http://prometheus:9090\"")
        return v.rstrip("/")

    @field_validator("bearer_token_file", "ca_file", "basic_auth_user")
    @classmethod
    def _paths(cls, v: str | None) -> str | None:
        return None if v is None else _check_text(v, "a non-empty string")

    @field_validator("basic_auth_password_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", v):
            raise ValueError("expected the NAME of an environment variable holding the password, like "
                             "\"PROM_PASSWORD\" (not the password itself)")
        return v

    @model_validator(mode="after")
    def _auth(self) -> Self:
        if (self.basic_auth_user is None) != (self.basic_auth_password_env is None):
            raise ValueError("expected both basic_auth_user and basic_auth_password_env (basic auth needs the two)")
        if self.basic_auth_user is not None and self.bearer_token_file is not None:
            raise ValueError("expected one of bearer_token_file or basic auth, not both")
        return self


class HistoryConfig(_Strict):
    """``[history]``: how much of the boot history (``kvtui.history``) is kept per host."""

    record: bool = True
    max_age_days: float = Field(default=365.0, ge=0, le=36500)  # 0: no age limit
    max_boots_per_host: int = Field(default=1000, ge=1, le=1_000_000)


def _demo_default() -> HostConfig:
    return DemoHost()


DEFAULT_HANG_SECONDS = 180.0


class DeploymentConfig(_Strict):
    """``[deployments.NAME]``: one server spread over one or more hosts (``nodes``, each a
    ``[hosts.NAME]``; of one node, the deployment acts as its host: issue 23). A node's rank is its
    position in ``nodes`` unless its own arguments say ``--node-rank``. ``hang_seconds``: how long a
    node may trail the phase the others reached before the deployment is called hung
    (``kvtui.boot.deployment.diagnose_hang``)."""

    nodes: list[str] = Field(min_length=1, max_length=64)
    hang_seconds: float = Field(default=DEFAULT_HANG_SECONDS, gt=0, le=86400)

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, v: list[str]) -> list[str]:
        for n in v:
            if not HOST_NAME_RE.match(n):
                raise ValueError(f"expected host names (letters, digits, '-' and '_'), got {json.dumps(n)}")
        dup = sorted({n for n in v if v.count(n) > 1})
        if dup:
            raise ValueError(f"expected each host once, {', '.join(dup)} is listed twice")
        return v


def deployment_problems(deployments: Mapping[str, DeploymentConfig], hosts: Mapping[str, HostConfig],
                        defined: set[str]) -> list[tuple[str, str | None, str, object]]:
    """Cross-table rules of ``[deployments.*]`` against the hosts: ``(table, key, expected, value)``.
    ``defined``: every ``[hosts.NAME]`` in the file, valid or not (a node that names a host with
    problems of its own is not called unknown: the host's problems are listed already)."""
    out: list[tuple[str, str | None, str, object]] = []
    roles: dict[str, tuple[str, int]] = {}  # host -> (first deployment, its position there)
    known = sorted(defined | {"demo"})
    for dname, dep in deployments.items():
        table = f"deployments.{dname}"
        if dname in defined or dname == "demo":
            out.append((table, None, f"the name '{dname}' is also a host: a deployment needs a name of its own "
                        "(commands accept either)", _MISSING))
        for pos, node in enumerate(dep.nodes):
            if node not in defined and node != "demo":
                close = difflib.get_close_matches(node, known, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                out.append((table, "nodes", f"'{node}' is not a [hosts.NAME] of this file: expected one of "
                            f"{', '.join(known)}{hint}", dep.nodes))
                continue
            first = roles.get(node)
            if first is None:
                roles[node] = (dname, pos)
            elif first[1] != pos:
                out.append((table, "nodes", f"'{node}' is node {pos} here but node {first[1]} in "
                            f"[deployments.{first[0]}]: a host has one role (its unit runs one --node-rank)",
                            dep.nodes))
        nodes = [hosts.get(n) if n != "demo" or "demo" in hosts else DemoHost() for n in dep.nodes]
        present = [(n, h) for n, h in zip(dep.nodes, nodes, strict=True) if h is not None]
        demo = [n for n, h in present if h.demo]
        if demo and len(demo) != len(present):
            real = [n for n, h in present if not h.demo]
            out.append((table, "nodes", f"mixes simulated ({', '.join(demo)}) and real ({', '.join(real)}) hosts: "
                        "expected all demo hosts or none", dep.nodes))
        out.extend((table, "nodes", why, dep.nodes) for why in _demo_deployment_problems(present))
        engines: dict[str, list[str]] = {}
        for n, h in present:
            if h.server_engine != "auto":
                engines.setdefault(h.server_engine, []).append(n)
        if len(engines) > 1:
            said = "; ".join(f"{e} on {', '.join(ns)}" for e, ns in engines.items())
            out.append((table, "nodes", f"mixes engines ({said}): expected one engine on every node", dep.nodes))
    return out


def _demo_deployment_problems(present: list[tuple[str, HostConfig]]) -> list[str]:
    """A deployment of demo hosts running a multi-node preset: one preset, one stalled node, and
    each host's ``demo_node`` its position (the node rank its unit will say)."""
    demo = [(n, h) for n, h in present if isinstance(h, DemoHost)]
    if len(demo) != len(present) or not demo:
        return []
    out: list[str] = []
    try:
        models = {n: resolve_preset_name(h.demo_model, h.demo_engine) for n, h in demo}
    except PresetError:
        return []  # the host's own error
    if len(set(models.values())) > 1:
        said = ", ".join(f"{n} {m}" for n, m in models.items())
        out.append(f"its demo hosts simulate different demo_model presets ({said}): expected one")
        return out
    preset = next(iter(models.values()))
    nnodes = PRESET_NODES.get(preset, 1)
    if nnodes == 1:
        return out
    if len(demo) != nnodes:
        out.append(f"{preset} spans {nnodes} hosts, the deployment lists {len(demo)}")
    for pos, (n, h) in enumerate(demo):
        if (h.demo_node or 0) != pos:
            out.append(f"'{n}' is node {pos} here but its demo_node is {h.demo_node or 0}: "
                       f"expected demo_node = {pos} on [hosts.{n}]")
    stalls = {h.demo_stall_node for _, h in demo}
    if len(stalls) > 1:
        said = ", ".join(f"{n} {h.demo_stall_node}" for n, h in demo)
        out.append(f"its demo hosts disagree on demo_stall_node ({said}): expected the same value on every node "
                   "(the stalled node never arrives; the others wait for it)")
    return out


@dataclass(frozen=True)
class Config:
    """The loaded inventory. ``path`` is None when no hosts file was found."""

    hosts: dict[str, HostConfig] = field(default_factory=dict)
    deployments: dict[str, DeploymentConfig] = field(default_factory=dict)
    ui: UiConfig = field(default_factory=UiConfig)
    keymap: dict[str, str] = field(default_factory=dict)
    calc: CalcConfig = field(default_factory=CalcConfig)
    path: Path | None = None
    history: HistoryConfig = field(default_factory=HistoryConfig)
    prometheus: PrometheusConfig | None = None

    def names(self) -> list[str]:
        """Host names in file order; the default ``demo`` last when the file does not define it."""
        names = list(self.hosts)
        if "demo" not in self.hosts:
            names.append("demo")
        return names

    def deployment(self, name: str) -> DeploymentConfig | None:
        """The ``[deployments.NAME]`` of that name, or None (then ``name`` is a host's)."""
        return self.deployments.get(name)

    def node_hosts(self, name: str) -> list[tuple[str, HostConfig]]:
        """A deployment's nodes in rank order, or ``[(name, host)]`` for a host: what commands that
        accept either iterate over. Raises ``ConfigError`` for an unknown name."""
        dep = self.deployments.get(name)
        if dep is None:
            return [(name, self.host(name))]
        return [(n, self.host(n)) for n in dep.nodes]

    def host(self, name: str) -> HostConfig:
        if name in self.hosts:
            return self.hosts[name]
        if name == "demo":
            return _demo_default()
        where = str(self.path) if self.path else "no hosts file found (" + ", ".join(search_locations()) + ")"
        close = difflib.get_close_matches(name, self.names() + list(self.deployments), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        deps = f"; deployments are {', '.join(self.deployments)}" if self.deployments else ""
        raise ConfigError(f"unknown host '{name}' ({where}): known hosts are {', '.join(self.names())}{deps}{hint}")


# ---------------------------------------------------------------------------------------------
# Loading (where the hosts file and the state live: kvtui.config_paths)
# ---------------------------------------------------------------------------------------------


def load_config(explicit: str | None = None) -> Config:
    """Find and load the hosts file; no file -> defaults (only the ``demo`` host)."""
    path = find_hosts_file(explicit)
    if path is None:
        return Config()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: hosts file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, expected a hosts.toml file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the hosts file: {exc.strerror or exc}") from None
    return parse_config(data, path)


def load_config_or_say(explicit: str | None, err: TextIO, *, who: str) -> Config | None:
    """``load_config`` for a command: None once it printed why the hosts file cannot be used
    (``WHO: …``); the command then exits ``EXIT_INPUT``."""
    try:
        return load_config(explicit)
    except ConfigError as exc:
        print(f"{who}: {exc}", file=err)
        return None


_TOP_KEYS = ("hosts", "deployments", "ui", "keymap", "calc", "history", "prometheus")


def parse_config(data: bytes | str, path: Path | str = "hosts.toml") -> Config:
    """Validate TOML text. Raises one ``ConfigError`` listing every problem found."""
    fname = str(path)
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{fname}: not UTF-8 text (byte {exc.start}): expected a TOML file") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{fname}: not valid TOML: {exc}") from None

    problems: list[ConfigProblem] = []

    def add(table: str, key: str | None, expected: str, value: Any = _MISSING) -> None:
        problems.append(ConfigProblem(fname, table, key, expected, value))

    for key, value in raw.items():
        if key not in _TOP_KEYS:
            add("", f"unknown section '{key}'", _expected_one_of(key, _TOP_KEYS, "sections"), value)

    hosts: dict[str, HostConfig] = {}
    defined: set[str] = set()  # the names given a table, valid or not (a deployment's nodes name them)
    for name, tname, valid, table in _named_tables(raw, "hosts", "expected tables [hosts.NAME]", add):
        if not valid:
            add(tname, None, f"host name {json.dumps(name)}: expected letters, digits, '-' and '_' only")
        if not isinstance(table, dict):
            add("hosts", name, "expected a table [hosts." + name + "] of host settings", table)
            continue
        defined.add(name)
        keys_ok = _validate(_HostKeys, table, tname, add) is not None
        rules = host_rule_problems(table)
        for rkey, expected, value in rules:
            add(tname, rkey, expected, value)
        kind = _kind_of(table)
        if keys_ok and not rules and kind is not None and valid:
            hosts[name] = _VARIANTS[kind].model_validate(table)

    deployments: dict[str, DeploymentConfig] = {}
    expected = "expected tables [deployments.NAME] with nodes = [\"host-a\", \"host-b\"]"
    for name, tname, valid, table in _named_tables(raw, "deployments", expected, add):
        if not valid:
            add(tname, None, f"deployment name {json.dumps(name)}: expected letters, digits, '-' and '_' only")
            continue
        if not isinstance(table, dict):
            add("deployments", name, f"expected a table [deployments.{name}] with nodes = [...]", table)
            continue
        if "nodes" not in table:
            add(tname, "nodes", 'is missing: expected the hosts the server spans, in node-rank order, '
                'like nodes = ["h20-a", "h20-b"]')
            continue
        dep = _validate(DeploymentConfig, table, tname, add)
        if dep is not None:
            deployments[name] = dep
    for tname, dkey, expected, value in deployment_problems(deployments, hosts, defined):
        add(tname, dkey, expected, value)

    ui = _section(raw, "ui", UiConfig, add) or UiConfig()
    calc = _section(raw, "calc", CalcConfig, add) or CalcConfig()
    history = _section(raw, "history", HistoryConfig, add) or HistoryConfig()
    prometheus = _prometheus_section(raw, add)

    keymap: dict[str, str] = {}
    raw_keymap = raw.get("keymap", {})
    if not isinstance(raw_keymap, dict):
        add("", "keymap", "expected a table [keymap] of binding id = \"key\"", raw_keymap)
    else:
        for bid, keys in raw_keymap.items():
            if not isinstance(keys, str) or not keys.strip() or any(c.isspace() for c in keys.strip()):
                add("keymap", bid, 'expected a key string like "ctrl+r" or "f5,ctrl+r" (no spaces)', keys)
            else:
                keymap[bid] = keys.strip()

    if problems:
        n = len(problems)
        lines = [str(p) for p in problems]
        header = f"{fname}: {n} problem{'s' if n > 1 else ''} in the hosts file:"
        raise ConfigError(header + "\n  " + "\n  ".join(lines), problems)
    return Config(hosts=hosts, deployments=deployments, ui=ui, keymap=keymap, calc=calc, path=Path(path),
                  history=history, prometheus=prometheus)


def _named_tables(raw: dict[str, Any], section: str, expected: str,
                  add: Any) -> Iterator[tuple[str, str, bool, object]]:
    """Each ``[SECTION.NAME]`` table: its name, the table's name as a problem names it, whether the
    name is a valid one, and the table; a section that is not tables is a problem (``expected``)."""
    tables = raw.get(section, {})
    if not isinstance(tables, dict):
        add("", section, expected, tables)
        return
    for name, table in tables.items():
        valid = HOST_NAME_RE.match(name) is not None
        yield name, (f"{section}.{name}" if valid else f"{section}.{json.dumps(name)}"), valid, table


def _prometheus_section(raw: dict[str, Any], add: Any) -> PrometheusConfig | None:
    """``[prometheus]``: the field errors name their keys; the cross-key rules (basic auth's two
    keys, one kind of auth) are reported on the table."""
    table = raw.get("prometheus")
    if isinstance(table, dict) and "url" not in table:
        add("prometheus", "url", 'is missing: expected the Prometheus base URL, like url = "http://prometheus:9090"')
        return None
    found: PrometheusConfig | None = _section(raw, "prometheus", PrometheusConfig, add)
    if found is None and isinstance(table, dict):
        try:
            PrometheusConfig.model_validate(table)
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                if not err["loc"]:
                    keys = [k for k in ("basic_auth_user", "basic_auth_password_env", "bearer_token_file")
                            if k in table]
                    add("prometheus", ", ".join(keys) or None, _expected(err, PrometheusConfig, ""))
    return found


def _section(raw: dict[str, Any], name: str, model: type[_Strict], add: Any) -> Any:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        add("", name, f"expected a table [{name}]", value)
        return None
    return _validate(model, value, name, add)


def _validate(model: type[_Strict], table: dict[str, Any], tname: str, add: Any) -> Any:
    """Validate one table; report field errors (cross-key rules are reported by the caller)."""
    try:
        return model.model_validate(table)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            loc = err["loc"]
            if not loc:
                continue  # the model-level rules: reported separately, with their keys
            key = str(loc[0])
            value = table.get(key, _MISSING)
            if err["type"] == "extra_forbidden":
                add(tname, f"unknown key '{key}'", _expected_one_of(key, tuple(model.model_fields), "keys"), value)
            else:
                add(tname, key, _expected(err, model, key), value)
        return None


def _expected_one_of(key: str, allowed: tuple[str, ...], what: str) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"expected one of the {what} {', '.join(allowed)}{hint}"


_TYPE_WORDS = {
    "string_type": "expected a string",
    "bool_type": "expected true or false",
    "int_type": "expected an integer",
    "float_type": "expected a number",
    "list_type": "expected a list",
}


def _expected(err: Any, model: type[_Strict], key: str) -> str:
    etype: str = err["type"]
    ctx = err.get("ctx") or {}
    if etype == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        return msg if msg.startswith("expected") else "expected " + msg
    if etype == "literal_error":
        return "expected one of " + str(ctx.get("expected", "")).replace("'", '"')
    if etype in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bounds: dict[str, object] = {}
        for m in model.model_fields[key].metadata:
            for attr in ("gt", "ge", "lt", "le"):
                if getattr(m, attr, None) is not None:
                    bounds[attr] = getattr(m, attr)
        parts = []
        if "gt" in bounds:
            parts.append(f"above {bounds['gt']}")
        if "ge" in bounds:
            parts.append(f"at least {bounds['ge']}")
        if "lt" in bounds:
            parts.append(f"below {bounds['lt']}")
        if "le" in bounds:
            parts.append(f"at most {bounds['le']}")
        return "expected a number " + " and ".join(parts)
    if etype == "too_short":
        n = ctx.get("min_length")
        if key == "nodes":
            return f"expected at least {n} host (a deployment of one node acts as its host)"
        return f"expected at least {n} items"
    if etype == "too_long":
        return f"expected at most {ctx.get('max_length')} items"
    if etype in _TYPE_WORDS:
        # the nullable fields report e.g. "string_type" for a wrong type
        return _TYPE_WORDS[etype]
    return "expected " + str(err["msg"]).lower()
