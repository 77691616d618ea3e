"""The order the suite's modules are handed to the xdist workers (tests/conftest.py): the engine
suite first, then the longest modules of the last run (pytest's cache), then by number of tests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["tests/test_fmt.py", "tests/test_knobs.py", "tests/engine/test_vllm_cpu.py", "tests/test_cli.py"]


def collected(cache_dir: Path) -> list[str]:
    """The module of each collected test, in collection order."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-o", "addopts=", "-p", "no:xdist",
         "-o", f"cache_dir={cache_dir}", *MODULES],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line.split("::", 1)[0] for line in done.stdout.splitlines() if "::" in line]


def modules(tests: list[str]) -> list[str]:
    return [m for i, m in enumerate(tests) if i == 0 or tests[i - 1] != m]


def test_without_timings_the_engine_suite_goes_first_then_the_modules_with_more_tests(tmp_path: Path) -> None:
    tests = collected(tmp_path / "cache")
    order = modules(tests)
    assert sorted(order) == sorted(MODULES)  # each module's tests stay together
    assert order[0] == "tests/engine/test_vllm_cpu.py"
    counts = Counter(tests)
    assert len({counts[m] for m in order[1:]}) == 3
    assert [counts[m] for m in order[1:]] == sorted((counts[m] for m in order[1:]), reverse=True)


def test_the_last_runs_timings_put_the_longest_module_first_after_the_engine_suite(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "v" / "kvtui").mkdir(parents=True)
    seconds = {"tests/test_knobs.py": 3.0, "tests/test_cli.py": 40.0, "tests/test_fmt.py": 9.5,
               "tests/engine/test_vllm_cpu.py": 1.0}
    (cache / "v" / "kvtui" / "module-seconds").write_text(json.dumps(seconds))
    assert modules(collected(cache)) == ["tests/engine/test_vllm_cpu.py", "tests/test_cli.py", "tests/test_fmt.py",
                                        "tests/test_knobs.py"]
