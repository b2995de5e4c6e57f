"""Imports point one way, through declared surfaces, without cycles.

sessiondb and recovery are each an ordered list of units: a subpackage that
owns one idea, or one of the few top-level modules. A module may import
from a unit before its own, never after (docs/architecture.md draws the
order); it reaches another unit only through that unit's package, for names
in the package's ``__all__``, and never a private name. The scan reads every
import of every module: module level, under ``if TYPE_CHECKING:`` and inside
functions, so a type hint that crosses a boundary fails here too."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: sessiondb's units, lowest first.
SESSIONDB = ["base", "index", "rows", "spool", "engine", "sqlitefile", "search", "maintenance",
             "face", "store", "pg", "transcript", "importers", "integrations", "recovery_api",
             ""]
#: recovery's units, lowest first (the folder installs as `hstate_recovery`).
RECOVERY = ["base", "schema", "source", "carve", "inspection", "lanes", "output", "repairs",
            "doctor", "salvage", ""]
#: The one edge against the order: ``SessionDB.open(url=...)`` returns the
#: server backend's face, imported inside the method so psycopg loads only
#: for a server URL.
BACKEND_DISPATCH = ("store", "pg")

PACKAGES = {"sessiondb": ("sessiondb", SESSIONDB), "hstate_recovery": ("recovery", RECOVERY)}
#: agent and cli have no order of units, but the same rules on cycles and
#: private names.
LOOSE = {"hstate_agent": "agent", "hstate_cli": "cli"}


@dataclass(frozen=True)
class Edge:
    """One imported name (or module) of a module of the package."""

    source: str   # importing module, dotted inside the package ("" is the root)
    target: str   # the module named by the import, dotted inside the package
    name: str     # the name imported from it ("" for a plain import)
    line: int
    lazy: bool    # inside a function


def unit(module: str) -> str:
    return module.split(".")[0]


def module_files(folder: Path) -> dict[str, Path]:
    """Module name inside the package ("" is the package, "pg.core") -> file."""
    out = {}
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def edges_of(name: str, path: Path, known: set[str], top: str) -> list[Edge]:
    """Every import of a module of the package by the module ``name``."""
    pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    if not name:
        pkg = []
    tree = ast.parse(path.read_text(), str(path))
    lazy = {n.lineno for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    found: list[Edge] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - (node.level - 1)] if node.level > 1 else list(pkg)
                mod = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == top:
                mod = node.module[len(top) + 1:]
            else:
                continue
            for alias in node.names:
                sub = f"{mod}.{alias.name}" if mod else alias.name
                if sub in known:  # `from . import store` names a module
                    found.append(Edge(name, mod, alias.name, node.lineno, node.lineno in lazy))
                elif mod in known:
                    found.append(Edge(name, mod, alias.name, node.lineno, node.lineno in lazy))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == top:
                    mod = alias.name[len(top) + 1:]
                    found.append(Edge(name, mod, "", node.lineno, node.lineno in lazy))
    return [e for e in found if e.target != name]


def scan(folder: Path, top: str) -> dict[str, list[Edge]]:
    files = module_files(folder)
    return {m: edges_of(m, p, set(files), top) for m, p in files.items()}


def module_graph(edges: dict[str, list[Edge]]) -> dict[str, set[str]]:
    """Module -> the modules it imports (a name imported from a package is an
    edge to the package's ``__init__``; a submodule imported by name, to it)."""
    known = set(edges)
    out: dict[str, set[str]] = {m: set() for m in edges}
    for m, es in edges.items():
        for e in es:
            sub = f"{e.target}.{e.name}" if e.target else e.name
            out[m].add(sub if e.name and sub in known else e.target)
    return out


def find_cycle(graph: dict[str, set[str]], skip: tuple[str, str] | None = None
               ) -> list[str] | None:
    """One cycle of the import graph (without the ``skip`` edge), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if (m, t) == skip or t == m:
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

    for m in sorted(graph):
        if m not in state:
            cycle = visit(m)
            if cycle:
                return cycle
    return None


def declared(folder: Path, package: str) -> set[str]:
    """The ``__all__`` of a subpackage, read from its ``__init__``."""
    tree = ast.parse((folder / package.replace(".", "/") / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def boundary_violations(folder: Path, top: str, order: list[str]) -> list[str]:
    """Imports across units that go upward, past a unit's ``__init__``, or
    for a name it does not declare or keeps private."""
    edges = scan(folder, top)
    packages = {unit(m) for m in edges if "." in m}
    rank = {u: i for i, u in enumerate(order)}
    bad = []
    for m, es in edges.items():
        for e in es:
            src, dst = unit(m), unit(e.target)
            if src == dst or (m, e.target) == BACKEND_DISPATCH and top == "sessiondb":
                continue
            where = f"{top}.{m or '__init__'}:{e.line} imports {e.name or e.target}"
            if rank[dst] > rank[src]:
                bad.append(f"{where} from {dst or 'the package root'}, a later unit")
            if e.name.startswith("_"):
                bad.append(f"{where}: a private name of {e.target}")
            if dst in packages and dst != "":
                if e.target != dst:
                    bad.append(f"{where} from {e.target}, past the surface of {dst}")
                elif e.name not in declared(folder, dst):
                    bad.append(f"{where}: not in {dst}.__all__")
    return bad


@pytest.mark.parametrize("top", sorted(PACKAGES))
def test_every_unit_has_a_place_in_the_order(top: str) -> None:
    folder_name, order = PACKAGES[top]
    units = {unit(m) for m in module_files(ROOT / folder_name)}
    assert units == set(order), (f"in the tree, not in the order: {sorted(units - set(order))}; "
                                 f"in the order, not in the tree: {sorted(set(order) - units)}")


@pytest.mark.parametrize("top", sorted(PACKAGES))
def test_imports_point_down_through_declared_surfaces(top: str) -> None:
    folder_name, order = PACKAGES[top]
    bad = boundary_violations(ROOT / folder_name, top, order)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("top", sorted(PACKAGES) + sorted(LOOSE))
def test_no_import_cycle_between_modules(top: str) -> None:
    folder = ROOT / (PACKAGES[top][0] if top in PACKAGES else LOOSE[top])
    skip = BACKEND_DISPATCH if top == "sessiondb" else None
    cycle = find_cycle(module_graph(scan(folder, top)), skip)
    assert cycle is None, "import cycle: " + " -> ".join(m or top for m in cycle)


@pytest.mark.parametrize("top", sorted(PACKAGES) + sorted(LOOSE))
def test_no_private_name_crosses_a_module_of_another_folder(top: str) -> None:
    """A private name stays in its folder (agent and cli have no order, but
    the same rule: a module needing another folder's private name means the
    surface lacks something)."""
    folder = ROOT / (PACKAGES[top][0] if top in PACKAGES else LOOSE[top])
    bad = [f"{top}.{m}:{e.line} imports {e.name} from {e.target}"
           for m, es in scan(folder, top).items() for e in es
           if e.name.startswith("_") and m.rpartition(".")[0] != e.target.rpartition(".")[0]]
    bad += private_attributes(folder, top)
    assert not bad, "\n".join(bad)


def private_attributes(folder: Path, top: str) -> list[str]:
    """``mod._name`` where ``mod`` is a module of another folder imported as a
    namespace (``from ..source import liveread``; ``liveread._check``)."""
    files = module_files(folder)
    bad = []
    for m, path in files.items():
        here = m.rpartition(".")[0] if path.name != "__init__.py" else m
        modules = {}
        for e in edges_of(m, path, set(files), top):
            sub = f"{e.target}.{e.name}" if e.target else e.name
            if e.name and sub in files and sub.rpartition(".")[0] != here:
                modules[e.name] = sub
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in modules and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                bad.append(f"{top}.{m}:{node.lineno} uses {node.attr} of "
                           f"{modules[node.value.id]}")
    return bad


@pytest.mark.parametrize("top", sorted(PACKAGES))
def test_every_surface_declares_what_it_offers(top: str) -> None:
    """Each subpackage's ``__init__`` has an ``__all__``, and every name in it
    is there when the package is imported."""
    import importlib
    folder_name, order = PACKAGES[top]
    for u in order:
        if u and (ROOT / folder_name / u / "__init__.py").exists():
            names = declared(ROOT / folder_name, u)
            assert names, f"{top}.{u} declares nothing"
            mod = importlib.import_module(f"{top}.{u}")
            assert not [n for n in names if not hasattr(mod, n)], f"{top}.{u}"


def test_the_backend_dispatch_is_the_one_lazy_upward_edge() -> None:
    """store.py reaches the PostgreSQL face only inside `SessionDB.open`."""
    edges = [e for e in scan(ROOT / "sessiondb", "sessiondb")["store"]
             if unit(e.target) == "pg"]
    assert edges and all(e.lazy for e in edges), edges


def test_the_order_is_drawn_in_the_architecture_map() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = [f"{folder}/{u}" for top, (folder, order) in PACKAGES.items() for u in order
               if u and f"`{folder}/{u}/`" not in doc and f"`{folder}/{u}.py`" not in doc]
    assert not missing, f"docs/architecture.md does not place: {missing}"


def test_the_scan_sees_surfaces_private_names_lazy_imports_and_cycles(tmp_path: Path) -> None:
    pkg = tmp_path / "demo"
    for sub in ("low", "high"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .high import Face\n")
    (pkg / "low" / "__init__.py").write_text("from .words import Word\n__all__ = ['Word']\n")
    (pkg / "low" / "words.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ..high import Face\n"
        "class Word: ...\n_secret = 1\n")
    (pkg / "high" / "__init__.py").write_text("from .face import Face\n__all__ = ['Face']\n")
    (pkg / "high" / "face.py").write_text(
        "from ..low import Word\n"
        "from ..low.words import _secret\n"
        "def f():\n    from ..low import Missing\n"
        "class Face: ...\n")
    bad = boundary_violations(pkg, "demo", ["low", "high", ""])
    assert bad == [
        "demo.high.face:2 imports _secret: a private name of low.words",
        "demo.high.face:2 imports _secret from low.words, past the surface of low",
        "demo.high.face:4 imports Missing: not in low.__all__",
        "demo.low.words:3 imports Face from high, a later unit",
    ] or sorted(bad) == sorted([
        "demo.high.face:2 imports _secret: a private name of low.words",
        "demo.high.face:2 imports _secret from low.words, past the surface of low",
        "demo.high.face:4 imports Missing: not in low.__all__",
        "demo.low.words:3 imports Face from high, a later unit",
    ])
    cycle = find_cycle(module_graph(scan(pkg, "demo")))
    assert cycle is not None and set(cycle) >= {"low.words", "high"}
    (pkg / "high" / "use.py").write_text("from ..low import words\nx = words._secret\n")
    assert private_attributes(pkg, "demo") == ["demo.high.use:2 uses _secret of low.words"]
    lazy = [e for e in scan(pkg, "demo")["high.face"] if e.lazy]
    assert [e.name for e in lazy] == ["Missing"]


@pytest.mark.parametrize("top", sorted(PACKAGES) + sorted(LOOSE))
def test_no_surface_hides_one_of_its_modules(top: str) -> None:
    """A package never binds a name of one of its own modules to something
    else (``from .identity import identify`` in a package holding
    ``identify.py`` would): ``hstate_recovery.salvage.pipeline`` and
    ``monkeypatch.setattr("pkg.mod.NAME", ...)`` must reach the module."""
    import importlib
    import pkgutil
    package = importlib.import_module(top)
    hidden = []
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        module = importlib.import_module(info.name)
        parent, _, leaf = info.name.rpartition(".")
        if getattr(importlib.import_module(parent), leaf, None) is not module:
            hidden.append(info.name)
    assert hidden == []


def subfolder_violations(folder: Path, top: str) -> list[str]:
    """For a package without an order of units (agent): imports from a
    subfolder by a module outside it that go past the subfolder's
    ``__init__`` or take a name it does not declare."""
    edges = scan(folder, top)
    packages = {unit(m) for m in edges if "." in m}
    bad = []
    for m, es in edges.items():
        for e in es:
            dst = unit(e.target)
            if dst not in packages or unit(m) == dst:
                continue
            where = f"{top}.{m or '__init__'}:{e.line} imports {e.name or e.target}"
            if e.target != dst:
                bad.append(f"{where} from {e.target}, past the surface of {dst}")
            elif e.name not in declared(folder, dst):
                bad.append(f"{where}: not in {dst}.__all__")
    return bad


def test_agent_subfolders_declare_their_surface_and_are_reached_through_it() -> None:
    import importlib
    folder = ROOT / "agent"
    subfolders = sorted(p.parent.name for p in folder.glob("*/__init__.py"))
    assert subfolders, "no subfolder found in agent/ (scan broken?)"
    for sub in subfolders:
        names = declared(folder, sub)
        assert names, f"hstate_agent.{sub} declares nothing"
        mod = importlib.import_module(f"hstate_agent.{sub}")
        assert not [n for n in names if not hasattr(mod, n)], f"hstate_agent.{sub}"
    bad = subfolder_violations(folder, "hstate_agent")
    assert not bad, "\n".join(bad)


def test_the_subfolder_scan_sees_a_module_past_the_surface(tmp_path: Path) -> None:
    pkg = tmp_path / "demo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .inner import Open\n__all__ = ['Open']\n")
    (pkg / "sub" / "inner.py").write_text("class Open: ...\nclass Closed: ...\n")
    (pkg / "top.py").write_text("from .sub import Open\nfrom .sub.inner import Closed\n"
                                "def f():\n    from .sub import Closed\n")
    assert subfolder_violations(pkg, "demo") == [
        "demo.top:2 imports Closed from sub.inner, past the surface of sub",
        "demo.top:4 imports Closed: not in sub.__all__",
    ]
