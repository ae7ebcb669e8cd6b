"""Project hygiene the suite enforces: static checks, and CI running the README's command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_strict_on_src() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "src/asyncshard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(?:sh|bash)\n(.*?)\n```", section, flags=re.S)


def test_readme_has_exactly_two_commands_and_ci_runs_the_second() -> None:
    commands = quick_start_commands()
    assert len(commands) == 2 and all("\n" not in c for c in commands), commands
    ci_lines = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci_lines[-1] == commands[1]


def test_the_package_imports_no_test_tools() -> None:
    """``asyncshard.testing`` (the conformance suite) needs pytest; the package does not."""
    probe = (
        "import sys, asyncshard, asyncshard.sharding, asyncshard.views, asyncshard.cli\n"
        "loaded = {'pytest', 'asyncshard.testing'} & set(sys.modules)\n"
        "assert not loaded, loaded"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def import_graph() -> dict[str, set[str]]:
    """Module -> the asyncshard modules it imports (at import time, lazily inside
    functions or for type checking only). ``from pkg import name`` is an edge to the
    module ``pkg.name`` when it is one, else to ``pkg``."""
    import ast

    src = ROOT / "src"
    modules = {}
    for path in src.rglob("*.py"):
        name = ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("asyncshard"):
                assert node.module is not None
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    graph[name].add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in modules)
        graph[name].discard(name)
    return graph


def test_no_import_cycle() -> None:
    graph = import_graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        stack.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep in graph and dep not in state:
                visit(dep, stack)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


#: Every module of ``src/`` has fewer lines than this (one job per module).
MAX_MODULE_LINES = 600


def test_modules_stay_under_600_lines() -> None:
    src = ROOT / "src"
    sizes = {
        p.relative_to(src).as_posix(): len(p.read_text().splitlines()) for p in src.rglob("*.py")
    }
    over = {name: lines for name, lines in sizes.items() if lines >= MAX_MODULE_LINES}
    assert not over, f"split these modules: {over}"
