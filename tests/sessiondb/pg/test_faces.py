"""The two faces of the store share `StoreFace` and offer one API.

`SessionDB` (a SQLite file) and `PgSessionDB` (a server) both derive from
`StoreFace` and neither from the other; no class of sessiondb overrides a
private method another class of sessiondb defines, so a private method
means the same on every backend. Read from the classes: no server needed."""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import sessiondb
from sessiondb import SessionDB, StoreFace
from sessiondb.pg.store import PgSessionDB

#: On a server these raise `NotOnPostgreSQL` (the file's checks and WAL) or
#: give the neutral answer (no index backlog, no checkpointer, no indexer);
#: test_pg_store.py runs them on one.
SQLITE_ONLY = {"checkpoint", "quick_check", "journal_mode", "search_health", "index_backlog",
               "search_index_stale", "catch_up_index", "can_index_now", "checkpoint_stats",
               "indexer_stats"}
#: `SessionDB.open` picks the backend (a URL opens a `PgSessionDB`), so only
#: `SessionDB` has it.
FACTORY = {"open"}


def sessiondb_classes() -> list[type]:
    """Every class defined in a module of sessiondb."""
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(sessiondb.__path__, "sessiondb."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and obj.__module__ == info.name:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_methods(cls: type) -> set[str]:
    """The private methods (properties included) a class body defines; not
    data such as ABCMeta's ``_abc_impl``."""
    return {n for n, v in vars(cls).items() if is_private(n) and (
        inspect.isfunction(v) or isinstance(v, (staticmethod, classmethod, property)))}


def private_overrides(classes: list[type]) -> list[str]:
    """``Class.name`` for each private method a class defines that a class
    of sessiondb after it in its MRO defines too."""
    ours = set(classes)
    bad = []
    for cls in classes:
        for name in sorted(private_methods(cls)):
            for base in cls.__mro__[1:]:
                if base in ours and name in private_methods(base):
                    bad.append(f"{cls.__module__}.{cls.__qualname__}.{name} overrides "
                               f"{base.__module__}.{base.__qualname__}.{name}")
    return bad


def public_api(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


def test_no_class_of_sessiondb_overrides_a_private_method_of_another() -> None:
    classes = sessiondb_classes()
    assert SessionDB in classes and PgSessionDB in classes and StoreFace in classes
    bad = private_overrides(classes)
    assert not bad, "\n".join(bad)


def test_the_scan_sees_a_private_override() -> None:
    class Base:
        def _hook(self) -> None: ...
        def __init__(self) -> None: ...

    class Child(Base):
        def _hook(self) -> None: ...
        def __init__(self) -> None: ...  # a dunder is no override of a private

    assert private_overrides([Base, Child]) == [
        f"{__name__}.{Child.__qualname__}._hook overrides {__name__}.{Base.__qualname__}._hook"]


def test_the_server_face_is_no_sqlite_face() -> None:
    assert not issubclass(PgSessionDB, SessionDB)
    assert issubclass(PgSessionDB, StoreFace) and issubclass(SessionDB, StoreFace)
    assert not SessionDB.__abstractmethods__ and not PgSessionDB.__abstractmethods__
    assert (SessionDB.backend, PgSessionDB.backend) == ("sqlite", "postgresql")


def test_both_faces_offer_the_same_public_api() -> None:
    sqlite, server = public_api(SessionDB), public_api(PgSessionDB)
    assert sqlite - server == FACTORY and server - sqlite == set()
    # every shared name is declared there (``backend`` as an annotation)
    assert public_api(StoreFace) | {"backend"} == sqlite - FACTORY
    for name in sorted(server - {"backend", "load_limit"}):
        mine, theirs = inspect.getattr_static(SessionDB, name), inspect.getattr_static(
            PgSessionDB, name)
        if isinstance(mine, property):
            assert isinstance(theirs, property), name
            continue
        shape = [(p.name, p.kind, p.default)
                 for p in inspect.signature(getattr(SessionDB, name)).parameters.values()]
        assert shape == [(p.name, p.kind, p.default) for p in inspect.signature(
            getattr(PgSessionDB, name)).parameters.values()], name


def test_the_sqlite_only_operations_are_each_faces_own() -> None:
    """Declared (abstract) on `StoreFace`, so code typed for either backend
    may call them; each face answers for its backend, neither inherits it."""
    assert SQLITE_ONLY <= StoreFace.__abstractmethods__
    for name in sorted(SQLITE_ONLY):
        assert name in vars(SessionDB) and name in vars(PgSessionDB), name
