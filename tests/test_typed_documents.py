"""Issue 23, item 4: typed documents at every boundary. No function of kvtui takes or returns a
``Mapping[str, Any]`` (nor names one through an alias): a JSON document that crosses a module
boundary has a type (the kube host's: ``kvtui.hosts.kube.objects``)."""

from __future__ import annotations

import ast
from pathlib import Path

from kvtui.hosts.kube import state

KVTUI = Path(__file__).resolve().parent.parent / "kvtui"


def _untyped(node: ast.expr | None) -> bool:
    return node is not None and ast.unparse(node).replace("typing.", "").replace(" ", "") in {
        "Mapping[str,Any]", "JSON"}


def test_no_function_takes_or_returns_an_untyped_mapping() -> None:
    found: list[str] = []
    for path in sorted(KVTUI.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        where = path.relative_to(KVTUI.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _untyped(node.value):
                found.append(f"{where}:{node.lineno}: an alias of Mapping[str, Any]")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                if node.args.vararg is not None:
                    args.append(node.args.vararg)
                if node.args.kwarg is not None:
                    args.append(node.args.kwarg)
                found += [f"{where}:{node.lineno}: {node.name}({a.arg})" for a in args if _untyped(a.annotation)]
                if _untyped(node.returns):
                    found.append(f"{where}:{node.lineno}: {node.name} returns one")
    assert found == []


def test_the_kube_readers_take_the_typed_documents() -> None:
    assert state.pod_state.__annotations__["pod"] == "Pod"
    assert state.container_env.__annotations__["obj"] == "Controller"
    assert state.plain_env.__annotations__["entries"] == "Iterable[EnvVar]"
