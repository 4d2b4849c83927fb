"""Where the shipped grammar and spec library are.

In a source checkout they are the top-level `grammar/` and `specs/` folders; in an
installed wheel they are the data packages `layoutalg._grammar` and `layoutalg._specs`,
folders beside this module (setuptools installs package data as plain files). The runtime
asks for plain strings (`specs_folder`, `grammar_file`): it starts without `pathlib`.
"""
from __future__ import annotations

import os

_HERE = os.path.dirname(os.path.realpath(__file__))
_REPO = os.path.dirname(_HERE)


def _folder(package: str, checkout_name: str) -> str:
    """The real folder of a shipped data package (a checkout's own folder first).

    `importlib.resources.files` answers a `MultiplexedPath` for a package without
    `__init__.py`, whose `str()` is no path: the search locations of the package's spec
    name the folders themselves.
    """
    local = os.path.join(_REPO, checkout_name)
    if os.path.isdir(local) and os.path.isfile(os.path.join(_REPO, "pyproject.toml")):
        return local
    installed = os.path.join(_HERE, package.rpartition(".")[2])
    if os.path.isdir(installed):
        return installed
    import importlib.util
    spec = importlib.util.find_spec(package)
    for location in (spec.submodule_search_locations or []) if spec else []:
        if os.path.isdir(location):
            return os.fspath(location)
    raise FileNotFoundError(f"layoutalg: the shipped data package {package} is not installed "
                            f"(looked in {local} and {installed})")


def grammar_file() -> str:
    return os.path.join(_folder("layoutalg._grammar", "grammar"), "layoutalg.lark")


def specs_folder() -> str:
    """The shipped spec library."""
    return _folder("layoutalg._specs", "specs")


def grammar_path():
    from pathlib import Path
    return Path(grammar_file())


def specs_dir():
    """The shipped spec library (a `pathlib.Path`)."""
    from pathlib import Path
    return Path(specs_folder())
