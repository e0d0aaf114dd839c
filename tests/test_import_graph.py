"""The house rules of README's Development section, checked on the import graph of kvcalc/ (parsed with ast, so no
module is run): no cycles; nothing below `plan` imports `plan` or a surface; no core module imports `validate/`;
`validate/` imports neither `plan` nor a surface; `plots` imports no engine; the core imports only light packages
at module level; and `kvcalc plan` loads no heavy package at run time.

The test is written over the graph, not over a list of today's files, so modules may move (hardware/ package,
engines/vllm_specs.py) without editing it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kvcalc"

SURFACES = {"kvcalc.plan", "kvcalc.sweeps", "kvcalc.render", "kvcalc.plots", "kvcalc.cli"}
ENGINE_PREFIXES = ("kvcalc.engines", "kvcalc.kvcache", "kvcalc.throughput")
# What the core may import at module level besides the standard library (pyproject's dependencies).
LIGHT = {"numpy", "pydantic", "click", "rich", "yaml", "packaging"}
# Loaded by no `kvcalc plan`: engines, plotting, the network and web stacks.
HEAVY = ("torch", "transformers", "vllm", "matplotlib", "huggingface_hub", "requests", "httpx", "aiohttp",
         "fastapi", "starlette", "uvicorn", "flask", "kvcalc.validate", "kvcalc.web")
# Cycles that exist on main and are being removed by another change; each entry names the change. Keep it empty.
KNOWN_CYCLES: list[set[str]] = []  # none: the hardware/ package (review move 3) ended the last one


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of import nodes under `if TYPE_CHECKING:` (annotations only, never run)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, bool]]:
    """(imported module, at module level?) for every import that runs; relative imports resolved, and
    `from pkg import sub` counted as importing pkg.sub when sub is a module."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_nodes(tree)
    top = {id(n) for n in tree.body}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.append((sub if sub in modules else target, id(node) in top))
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {m for m, _ in _imports(name, path, modules) if m in modules and m != name}
            for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _below(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), list(graph.get(start, ()))
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph.get(m, ())
    return seen


def _is_validate(m: str) -> bool:
    return m == "kvcalc.validate" or m.startswith("kvcalc.validate.")


def test_graph_is_read(graph):
    assert "kvcalc.plan" in graph and "kvcalc.cli" in graph
    assert "kvcalc.plan" in graph["kvcalc.sweeps"]  # a relative import resolved


def test_no_import_cycles(graph):
    cycles = [c for c in _cycles(graph) if c not in KNOWN_CYCLES]
    assert not cycles, cycles


def test_nothing_below_plan_imports_plan_or_a_surface(graph):
    below = _below(graph, "kvcalc.plan")
    assert below, "plan imports nothing?"
    bad = {m: sorted(graph[m] & SURFACES) for m in below if graph[m] & SURFACES}
    assert not bad, bad


def test_core_never_imports_validate(graph):
    """Only the cli and the Python API reach validate/ (lazily, for validate and validate_log/validate_metrics);
    everything else stands apart from it."""
    bad = {m: sorted(i for i in deps if _is_validate(i)) for m, deps in graph.items()
           if not _is_validate(m) and m not in ("kvcalc.cli", "kvcalc.api") and any(_is_validate(i) for i in deps)}
    assert not bad, bad


def test_the_python_api_is_a_surface(graph):
    """kvcalc/api.py stands beside the CLI on the request layer: only the package's lazy names import it, and it
    imports no command-line surface."""
    assert sorted(m for m, deps in graph.items() if "kvcalc.api" in deps) == ["kvcalc"]
    assert not graph["kvcalc.api"] & (SURFACE_COMMANDS | {m for m in graph if _is_web(m)})


def _is_web(m: str) -> bool:
    return m == "kvcalc.web" or m.startswith("kvcalc.web.")


SURFACE_COMMANDS = {"kvcalc.cli", "kvcalc.search_cli"}  # command-line surfaces: parse, call, print


def test_web_is_a_surface_beside_the_cli(graph):
    """kvcalc/web/ (`kvcalc serve`) and the CLI both stand on the request layer (kvcalc.options, kvcalc.request):
    only the CLI's `serve` command imports the web, and the web imports no command-line surface."""
    bad = {m: sorted(i for i in deps if _is_web(i)) for m, deps in graph.items()
           if not _is_web(m) and m != "kvcalc.cli" and any(_is_web(i) for i in deps)}
    assert not bad, bad
    from_web = {m: sorted(deps & SURFACE_COMMANDS) for m, deps in graph.items() if _is_web(m) and deps & SURFACE_COMMANDS}
    assert not from_web, from_web


def test_nothing_imports_the_cli(graph):
    """cli.py is the top of the command line: nothing imports it (search_cli and the web take the options and the
    request from kvcalc.options / kvcalc.request) but `python -m kvcalc` (kvcalc/__main__.py), the console script's
    twin."""
    bad = sorted(m for m, deps in graph.items() if "kvcalc.cli" in deps and m != "kvcalc.__main__")
    assert not bad, bad
    assert sorted(m for m, deps in graph.items() if "kvcalc.search_cli" in deps) == ["kvcalc.cli"]


def test_no_import_detours():
    """No module imports a kvcalc module by a string (importlib.import_module, __import__): an arrow the graph
    cannot see is an arrow the house rules cannot check."""
    bad = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                called = ast.unparse(node.func)
                if called.endswith(("import_module", "__import__")) and any(
                        isinstance(a, ast.Constant) and str(a.value).startswith(("kvcalc", ".")) for a in node.args):
                    bad.append(f"{name}: {ast.unparse(node)}")
    assert not bad, bad


def test_request_layer_sits_under_the_surfaces(graph):
    """kvcalc.options and kvcalc.request import no surface: every surface imports them, never the other way."""
    for layer in ("kvcalc.options", "kvcalc.request"):
        below = _below(graph, layer) | {layer}
        assert not below & (SURFACES | SURFACE_COMMANDS | {m for m in graph if _is_web(m)}) - {"kvcalc.plan"}, layer
    assert "kvcalc.request" in graph["kvcalc.cli"] or "kvcalc.request" in _below(graph, "kvcalc.cli")


def test_validate_imports_no_plan_or_surface(graph):
    bad = {m: sorted(deps & SURFACES) for m, deps in graph.items() if _is_validate(m) and deps & SURFACES}
    assert not bad, bad


def test_plots_draw_only(graph):
    engines = sorted(m for m in graph["kvcalc.plots"] if m.startswith(ENGINE_PREFIXES))
    assert not engines, f"plots imports {engines}: it should draw what sweeps computes"
    assert "kvcalc.sweeps" in graph["kvcalc.plots"]


def test_core_imports_only_light_packages_at_module_level():
    """Heavy packages (torch, matplotlib, huggingface_hub ...) only inside functions, behind optional extras."""
    modules = _modules()
    bad = {}
    for name, path in modules.items():
        if _is_validate(name) or _is_web(name):  # the measuring wing and the web page have their own extras
            continue
        for module, top in _imports(name, path, modules):
            root = module.split(".")[0]
            if top and root not in ("kvcalc", "") and root not in LIGHT and root not in sys.stdlib_module_names:
                bad.setdefault(name, []).append(module)
    assert not bad, bad


def test_kvcalc_plan_loads_nothing_heavy():
    code = ("import sys, contextlib, io\nfrom kvcalc.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main(['plan', '--json'])\n    except SystemExit as exc:\n        assert not exc.code\n"
            f"print(','.join(m for m in sys.modules if m.startswith({HEAVY!r})))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == ""
