"""Where the shipped grammar and spec library are.

In a source checkout they are the top-level `grammar/` and `specs/` folders; in an
installed wheel they are packaged as `layoutalg._grammar` and `layoutalg._specs`.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent


def _folder(package: str, checkout_name: str) -> Path:
    local = _REPO / checkout_name
    if local.is_dir():
        return local
    return Path(str(resources.files(package)))


def grammar_path() -> Path:
    return _folder("layoutalg._grammar", "grammar") / "layoutalg.lark"


def specs_dir() -> Path:
    """The shipped spec library."""
    return _folder("layoutalg._specs", "specs")
