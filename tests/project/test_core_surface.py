"""recovery/ and agent/ reach the store through one declared surface each:
recovery through `sessiondb.recovery_api`, agent through the package root
`sessiondb`, by public names only. A scan of the source, so an import that
bypasses the surface (a submodule, a private name, a lazy import inside a
function) fails here with the file and line."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SURFACE = {"recovery": "sessiondb.recovery_api", "agent": "sessiondb"}


def store_imports(package: str | Path) -> list[tuple[str, int, str, str]]:
    """(file, line, module, name) for every import of sessiondb in a package,
    at any depth of the file; ``name`` is ``*`` for a plain ``import``."""
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.split(".")[0] == "sessiondb":
                out += [(path.name, node.lineno, node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                out += [(path.name, node.lineno, a.name, "*") for a in node.names
                        if a.name.split(".")[0] == "sessiondb"]
    return out


def violations(package: str | Path, surface: str) -> list[str]:
    public = set(importlib.import_module(surface).__all__)
    return [f"{f}:{line}: {mod} {name}" for f, line, mod, name in store_imports(package)
            if mod != surface or name not in public or name.startswith("_")]


@pytest.mark.parametrize("package", sorted(SURFACE))
def test_package_imports_the_store_only_through_its_surface(package: str) -> None:
    surface = SURFACE[package]
    assert store_imports(package), f"no sessiondb import found in {package}/ (scanner broken?)"
    bad = violations(package, surface)
    assert not bad, f"{package}/ must import the store only from {surface} (its __all__):\n" \
        + "\n".join(bad)


def test_recovery_api_declares_exactly_what_it_binds() -> None:
    """A pure re-export module: every public name it binds is declared in
    ``__all__``, nothing private is declared, and every declared name exists."""
    api = importlib.import_module("sessiondb.recovery_api")
    declared = set(api.__all__)
    assert len(declared) == len(api.__all__), "a name is declared twice"
    assert not [n for n in declared if n.startswith("_")]
    assert not [n for n in declared if not hasattr(api, n)]
    bound = {n for n in vars(api) if not n.startswith("_") and n != "annotations"}
    assert bound == declared
    tree = ast.parse((ROOT / "sessiondb" / "recovery_api.py").read_text())
    code = [n for n in tree.body if not isinstance(n, (ast.ImportFrom, ast.Expr, ast.Assign))]
    assert not code, "recovery_api defines code; it only re-exports"


def test_recovery_api_is_used_in_full() -> None:
    """Nothing declared that recovery no longer uses: the surface stays the
    real dependency, not a second copy of the package root."""
    used = {name for _f, _l, _m, name in store_imports("recovery")}
    unused = set(importlib.import_module("sessiondb.recovery_api").__all__) - used
    assert not unused, f"declared in recovery_api but unused by recovery/: {sorted(unused)}"


def test_scan_reports_each_way_around_the_surface(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text("from sessiondb.recovery_api import SessionDB\n")
    (tmp_path / "bad.py").write_text(
        "import sessiondb.store\n"
        "from sessiondb.base.paths import STORE_NAME\n"
        "from sessiondb.recovery_api import _private\n"
        "def f():\n"
        "    from sessiondb import migrations\n")
    assert violations(tmp_path, "sessiondb.recovery_api") == [
        "bad.py:1: sessiondb.store *", "bad.py:2: sessiondb.base.paths STORE_NAME",
        "bad.py:3: sessiondb.recovery_api _private", "bad.py:5: sessiondb migrations"]


# -- inside sessiondb: feature modules and the store class ---------------------

#: May import SessionDB at run time: the face, the package's surfaces, and the
#: PostgreSQL backend, which comes after the face in the order of units
#: (tests/project/test_layers.py); so does the integrations' opening of a
#: store a framework's caller names by path.
STORE_FACES = {"store.py", "__init__.py", "recovery_api.py", "integrations/naming.py"}


def _runtime_store_imports(tree: ast.Module, depth: int = 0) -> list[int]:
    """Lines importing sessiondb's `store` outside an ``if TYPE_CHECKING:``
    block, from a module ``depth`` folders below sessiondb (``..store`` from
    a subpackage; its own ``.store``, such as pg/store.py, is another module)."""
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            guarded |= {n.lineno for n in ast.walk(node) if hasattr(n, "lineno")}
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
            and n.level == depth + 1
            and (n.module == "store" or (n.module is None and any(a.name == "store"
                                                                  for a in n.names)))
            and n.lineno not in guarded]


def test_feature_modules_never_import_the_store_class_at_run_time() -> None:
    """Imports point one way: store.py builds on the feature modules, which
    never name `SessionDB` (tests/project/test_layers.py); its clients name it for
    type hints only."""
    bad = []
    for path in sorted((ROOT / "sessiondb").rglob("*.py")):
        rel = path.relative_to(ROOT / "sessiondb").as_posix()
        if rel not in STORE_FACES and not rel.startswith("pg/"):
            tree = ast.parse(path.read_text(), str(path))
            depth = len(path.relative_to(ROOT / "sessiondb").parts) - 1
            bad += [f"{rel}:{line}" for line in _runtime_store_imports(tree, depth)]
    assert not bad, f"runtime import of sessiondb.store from a feature module: {bad}"


def test_no_module_reaches_into_a_store_handles_private_parts() -> None:
    """Feature modules read through ``db.core`` (`StoreCore`), not through
    `SessionDB`'s private ``_read``/``_snapshot``/``_core``."""
    bad = []
    for pkg in ("sessiondb", "recovery", "agent", "cli"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if pkg == "sessiondb" and path.name == "store.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                        and not node.attr.startswith("__") \
                        and ast.unparse(node.value) in ("db", "self.db", "self._db", "store"):
                    bad.append(f"{pkg}/{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not bad, "private SessionDB attributes used outside store.py:\n" + "\n".join(bad)


def test_store_import_scan_tells_type_hints_from_run_time() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n"
                     "    from .store import SessionDB\n"
                     "from .store import SessionDB\n"
                     "from . import store\n")
    assert _runtime_store_imports(tree) == [4, 5]
    below = ast.parse("from .store import PgSessionDB\nfrom ..store import SessionDB\n")
    assert _runtime_store_imports(below, depth=1) == [2]
