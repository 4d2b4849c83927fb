"""The `layoutalg` command line: the parser and the dispatch (`app`), one module a command
(`check`, `derive`: runs, explain, id and derive-corpus, `prove`, `reshard`, `draw`), and what
several commands read (`common`).
"""
from .app import main

__all__ = ["main"]
