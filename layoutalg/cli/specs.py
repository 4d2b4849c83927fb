"""`layoutalg specs`: where the shipped spec library is (in a checkout or an installed wheel)."""
from __future__ import annotations


def specs_command(args) -> int:
    from ..resources import specs_dir
    from ..dsl.library import SHIPPED
    folder = specs_dir()
    print(folder)
    if not args.where:
        for f in sorted(folder.glob("*.lal")):
            print(f"  {f.name:<20} import \"{f.name}\" (or \"{SHIPPED}{f.name}\")")
    return 0


def spec_path(text: str) -> str:
    """A SPEC argument: the path as given where it exists; else, the shipped library's file or
    folder of that name (`specs/split_nhd.lal`, `split_nhd.lal`, `specs/`), as `import` finds a
    shipped file a user's folder lacks, so the examples of `--help` and the README run from an
    installed wheel too. A path that is neither stays as given (the command says it is missing)."""
    import os
    from ..resources import specs_dir
    if os.path.exists(text):
        return text
    name = text.rstrip("/")
    name = name[len("specs/"):] if name.startswith("specs/") else "" if name == "specs" else name
    shipped = specs_dir() / name if name else specs_dir()
    return str(shipped) if "/" not in name and shipped.exists() else text

