"""The repository's folders and the names they install under, read from
pyproject.toml's ``[tool.setuptools.package-dir]`` (the one place that says)."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def installed_names() -> dict[str, str]:
    """Folder of the checkout -> the import name it installs under."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {folder: name for name, folder in table["package-dir"].items()}


#: ``{"sessiondb": "sessiondb", "recovery": "hstate_recovery", ...}``
INSTALLED = installed_names()
