"""Syntax tree -> name tables: load spec files (following `import`s) into a `Library`.

A library is a set of files whose definitions share one namespace; a name defined
twice is an error that points at the second definition.
"""
from __future__ import annotations

import functools
import keyword
from dataclasses import dataclass, field
from pathlib import Path

from . import params
from ._resources import specs_dir
from .errors import SpecError
from .syntax import Case, FamilyDef, Fn, GridDef, LayoutDef, Let, Module, ParamDef, grouped, parse_file

RESERVED = {"P", "bool", "rank", "block"}
"""Names the compiled code, the shard map or the tensor clause already give a meaning."""

MAX_IMPORT_DEPTH = 64
"""Longest chain of nested `import`s (each level is a recursive call)."""

MAX_VARIANTS = 256
"""Most combinations of `case`s one family may have: each is compiled, checked and proved."""


@dataclass
class Library:
    """Every layout, grid, family and shared `let`/`fn` of a set of spec files.

    Each kind has a namespace of its own, so a family may share its layout's name.
    """

    modules: list[Module] = field(default_factory=list)
    layouts: dict[str, LayoutDef] = field(default_factory=dict)
    grids: dict[str, GridDef] = field(default_factory=dict)
    families: dict[str, FamilyDef] = field(default_factory=dict)
    lets: dict[str, Let] = field(default_factory=dict)
    fns: dict[str, Fn] = field(default_factory=dict)
    params: dict[str, ParamDef] = field(default_factory=dict)

    def vocabulary(self) -> dict[str, params.Param]:
        """Every runtime name these specs may read: the built-in ones, then the declared ones."""
        return {**params.TABLE, **{n: params.Param(d.meaning, d.lo, d.hi, d.samples, d.default)
                                   for n, d in self.params.items()}}

    def add(self, module: Module, depth: int = 0) -> None:
        if any(m.path == module.path for m in self.modules):
            return
        self.modules.append(module)
        for imp in module.imports:
            if depth >= MAX_IMPORT_DEPTH:
                raise SpecError(f"imports nested too deeply: more than {MAX_IMPORT_DEPTH} levels", imp.span)
            self.add(parse_file(_import_target(module, imp), imp.span), depth + 1)
        for table, items in ((self.layouts, module.layouts), (self.grids, module.grids),
                             (self.families, module.families), (self.lets, module.lets),
                             (self.fns, module.fns), (self.params, module.params)):
            for item in items:
                prior = table.get(item.name)
                if prior is not None:
                    raise SpecError(f"'{item.name}' is already defined at {prior.span}", item.span)
                table[item.name] = item
        for d in module.params:
            if d.name in params.TABLE:
                raise SpecError(f"'{d.name}' is a built-in runtime name ({params.TABLE[d.name].meaning}); "
                                f"declare only new ones", d.span)
            if d.name.startswith("_") or d.name in RESERVED or keyword.iskeyword(d.name):
                raise SpecError(f"'{d.name}' cannot name a runtime quantity (reserved)", d.span)

    def check_limits(self) -> None:
        """Refuse a family whose `case` groups multiply into more than MAX_VARIANTS variants."""
        for fam in self.families.values():
            grid = self.grids.get(fam.grid.id) if fam.grid is not None else None
            if grid is None:
                continue  # resolve reports the unknown grid
            n = _variants(grid.body) * _variants(fam.body)
            if n > MAX_VARIANTS:
                raise SpecError(f"family '{fam.name}' has {n} combinations of cases (grid '{grid.name}' "
                                f"and the family's own); at most {MAX_VARIANTS}", fam.span)

    def family_path(self, name: str) -> str:
        return self.families[name].span.file


def _import_target(module: Module, imp) -> Path:
    target = (Path(module.path).parent / imp.path).resolve()
    if target.is_dir():
        raise SpecError(f"imported path '{imp.path}' is a folder, not a spec file ({target})", imp.span)
    if not target.exists():
        raise SpecError(f"imported file '{imp.path}' not found (looked for {target})", imp.span)
    return target


def _variants(stmts) -> int:
    """How many paths lead through the `case` groups of a block (1 when it has none)."""
    n = 1
    for item in grouped(stmts):
        if isinstance(item, list):
            n *= sum(_variants(c.body) for c in item if isinstance(c, Case))
    return n


def spec_files(paths) -> list[Path]:
    """The .lal files named by `paths` (files, or folders searched non-recursively)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(p.glob("*.lal")))
        elif p.is_file():
            out.append(p)
        else:
            raise SpecError(f"no such spec file or folder: {p}")
    return out


def load(paths) -> Library:
    """Load spec files and folders into one library."""
    lib = Library()
    for f in spec_files(paths):
        lib.add(parse_file(f.resolve()))
    lib.check_limits()
    return lib


@functools.lru_cache(maxsize=8)
def _load_cached(key: tuple[str, ...]) -> Library:
    return load(key)


def load_default(spec_dir: str | Path | None = None) -> Library:
    """The shipped spec library (or `spec_dir`), loaded once per process."""
    return _load_cached((str(Path(spec_dir or specs_dir()).resolve()),))
