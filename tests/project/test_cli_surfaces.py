"""cli/ reaches the other folders only through their declared surfaces.

A command imports from `sessiondb`, `hstate_recovery` and `hstate_agent`
through a package ``__init__`` (the root or a subpackage), for names in its
``__all__``: never from a plain module of another folder, never a private
name, never a submodule taken whole as a namespace. And it calls the store
through `SessionDB`'s methods, never through the core under a handle
(``db.core``). A scan of the source, at every depth of a file (module level,
``if TYPE_CHECKING:``, inside functions), so a violation fails here with the
file and line."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.layout import INSTALLED

ROOT = Path(__file__).resolve().parents[2]
#: Installed name -> the folder it installs from (the CLI's own aside).
TARGETS = {name: ROOT / folder for folder, name in INSTALLED.items() if folder != "cli"}


def folder_of(dotted: str, targets: dict[str, Path]) -> Path | None:
    """The directory or module path (without ``.py``) a dotted name points at."""
    top, *rest = dotted.split(".")
    return targets[top].joinpath(*rest) if top in targets else None


def is_package(place: Path) -> bool:
    return (place / "__init__.py").is_file()


def surface(package: Path) -> tuple[set[str], set[str]]:
    """The ``__all__`` of a package, read from its ``__init__``, and which of
    its names are submodules (``from . import mod``, or a submodule the
    ``__init__`` binds to nothing else; a name bound to something else, as
    ``from .x import x`` would, is not a module)."""
    tree = ast.parse((package / "__init__.py").read_text())
    names: set[str] = set()
    modules: set[str] = set()
    other: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            names = set(ast.literal_eval(node.value))
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
            modules |= {a.asname or a.name for a in node.names}
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            other |= {a.asname or a.name for a in node.names}
    files = {p.stem for p in package.glob("*.py")} | {p.parent.name
                                                      for p in package.glob("*/__init__.py")}
    return names, modules | (files - other - {"__init__"})


def name_problem(package: Path, dotted: str, name: str) -> str | None:
    """What is wrong with importing ``name`` from the package ``dotted``, if anything."""
    if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
        return f"{name} is private to {dotted}"
    names, modules = surface(package)
    if name in modules:
        return f"{dotted}.{name} is a module; import the names it offers from {dotted}"
    if name not in names:
        return f"{name} is not in {dotted}.__all__"
    return None


def imports_of(tree: ast.AST, targets: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, problem) for every import of another folder that bypasses its surface."""
    bad: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            place = folder_of(node.module, targets)
            if place is None:
                continue
            if not is_package(place):
                bad.append((node.lineno, f"{node.module} is not a package surface"))
                continue
            bad += [(node.lineno, p) for a in node.names
                    if (p := name_problem(place, node.module, a.name))]
        elif isinstance(node, ast.Import):
            for a in node.names:
                place = folder_of(a.name, targets)
                if place is not None and "." in a.name:
                    bad.append((node.lineno, f"import {a.name}: import names from a package"))
    return bad


def plain_import_uses(tree: ast.AST, targets: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, problem) for ``pkg.name`` after ``import pkg``: the name must be declared."""
    bound = {a.asname or a.name: a.name for node in ast.walk(tree)
             if isinstance(node, ast.Import) for a in node.names
             if "." not in a.name and a.name in targets}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in bound:
            dotted = bound[node.value.id]
            problem = name_problem(targets[dotted], dotted, node.attr)
            if problem:
                bad.append((node.lineno, problem))
    return bad


def core_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, problem) for every ``.core`` attribute: the CLI calls the store's
    methods, never the feature functions on its core."""
    return [(node.lineno, f"{ast.unparse(node)}: call a SessionDB method instead")
            for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "core"]


def violations(cli: Path, targets: dict[str, Path]) -> list[str]:
    out = []
    for path in sorted(cli.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        found = imports_of(tree, targets) + plain_import_uses(tree, targets) + core_uses(tree)
        rel = path.relative_to(cli).as_posix()
        out += [f"{rel}:{line}: {problem}" for line, problem in sorted(found)]
    return out


def test_the_cli_reaches_other_folders_only_through_their_surfaces() -> None:
    bad = violations(ROOT / "cli", TARGETS)
    assert not bad, "cli/ goes around a declared surface:\n" + "\n".join(bad)


def test_the_scanner_sees_each_way_around_a_surface(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    (lib / "sub").mkdir(parents=True)
    (lib / "__init__.py").write_text("from .sub import Thing\n__all__ = ['Thing', '__version__']\n"
                                     "__version__ = '1'\n")
    (lib / "sub" / "__init__.py").write_text("from . import mod\nfrom .mod import Thing, Other\n"
                                             "from .tool import tool\n"
                                             "__all__ = ['Thing', 'mod', 'tool']\n")
    (lib / "sub" / "mod.py").write_text("class Thing: ...\nclass Other: ...\n_hidden = 1\n")
    (lib / "sub" / "tool.py").write_text("def tool(): ...\n")  # a function named as its module
    cli = tmp_path / "cli"
    (cli / "commands").mkdir(parents=True)
    (cli / "ok.py").write_text(
        "import lib\nfrom lib import Thing\nfrom lib.sub import Thing as T, tool\n"
        "print(lib.__version__)\n")
    (cli / "commands" / "bad.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import lib\n"
        "from lib.sub.mod import Thing\n"
        "from lib.sub import mod\n"
        "if TYPE_CHECKING:\n"
        "    from lib.sub import Other\n"
        "def run(db):\n"
        "    from lib.sub import _hidden\n"
        "    import lib.sub\n"
        "    lib.Missing()\n"
        "    return db.core.read()\n")
    assert violations(cli, {"lib": lib}) == [
        "commands/bad.py:3: lib.sub.mod is not a package surface",
        "commands/bad.py:4: lib.sub.mod is a module; import the names it offers from lib.sub",
        "commands/bad.py:6: Other is not in lib.sub.__all__",
        "commands/bad.py:8: _hidden is private to lib.sub",
        "commands/bad.py:9: import lib.sub: import names from a package",
        "commands/bad.py:10: Missing is not in lib.__all__",
        "commands/bad.py:11: db.core: call a SessionDB method instead",
    ]
