"""The layout's rules, checked on the source (docs/architecture.md): no import cycle between
the product's modules, and no layer importing one above it.

Every import counts: module level, inside functions and under ``TYPE_CHECKING``, since a
cycle dodged by a function-local import is still a cycle in the design.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("obcommon", "rootservice", "observer_agent", "sql", "migrations")

# Layers, top first: a module may import its own layer and the ones below it. The longest
# matching prefix of a module's name decides its layer.
LAYERS: list[tuple[str, ...]] = [
    ("rootservice.cli", "rootservice.demo", "rootservice.cert_commands", "rootservice.cert_revoke"),
    # The front ends: gRPC / MySQL (api) and HTTP.
    ("rootservice.api", "rootservice.http"),
    ("rootservice.app",),
    # Users, privileges and audit: used by api/ (and built by app), uses db/.
    ("rootservice.auth",),
    (
        "rootservice.bootstrap",
        "rootservice.office",
        "rootservice.parameters",
        "rootservice.root_inspection",
    ),
    # Versions and upgrades: read by bootstrap / office and the statements, reads servers/.
    ("rootservice.upgrade",),
    ("rootservice.balancer",),
    ("rootservice.tenants",),
    ("rootservice.servers",),
    ("rootservice.ha",),
    ("rootservice.tasks", "rootservice.timers", "rootservice.metrics", "rootservice.config"),
    ("rootservice.db", "migrations"),
    ("sql",),
    ("observer_agent",),
    # The root service package's __init__: process set-up that must run before any of its
    # modules imports grpc (obcommon.grpc_fork), so it may use obcommon and nothing else.
    ("rootservice",),
    ("obcommon",),
]
# Who may use whom beyond the layer order: the agent and obadmin are separate programs and
# share only obcommon with the RS; the RS reads the admin language's syntax tree.
SEPARATE_PROGRAMS = {
    "observer_agent": ("observer_agent", "obcommon"),
    "sql": ("sql", "obcommon"),
    "obcommon": ("obcommon",),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if "proto" in path.parts and path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            out[_module_name(path)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The product module ``name`` refers to (a module, else its nearest package)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name)
                if target:
                    yield target
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                target = _resolve(f"{base}.{alias.name}") or _resolve(base)
                if target:
                    yield target


GRAPH = {m: sorted({t for t in _imports(m, p) if t != m}) for m, p in MODULES.items()}


def _layer(module: str) -> int:
    best, layer = -1, len(LAYERS)
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, layer = len(prefix), i
    return layer


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_scan_sees_the_product() -> None:
    # Guards the test itself: an empty or wrong scan would pass every rule below.
    assert {"rootservice.app", "rootservice.ha.term", "observer_agent.agent", "sql.parser"} <= (
        MODULES.keys()
    )
    assert "rootservice.ha.term" in GRAPH["rootservice.ha.store"]
    assert "rootservice.app" in GRAPH["rootservice.cli"]


def test_no_import_cycles() -> None:
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert _cycles({"a": ["b"], "b": []}) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_layer_imports_one_above_it(module: str) -> None:
    mine = _layer(module)
    assert mine < len(LAYERS), f"{module} is in no layer: add it to LAYERS"
    upward = [t for t in GRAPH[module] if _layer(t) < mine]
    assert upward == [], f"{module} (layer {LAYERS[mine]}) imports from above: {upward}"
    program = module.split(".")[0]
    if program in SEPARATE_PROGRAMS:
        foreign = [t for t in GRAPH[module] if t.split(".")[0] not in SEPARATE_PROGRAMS[program]]
        assert foreign == [], f"{module} imports another program: {foreign}"


def test_layers_are_told_apart() -> None:
    assert _layer("rootservice.servers.admin") > _layer("rootservice.tenants.ddl")
    assert _layer("rootservice.db.server_repo") > _layer("rootservice.ha.store")
    assert _layer("rootservice.balancer.spark.schema") == _layer("rootservice.balancer")
