"""Where the shipped grammar and spec library are.

In a source checkout they are the top-level `grammar/` and `specs/` folders; in an
installed wheel they are the data packages `layoutalg._grammar` and `layoutalg._specs`,
folders beside this module (setuptools installs package data as plain files).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent


def _folder(package: str, checkout_name: str) -> Path:
    """The real folder of a shipped data package (a checkout's own folder first).

    `importlib.resources.files` answers a `MultiplexedPath` for a package without
    `__init__.py`, whose `str()` is no path: the search locations of the package's spec
    name the folders themselves.
    """
    local = _REPO / checkout_name
    if local.is_dir() and (_REPO / "pyproject.toml").is_file():
        return local
    installed = _HERE / package.rpartition(".")[2]
    if installed.is_dir():
        return installed
    spec = importlib.util.find_spec(package)
    for location in (spec.submodule_search_locations or []) if spec else []:
        if Path(location).is_dir():
            return Path(location)
    raise FileNotFoundError(f"layoutalg: the shipped data package {package} is not installed "
                            f"(looked in {local} and {installed})")


def grammar_path() -> Path:
    return _folder("layoutalg._grammar", "grammar") / "layoutalg.lark"


def specs_dir() -> Path:
    """The shipped spec library."""
    return _folder("layoutalg._specs", "specs")
