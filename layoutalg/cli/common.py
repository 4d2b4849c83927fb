"""What several commands read: the families a spec file holds, `--size` options, a rank's writer."""
from __future__ import annotations

from ..errors import LayoutalgError


def sizes_once(command: str, given: list) -> dict:
    """`--size NAME=VALUE` options as a dict; a name given twice is an error, not last-wins."""
    names = dict(given)
    if len(names) != len(given):
        twice = next(n for n, _ in given if [m for m, _ in given].count(n) > 1)
        raise LayoutalgError(f"{command}: --size {twice} is given twice")
    return names


def families_in(spec: str, wanted: str | None):
    from ..dsl.library import load
    lib = load([spec])
    own = [f for f in lib.families if lib.families[f].span.file.endswith(spec.rstrip("/").split("/")[-1])]
    names = [wanted] if wanted else (own or list(lib.families))
    if not names:
        raise LayoutalgError(f"no family in {spec}")
    for n in names:
        if n not in lib.families:
            raise LayoutalgError(f"no family '{n}' in {spec}; families: {', '.join(lib.families)}")
    return lib, names


def writer_text(m) -> str:
    """Who stores what: one election for the page, or one per region of a page replicated unevenly."""
    if not m.run_writers:
        return f"writer {m.writer_index} of {m.num_writers}"
    return "writers per run " + " ".join(f"{w}/{n}" for n, w in m.run_writers)
