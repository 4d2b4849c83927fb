"""`layoutalg specs`: where the shipped spec library is (in a checkout or an installed wheel)."""
from __future__ import annotations


def _specs(args) -> int:
    from .._resources import specs_dir
    from ..dsl.library import SHIPPED
    folder = specs_dir()
    print(folder)
    if not args.where:
        for f in sorted(folder.glob("*.lal")):
            print(f"  {f.name:<20} import \"{f.name}\" (or \"{SHIPPED}{f.name}\")")
    return 0
