"""``[deployments.NAME]`` (issue 15, step 1): validation as good as the hosts', and ``hosts --check``."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtui.cli import main
from kvtui.config import ConfigError, parse_config

HOSTS = """
[hosts.h20-a]
ssh = "root@a.example"
unit = "sglang"
engine = "sglang"

[hosts.h20-b]
ssh = "root@b.example"
unit = "sglang"

[hosts.h20-c]
ssh = "root@c.example"
unit = "vllm"
engine = "vllm"
"""


def _problems(text: str, tmp_path: Path) -> list[str]:
    path = tmp_path / "hosts.toml"
    with pytest.raises(ConfigError) as exc:
        parse_config(HOSTS + text, path)
    return [str(p) for p in exc.value.problems]


def test_a_deployment_loads_with_its_nodes_in_rank_order(tmp_path: Path) -> None:
    cfg = parse_config(HOSTS + '[deployments.r1]\nnodes = ["h20-b", "h20-a"]\nhang_seconds = 90\n', tmp_path / "h.toml")
    dep = cfg.deployment("r1")
    assert dep is not None
    assert dep.nodes == ["h20-b", "h20-a"]
    assert dep.hang_seconds == 90
    assert [n for n, _ in cfg.node_hosts("r1")] == ["h20-b", "h20-a"]
    assert [n for n, _ in cfg.node_hosts("h20-c")] == ["h20-c"]  # a host is a deployment of one
    assert cfg.deployment("h20-a") is None


@pytest.mark.parametrize(("text", "fragment"), [
    ('[deployments.r1]\nnodes = ["h20-a", "h20-x"]\n',
     "[deployments.r1] nodes = [\"h20-a\", \"h20-x\"]: 'h20-x' is not a [hosts.NAME] of this file: expected one of "
     "demo, h20-a, h20-b, h20-c (did you mean 'h20-c'?)"),
    ('[deployments.r1]\nnodes = []\n', "nodes = []: expected at least 1 host"),
    ('[deployments.r1]\nnodes = ["h20-a", "h20-a"]\n', "expected each host once, h20-a is listed twice"),
    ('[deployments.r1]\nnodes = ["h20-a", "h20-c"]\n',
     "mixes engines (sglang on h20-a; vllm on h20-c): expected one engine on every node"),
    ('[deployments.r1]\nnodes = ["h20-a", "h20-b"]\n[deployments.r2]\nnodes = ["h20-b", "h20-a"]\n',
     "[deployments.r2] nodes = [\"h20-b\", \"h20-a\"]: 'h20-b' is node 0 here but node 1 in [deployments.r1]"),
    ('[deployments.h20-a]\nnodes = ["h20-b", "h20-c"]\n', "[deployments.h20-a] the name 'h20-a' is also a host"),
    ('[deployments.r1]\nnodes = ["demo", "h20-b"]\n', "mixes simulated (demo) and real (h20-b) hosts"),
    ('[deployments.r1]\nnodes = ["h20-a", "h20-b"]\nhang = 3\n',
     "[deployments.r1] unknown key 'hang' = 3: expected one of the keys nodes, hang_seconds"),
    ('[deployments.r1]\nnodes = ["h20-a", "h20-b"]\nhang_seconds = 0\n', "hang_seconds = 0: expected a number above 0"),
    ('[deployments.r1]\nnodes = "h20-a"\n', 'nodes = "h20-a": expected a list'),
    ('[deployments.r1]\nhang_seconds = 9\n', "[deployments.r1] nodes: is missing: expected the hosts the server spans"),
])
def test_each_deployment_problem_names_file_table_key_value(tmp_path: Path, text: str, fragment: str) -> None:
    problems = _problems(text, tmp_path)
    assert any(fragment in p for p in problems), problems
    assert all(p.startswith(str(tmp_path / "hosts.toml") + ": ") for p in problems)


def test_deployments_must_be_tables(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"deployments = 3: expected tables \[deployments.NAME\]"):
        parse_config("deployments = 3\n" + HOSTS, tmp_path / "h.toml")


def test_a_node_whose_host_is_invalid_is_not_called_unknown(tmp_path: Path) -> None:
    problems = _problems('[hosts.h20-d]\nssh = "root@d"\n[deployments.r1]\nnodes = ["h20-a", "h20-d"]\n', tmp_path)
    assert len(problems) == 1, problems
    assert "[hosts.h20-d]" in problems[0]


def test_same_role_in_two_deployments_is_fine(tmp_path: Path) -> None:
    cfg = parse_config(HOSTS + '[deployments.r1]\nnodes = ["h20-a", "h20-b"]\n[deployments.r1-bis]\n'
                       'nodes = ["h20-a", "h20-b"]\n', tmp_path / "h.toml")
    assert set(cfg.deployments) == {"r1", "r1-bis"}


def test_unknown_name_mentions_deployments(tmp_path: Path) -> None:
    cfg = parse_config(HOSTS + '[deployments.r1]\nnodes = ["h20-a", "h20-b"]\n', tmp_path / "h.toml")
    with pytest.raises(ConfigError, match="deployments are r1; did you mean 'r1'"):
        cfg.host("r11")


def test_hosts_lists_and_checks_deployments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS.replace('engine = "sglang"\n', 'engine = "sglang"\ngpus = "0-7"\n')
                     + '[deployments.r1]\nnodes = ["h20-a", "h20-b"]\n')
    assert main(["hosts", "--check", "--hosts", str(hosts)]) == 0
    out, err = capsys.readouterr()
    assert any(line.split()[:5] == ["r1", "0:", "h20-a,", "1:", "h20-b"] for line in out.splitlines()), out
    assert "4 host(s) (1 built in), 1 deployment(s) OK" in err
    assert "[deployments.r1] nodes select different GPUs (h20-a 0-7, h20-b all)" in err


def test_hosts_check_refuses_a_bad_deployment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS + '[deployments.r1]\nnodes = ["h20-a", "h20-zz"]\n')
    assert main(["hosts", "--check", "--hosts", str(hosts)]) == 3
    assert "'h20-zz' is not a [hosts.NAME]" in capsys.readouterr().err


def test_connect_opens_a_deployments_nodes(tmp_path: Path) -> None:
    from kvtui.commands.connect import expand_names

    cfg = parse_config(HOSTS + '[deployments.r1]\nnodes = ["h20-b", "h20-a"]\n', tmp_path / "h.toml")
    assert expand_names(cfg, ["r1"]) == ["h20-b", "h20-a"]
    assert expand_names(cfg, ["h20-a", "r1", "h20-c"]) == ["h20-a", "h20-b", "h20-c"]
