"""Inside sessiondb imports point one way, down the levels of
docs/architecture.md: 0 the core and what it is built from (connections,
rows, files; never a store handle but the core itself), 1 features that run
on a core (`StoreCore`, `PgCore`, the `Core` protocol), 2 the public faces
(`SessionDB`, `PgSessionDB`), 3 clients of a face (importers, the spool's
re-import, transcripts, the package root). A scan of every import of every
module, ``if TYPE_CHECKING:`` blocks and imports inside functions included,
so a feature that names `SessionDB` even for a type hint fails here."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "sessiondb"

CORE, FEATURE, FACE, CLIENT = 0, 1, 2, 3
LEVELS: dict[int, set[str]] = {
    CORE: {
        "errors", "vocab", "rows", "codec", "classify", "paths", "policy", "outfile",
        "forksafe", "explain", "rawfile", "identify", "holders", "containment",
        "checkpointer", "search_index", "indexer", "reclaim", "core", "coreapi", "txn", "migrations",
        "sessions", "messages", "leases", "usage", "pages", "render", "search_query",
        "search_tail", "spool_reserve", "search_copy", "fts_build",
        "pg.adapter", "pg.errors", "pg.core", "pg.migrations", "pg.search_schema",
        "pg.append", "pg.plans", "pg.bulk",
    },
    FEATURE: {
        "compaction", "search", "search_maintenance", "maintenance", "export", "stats",
        "spool_write", "pg.search", "pg.stats",
    },
    FACE: {"store", "pg", "pg.store"},
    CLIENT: {
        "", "transcript", "spool", "importer", "import_index", "import_spill",
        "foreign_copy", "hermes_agent_import", "llm_import", "llm_threads", "pg.transfer",
        "recovery_api",
    },
}
#: The one edge against the levels: ``SessionDB.open(url=...)`` returns the
#: server backend's face, a subclass of `SessionDB`, imported inside the
#: method so psycopg loads only for a server URL (see docs/architecture.md).
BACKEND_DISPATCH = ("store", "pg")


def level_of() -> dict[str, int]:
    return {m: lvl for lvl, mods in LEVELS.items() for m in mods}


def module_files(root: Path) -> dict[str, Path]:
    """Module name inside the package ("" is the package, "pg.core") -> file."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: set[str],
               top: str = PACKAGE) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import of a
    module of the package: at module level, under ``if TYPE_CHECKING:``, or
    inside a function."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if name else []
    pkg = here if is_pkg else here[:-1]
    tree = ast.parse(path.read_text(), str(path))
    lazy = {n.lineno for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    found: list[tuple[str, int, bool]] = []

    def add(mod: str, line: int) -> None:
        while mod not in known and "." in mod:  # a name imported from a module
            mod = mod.rsplit(".", 1)[0]
        if mod in known and mod != name:
            found.append((mod, line, line in lazy))

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - (node.level - 1)] if node.level > 1 else list(pkg)
            elif node.module and node.module.split(".")[0] == top:
                base = []
            else:
                continue
            mod = ".".join(base + ([node.module] if node.module else []))
            if not node.level:
                mod = mod[len(top) + 1:] if mod != top else ""
            for alias in node.names:  # `from . import store` names a module
                sub = f"{mod}.{alias.name}" if mod else alias.name
                add(sub if sub in known else mod, node.lineno)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == top:
                    add(alias.name[len(top) + 1:] if alias.name != top else "", node.lineno)
    return found


Graph = dict[str, list[tuple[str, int, bool]]]


def graph(root: Path = ROOT / PACKAGE, top: str = PACKAGE) -> Graph:
    files = module_files(root)
    return {m: imports_of(m, p, set(files), top) for m, p in files.items()}


def upward_edges(g: Graph, levels: dict[str, int]) -> list[str]:
    return [f"{m or PACKAGE} (level {levels[m]}) imports {t} (level {levels[t]}) at line {line}"
            for m, edges in g.items() for t, line, _lazy in edges
            if levels[t] > levels[m] and (m, t) != BACKEND_DISPATCH]


def find_cycle(g: Graph) -> list[str] | None:
    """One cycle of the import graph (without the dispatch edge), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t, _line, _lazy in g[m]:
            if (m, t) == BACKEND_DISPATCH:
                continue
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                cycle = visit(t)
                if cycle:
                    return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state:
            cycle = visit(m)
            if cycle:
                return cycle
    return None


def test_every_module_has_a_level_and_the_doc_names_it() -> None:
    modules = set(module_files(ROOT / PACKAGE))
    levels = level_of()
    assert sum(len(v) for v in LEVELS.values()) == len(levels), "a module is in two levels"
    assert not modules - set(levels), f"modules without a level: {sorted(modules - set(levels))}"
    assert not set(levels) - modules, f"levels name no module: {sorted(set(levels) - modules)}"
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = [m for m in levels if m and f"`{m.replace('.', '/')}`" not in doc
               and f"`{m}`" not in doc]
    assert not missing, f"docs/architecture.md does not place: {missing}"


def test_core_and_features_never_import_a_store_face() -> None:
    """Levels 0 and 1 take the core, never `SessionDB` (not even for a type hint)."""
    levels = level_of()
    bad = [f"{m}:{line} imports {t}" for m, edges in graph().items() if levels[m] <= FEATURE
           for t, line, _lazy in edges if levels[t] >= FACE]
    assert not bad, "a core or feature module imports a store face:\n" + "\n".join(bad)


def test_imports_point_down_the_levels() -> None:
    bad = upward_edges(graph(), level_of())
    assert not bad, "imports against the levels of docs/architecture.md:\n" + "\n".join(bad)


def test_the_import_graph_has_no_cycle() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(m or PACKAGE for m in cycle)


def test_the_backend_dispatch_is_the_one_lazy_upward_edge() -> None:
    """store.py reaches the PostgreSQL face only inside `SessionDB.open`."""
    edges = [(line, lazy) for t, line, lazy in graph()[BACKEND_DISPATCH[0]]
             if t == BACKEND_DISPATCH[1]]
    assert edges and all(lazy for _line, lazy in edges), edges


def test_the_scan_sees_type_hints_lazy_imports_and_cycles(tmp_path: Path) -> None:
    pkg = tmp_path / "demo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .store import Face\n")
    (pkg / "store.py").write_text("from . import feature\nclass Face: ...\n")
    (pkg / "feature.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from .store import Face\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "low.py").write_text("def f():\n    from ..feature import x\n"
                                        "    import demo.store\n")
    g = graph(pkg, "demo")
    assert g["feature"] == [("store", 3, False)]
    assert g["sub.low"] == [("feature", 2, True), ("store", 3, True)]
    assert g[""] == [("store", 1, False)]
    assert find_cycle(g) == ["feature", "store", "feature"] or \
        find_cycle(g) == ["store", "feature", "store"]
    levels = {"": 3, "store": 2, "feature": 1, "sub": 0, "sub.low": 0}
    assert sorted(upward_edges(g, levels)) == [
        "feature (level 1) imports store (level 2) at line 3",
        "sub.low (level 0) imports feature (level 1) at line 2",
        "sub.low (level 0) imports store (level 2) at line 3"]
