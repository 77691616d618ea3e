"""hosts.toml: schema, lookup order, and one message per malformed key and rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtui.config import (
    CalcConfig,
    Config,
    ConfigError,
    HostConfig,
    UiConfig,
    find_hosts_file,
    load_config,
    parse_gpus,
    state_dir,
)

GOOD = """
[hosts.dflash-train]
ssh = "root@gpu-a.example"
unit = "sglang-k26-ddtree"

[hosts.b6000]
ssh = "b6000"
log_file = "/root/dsv4.log"
launch_script = "/root/launch-dsv4.sh"
start_command = "setsid nohup /root/launch-dsv4.sh >> /root/dsv4.log 2>&1 < /dev/null & echo $! > /root/dsv4.pid"
stop_command = "kill $(cat /root/dsv4.pid)"
gpus = "0-3"
port = 2222
identity_file = "~/.ssh/id_gpu"
known_hosts = "~/.ssh/kvtui_known_hosts"
strict_host_key = false
engine = "sglang"
sudo = true
readonly = true

[hosts.box]
local = true
container = "vllm-8b"
gpus = [0, 2]

[hosts.demo-b]
demo = true
demo_speed = 10.0
demo_seed = 7
demo_engine = "vllm"
demo_model = "vllm-llama-70b"
gpus = "0,2,4"

[ui]
theme = "kvtui-light"
stall_seconds = 60
log_lines = 20000

[keymap]
quit = "ctrl+q"
search = "f3,slash"

[calc]
graph_margin_gib = 1.5
"""


def write(tmp_path: Path, text: str, name: str = "hosts.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_file_loads_every_key(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    cfg = load_config(str(path))
    assert cfg.path == path
    assert cfg.names() == ["dflash-train", "b6000", "box", "demo-b", "demo"]
    a = cfg.host("dflash-train")
    assert (a.kind, a.ssh_user, a.ssh_host, a.unit, a.log_source) == ("ssh", "root", "gpu-a.example",
                                                                       "sglang-k26-ddtree", "journal")
    assert a.strict_host_key is True
    assert a.engine == "auto"
    assert a.gpus is None
    assert not a.sudo
    b = cfg.host("b6000")
    assert b.gpus == [0, 1, 2, 3]
    assert b.port == 2222
    assert b.target == "b6000:2222"
    assert b.ssh_user is None
    assert b.ssh_host == "b6000"
    assert b.identity_path == Path.home() / ".ssh" / "id_gpu"
    assert b.known_hosts_path == Path.home() / ".ssh" / "kvtui_known_hosts"
    assert (b.strict_host_key, b.engine, b.sudo, b.readonly, b.log_source) == (False, "sglang", True, True, "file")
    assert b.stop_command == "kill $(cat /root/dsv4.pid)"
    box = cfg.host("box")
    assert (box.kind, box.target, box.gpus, box.log_source) == ("local", "localhost", [0, 2], "docker")
    d = cfg.host("demo-b")
    assert (d.kind, d.demo_speed, d.demo_seed, d.demo_engine, d.demo_model, d.gpus) == (
        "demo", 10.0, 7, "vllm", "vllm-llama-70b", [0, 2, 4])
    assert cfg.ui == UiConfig(theme="kvtui-light", stall_seconds=60, log_lines=20000)
    assert cfg.keymap == {"quit": "ctrl+q", "search": "f3,slash"}
    assert cfg.calc == CalcConfig(graph_margin_gib=1.5)
    # the default demo host exists although the file does not define it
    assert cfg.host("demo").kind == "demo"
    assert cfg.host("demo").demo_speed == 8.0  # ready in well under a minute (issue 10)


def test_defaults_without_any_file(tmp_path: Path) -> None:
    cfg = load_config(None)
    assert cfg.path is None
    assert cfg.hosts == {}
    assert cfg.names() == ["demo"]
    assert cfg.ui.theme == "kvtui-dark"
    assert cfg.ui.stall_seconds == 120
    assert cfg.ui.log_lines == 5000
    assert cfg.calc.graph_margin_gib is None
    assert cfg.keymap == {}
    assert cfg.host("demo").demo


def test_file_can_redefine_demo(tmp_path: Path) -> None:
    cfg = load_config(str(write(tmp_path, "[hosts.demo]\ndemo = true\ndemo_speed = 50.0\n")))
    assert cfg.host("demo").demo_speed == 50.0
    assert cfg.names() == ["demo"]


def test_unknown_host_lists_known_ones(tmp_path: Path) -> None:
    cfg = load_config(str(write(tmp_path, GOOD)))
    with pytest.raises(ConfigError) as ei:
        cfg.host("b600")
    msg = str(ei.value)
    assert "unknown host 'b600'" in msg
    assert str(tmp_path / "hosts.toml") in msg
    assert "dflash-train, b6000, box, demo-b, demo" in msg
    assert "did you mean 'b6000'" in msg
    with pytest.raises(ConfigError, match="no hosts file found"):
        Config().host("gpu-a")


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = tmp_path / "config" / "kvtui"
    xdg.mkdir(parents=True)
    (xdg / "hosts.toml").write_text("[hosts.x]\ndemo = true\n")
    assert find_hosts_file(None) == xdg / "hosts.toml"
    (tmp_path / "hosts.toml").write_text("[hosts.y]\ndemo = true\n")
    assert find_hosts_file(None) == Path("hosts.toml")
    monkeypatch.setenv("KVTUI_HOSTS", str(tmp_path / "env.toml"))
    assert find_hosts_file(None) == tmp_path / "env.toml"
    assert find_hosts_file(str(tmp_path / "cli.toml")) == tmp_path / "cli.toml"
    # an explicit file that does not exist is an error, not a silent fallback
    with pytest.raises(ConfigError, match=r"env\.toml: hosts file not found"):
        load_config(None)
    monkeypatch.delenv("KVTUI_HOSTS")
    assert load_config(None).names() == ["y", "demo"]


def test_unreadable_inputs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"not valid TOML.*line 2"):
        load_config(str(write(tmp_path, "[hosts.a]\nssh = \n")))
    (tmp_path / "bin.toml").write_bytes(b"[hosts.a]\nssh = \"\xff\"\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(str(tmp_path / "bin.toml"))
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(str(tmp_path))


def test_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert state_dir() == tmp_path / "state" / "kvtui"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert state_dir() == Path.home() / ".local" / "state" / "kvtui"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-3", [0, 1, 2, 3]),
        ("0,2,4", [0, 2, 4]),
        (" 4 , 0-1 ", [0, 1, 4]),
        ("6", [6]),
        ([3, 1], [1, 3]),
        (None, None),
    ],
)
def test_parse_gpus(text: object, expected: list[int] | None) -> None:
    assert parse_gpus(text) == expected


BASE = '[hosts.h]\nssh = "root@h"\nunit = "u.service"\n'

# (extra TOML lines for [hosts.h] appended to BASE or a whole file, the key, the value as shown,
#  and a fragment of what was expected)
BAD_KEYS = [
    ('port = "22"', "port", '"22"', "expected an integer"),
    ("port = 70000", "port", "70000", "at most 65535"),
    ("port = 0", "port", "0", "at least 1"),
    ("identity_file = 3", "identity_file", "3", "expected a string"),
    ('identity_file = ""', "identity_file", '""', "expected a path on this machine"),
    ('known_hosts = true', "known_hosts", "true", "expected a string"),
    ('known_hosts = " "', "known_hosts", '" "', "expected a path on this machine, got an empty string"),
    ('strict_host_key = "no"', "strict_host_key", '"no"', "expected true or false"),
    ('engine = "trtllm"', "engine", '"trtllm"', 'expected one of "sglang", "vllm" or "auto"'),
    ('log_file = "dsv4.log"', "log_file", '"dsv4.log"', "expected an absolute path on the host"),
    ('log_file = "/a\\nb"', "log_file", '"/a\\nb"', "without line breaks"),
    ('container = "a b"', "container", '"a b"', "expected a Docker container name"),
    ('launch_script = "run.sh"', "launch_script", '"run.sh"', "expected an absolute path"),
    ('gpus = "0-x"', "gpus", '"0-x"', 'expected GPU indices as "0-3", "0,2,4"'),
    ('gpus = "3-1"', "gpus", '"3-1"', 'expected a rising range like "0-3"'),
    ("gpus = [0, 0]", "gpus", "[0, 0]", "expected each GPU index once"),
    ("gpus = [-1]", "gpus", "[-1]", "expected GPU indices from 0"),
    ("gpus = 3", "gpus", "3", "expected GPU indices as"),
    ('gpus = ["0"]', "gpus", '["0"]', "expected GPU indices as"),
    ('sudo = "yes"', "sudo", '"yes"', "expected true or false"),
    ("readonly = 1", "readonly", "1", "expected true or false"),
    ('start_command = ""\nstop_command = "x"', "start_command", '""', "expected a non-empty string"),
    ("stop_command = 5\nstart_command = \"x\"", "stop_command", "5", "expected a string"),
]


@pytest.mark.parametrize(("extra", "key", "shown", "expected"), BAD_KEYS, ids=[b[0][:24] for b in BAD_KEYS])
def test_each_bad_key_names_file_host_key_value(tmp_path: Path, extra: str, key: str, shown: str,
                                                 expected: str) -> None:
    path = write(tmp_path, BASE + extra + "\n")
    with pytest.raises(ConfigError) as ei:
        load_config(str(path))
    msg = str(ei.value)
    assert f"{path}: [hosts.h] {key} = {shown}: " in msg, msg
    assert expected in msg, msg
    assert "Traceback" not in msg
    assert "pydantic" not in msg


BAD_TABLES = [
    # the kind rule
    ('[hosts.h]\nunit = "u"\n', "[hosts.h] needs exactly one of ssh", None),
    ('[hosts.h]\nssh = "h"\ndemo = true\n', "ssh and demo are set", None),
    ('[hosts.h]\nlocal = true\ndemo = true\nunit = "u"\n', "local and demo are set", None),
    ('[hosts.h]\nlocal = false\nunit = "u"\n', "needs exactly one of ssh", None),
    # what to follow
    ('[hosts.h]\nssh = "h"\n', "[hosts.h] needs at least one of unit, log_file or container", None),
    ('[hosts.h]\nlocal = true\ngpus = "0"\n', "needs at least one of unit, log_file or container", None),
    # start/stop both or neither
    ('[hosts.h]\nssh = "h"\nlog_file = "/l"\nstart_command = "go"\n',
     '[hosts.h] start_command = "go": stop_command is missing', None),
    ('[hosts.h]\nssh = "h"\nlog_file = "/l"\nstop_command = "kill 1"\n',
     '[hosts.h] stop_command = "kill 1": start_command is missing', None),
    # demo_* only on demo hosts
    (BASE + "demo_speed = 2.0\n", "[hosts.h] demo_speed = 2.0: only for demo hosts", None),
    (BASE + "demo_seed = 1\n", "[hosts.h] demo_seed = 1: only for demo hosts", None),
    (BASE + 'demo_engine = "vllm"\n', '[hosts.h] demo_engine = "vllm": only for demo hosts', None),
    (BASE + 'demo_model = "x"\n', '[hosts.h] demo_model = "x": only for demo hosts', None),
    # ssh-only keys
    ('[hosts.h]\nlocal = true\nunit = "u"\nport = 22\n', "[hosts.h] port = 22: only for ssh hosts", None),
    ('[hosts.h]\ndemo = true\nstrict_host_key = false\n', "strict_host_key = false: only for ssh hosts", None),
    # demo hosts simulate their own server
    ('[hosts.h]\ndemo = true\nunit = "u"\n', '[hosts.h] unit = "u": not for demo hosts', None),
    ('[hosts.h]\ndemo = true\nengine = "vllm"\n', "not for demo hosts (use demo_engine)", None),
    # demo_* values
    ("[hosts.h]\ndemo = true\ndemo_speed = 0\n", "[hosts.h] demo_speed = 0: expected a number above 0", None),
    ('[hosts.h]\ndemo = true\ndemo_speed = "fast"\n', 'demo_speed = "fast": expected a number', None),
    ("[hosts.h]\ndemo = true\ndemo_seed = 1.5\n", "demo_seed = 1.5: expected an integer", None),
    ('[hosts.h]\ndemo = true\ndemo_engine = "trt"\n', 'demo_engine = "trt": expected one of "sglang" or "vllm"',
     None),
    ('[hosts.h]\ndemo = true\ndemo_model = ""\n', 'demo_model = "": expected a non-empty string', None),
    # demo_model names a preset of demo_engine (checked here, not first when the demo host starts)
    ('[hosts.h]\ndemo = true\ndemo_model = "gpt-5"\n',
     '[hosts.h] demo_model = "gpt-5": is not a demo preset; expected one of (a name or a unique prefix): '
     "kimi-k2.6 (sglang), llama-70b (sglang), qwen3-32b-eagle3 (sglang), vllm-llama-70b (vllm)", None),
    ('[hosts.h]\ndemo = true\ndemo_engine = "vllm"\ndemo_model = "kimi"\n',
     '[hosts.h] demo_model = "kimi": is the sglang preset kimi-k2.6 but demo_engine is \'vllm\'; '
     "expected a vllm preset: vllm-llama-70b (vllm)", None),
    ('[hosts.h]\ndemo = true\ndemo_model = "vllm-llama-70b"\n',
     "but demo_engine is 'sglang' (the default); expected a sglang preset: kimi-k2.6 (sglang), llama-70b (sglang), "
     "qwen3-32b-eagle3 (sglang)", None),
    ('[hosts.h]\ndemo = true\ndemo_model = 7\n', "[hosts.h] demo_model = 7: expected a string", None),
    ("[hosts.h]\ndemo = true\ndemo_speed = 1e6\n", "[hosts.h] demo_speed = 1000000.0: expected a number above 0 "
     "and at most 100000", None),
    ('[hosts.h]\ndemo = true\ngpus = "0-15"\n',
     '[hosts.h] gpus = "0-15": expected GPU indices 0-7 (the demo host has 8 GPUs)', None),
    ('[hosts.h]\ndemo = true\ngpus = [2, 8]\n', "[hosts.h] gpus = [2, 8]: expected GPU indices 0-7", None),
    # kind keys themselves
    ('[hosts.h]\nssh = "a b"\nunit = "u"\n', '[hosts.h] ssh = "a b": expected "user@host"', None),
    ('[hosts.h]\nssh = "-oProxyCommand=x"\nunit = "u"\n', "not starting with '-'", None),
    ('[hosts.h]\nssh = "root@"\nunit = "u"\n', '[hosts.h] ssh = "root@": expected "user@host"', None),
    ('[hosts.h]\nssh = 5\nunit = "u"\n', "[hosts.h] ssh = 5: expected a string", None),
    ('[hosts.h]\nlocal = "yes"\nunit = "u"\n', '[hosts.h] local = "yes": expected true or false', None),
    ('[hosts.h]\ndemo = 1\n', "[hosts.h] demo = 1: expected true or false", None),
    ('[hosts.h]\nssh = "h"\nunit = "a;b"\n', '[hosts.h] unit = "a;b": expected a systemd unit name', None),
    # names, unknown keys, structure
    ('[hosts."gpu a"]\ndemo = true\n', '[hosts."gpu a"] host name "gpu a": expected letters, digits', None),
    ('[hosts.h]\ndemo = true\ncolour = "red"\n', "[hosts.h] unknown key 'colour' = \"red\": expected one of the keys",
     None),
    ('[hosts.h]\ndemo = true\nuint = "x"\n', "did you mean 'unit'", None),
    ('hosts = 3\n', "hosts = 3: expected tables [hosts.NAME]", None),
    ('[hosts]\nh = "x"\n', '[hosts] h = "x": expected a table [hosts.h]', None),
    ('[server]\nx = 1\n', "unknown section 'server' = a table {x}: expected one of the sections", None),
    # [ui]
    ('[ui]\ntheme = 3\n', "[ui] theme = 3: expected a string", None),
    ('[ui]\ntheme = " "\n', '[ui] theme = " ": expected a theme name', None),
    ("[ui]\nstall_seconds = 0\n", "[ui] stall_seconds = 0: expected a number above 0", None),
    ('[ui]\nstall_seconds = "2m"\n', '[ui] stall_seconds = "2m": expected a number', None),
    ("[ui]\nlog_lines = 10\n", "[ui] log_lines = 10: expected a number at least 100", None),
    ("[ui]\nlog_lines = 1.5\n", "[ui] log_lines = 1.5: expected an integer", None),
    ('[ui]\ncolor = "x"\n', "[ui] unknown key 'color'", None),
    ('ui = "dark"\n', 'ui = "dark": expected a table [ui]', None),
    # [keymap]
    ('[keymap]\nquit = 3\n', "[keymap] quit = 3: expected a key string", None),
    ('[keymap]\nquit = "ctrl q"\n', '[keymap] quit = "ctrl q": expected a key string', None),
    ('keymap = ["q"]\n', 'keymap = ["q"]: expected a table [keymap]', None),
    # [calc]
    ('[calc]\ngraph_margin_gib = "1"\n', '[calc] graph_margin_gib = "1": expected a number', None),
    ("[calc]\ngraph_margin_gib = -1\n", "[calc] graph_margin_gib = -1: expected a number at least 0", None),
    ("[calc]\nmargin = 1\n", "[calc] unknown key 'margin' = 1", None),
]


@pytest.mark.parametrize(("text", "fragment", "_unused"), BAD_TABLES, ids=[b[1][:40] for b in BAD_TABLES])
def test_each_rule_has_its_message(tmp_path: Path, text: str, fragment: str, _unused: None) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as ei:
        load_config(str(path))
    msg = str(ei.value)
    assert str(path) in msg
    assert fragment in msg, msg
    assert all(p.file == str(path) for p in ei.value.problems)


def test_all_problems_reported_at_once(tmp_path: Path) -> None:
    text = (
        '[hosts.a]\nssh = "a b"\nunit = "u"\n'
        '[hosts.b]\ndemo = true\nunit = "u"\ndemo_speed = -1\n'
        '[hosts.c]\nlocal = true\n'
        '[ui]\nlog_lines = "many"\n'
        '[calc]\nx = 1\n'
    )
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as ei:
        load_config(str(path))
    e = ei.value
    assert len(e.problems) == 6, str(e)
    assert str(e).startswith(f"{path}: 6 problems in the hosts file:")
    tables = [p.table for p in e.problems]
    assert tables.count("hosts.a") == 1
    assert tables.count("hosts.b") == 2
    assert "hosts.c" in tables
    assert "ui" in tables
    assert "calc" in tables
    # every line stands on its own: it names the file
    assert all(line.strip().startswith(str(path)) for line in str(e).splitlines()[1:])


def test_direct_construction_applies_the_rules() -> None:
    assert HostConfig(demo=True, demo_speed=50).kind == "demo"
    with pytest.raises(ValueError, match="only for demo hosts"):
        HostConfig(ssh="h", unit="u", demo_seed=3)
    with pytest.raises(ValueError, match="needs at least one of unit"):
        HostConfig(ssh="h")
    assert HostConfig(ssh="u@[::1]", unit="x").ssh_host == "::1"
    assert HostConfig(local=True, unit="x", gpus="0-1").gpus == [0, 1]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "engine", "key"),
    [("kimi", "sglang", "kimi-k2.6"), ("LLAMA", "sglang", "llama-70b"), (" Qwen3-32B-Eagle3 ", "sglang",
     "qwen3-32b-eagle3"), ("vllm", "vllm", "vllm-llama-70b"), (None, "vllm", "vllm-llama-70b"),
     (None, "sglang", "kimi-k2.6")],
)
def test_demo_model_accepts_a_name_or_a_unique_prefix(model: str | None, engine: str, key: str) -> None:
    from kvtui.sim.presets import resolve_preset_name

    host = HostConfig(demo=True, demo_engine=engine, **({"demo_model": model} if model else {}))  # type: ignore[arg-type]
    assert host.demo_model == model
    assert resolve_preset_name(host.demo_model, host.demo_engine) == key


def test_an_ambiguous_prefix_lists_what_it_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    import kvtui.sim.presets as dp

    monkeypatch.setattr(dp, "PRESET_ENGINES", {"llama-70b": "sglang", "llama-8b": "sglang", "kimi": "sglang"})
    with pytest.raises(dp.PresetError) as ei:
        dp.resolve_preset_name("llama", "sglang")
    assert ei.value.problem == "demo_model 'llama' matches llama-70b and llama-8b"
    assert ei.value.expected.endswith("llama-70b (sglang), llama-8b (sglang), kimi (sglang)")
    with pytest.raises(ValueError, match="matches llama-70b and llama-8b"):
        HostConfig(demo=True, demo_model="llama")
    assert dp.resolve_preset_name("llama-8", "sglang") == "llama-8b"


def test_the_preset_table_names_each_engines_default_and_the_multi_node_presets() -> None:
    """One table (kvtui.sim.presets, pure): the names config checks are read off PRESETS."""
    from kvtui.sim.presets import DEFAULT_PRESETS, DEMO_ENGINES, PRESET_ENGINES, PRESET_NODES, PRESETS

    assert list(PRESET_ENGINES) == ["kimi-k2.6", "llama-70b", "qwen3-32b-eagle3", "vllm-llama-70b",
                                    "deepseek-r1-2node"]
    assert set(DEFAULT_PRESETS) == set(DEMO_ENGINES)
    assert all(PRESETS[k].engine == e for e, k in DEFAULT_PRESETS.items())
    assert PRESET_NODES == {"deepseek-r1-2node": 2}


@pytest.mark.parametrize(
    ("line", "shown"),
    [('unit = "u.service"', '"u.service"'), ('log_file = "/l"', '"/l"'), ('container = "c"', '"c"'),
     ('launch_script = "/s.sh"', '"/s.sh"'), ('start_command = "go"\nstop_command = "halt"', '"go"'),
     ("sudo = true", "true"), ('engine = "vllm"', '"vllm"')],
)
def test_every_real_server_key_is_refused_on_a_demo_host(tmp_path: Path, line: str, shown: str) -> None:
    path = write(tmp_path, f"[hosts.h]\ndemo = true\n{line}\n")
    with pytest.raises(ConfigError) as ei:
        load_config(str(path))
    key = line.split(" ", 1)[0]
    assert f"{path}: [hosts.h] {key} = {shown}: not for demo hosts" in str(ei.value)
