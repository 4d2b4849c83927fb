"""The `layoutalg` command line (`app`; `prove`: the `prove` command's table).
"""
from .app import main

__all__ = ["main"]
