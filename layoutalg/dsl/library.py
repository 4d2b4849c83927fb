"""Syntax tree -> name tables: load spec files (following `import`s) into a `Library`.

A library is a set of files whose definitions share one namespace; a name defined
twice is an error that points at the second definition.
"""
from __future__ import annotations

import dataclasses
import keyword
import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import params
from ..resources import specs_dir
from ..errors import SpecError
from .syntax import parse_file
from .tree import (Call, Case, FamilyDef, Fn, GridDef, LayoutDef, LayoutUse, Let, Module, Name, ParamDef,
                   Ranks, Replica, RESERVED, RulesDef, Shard, Use, grouped)


MAX_IMPORT_DEPTH = 64
"""Longest chain of nested `import`s (each level is a recursive call)."""

MAX_GRID_STATEMENTS = 1024
"""Most statements a grid may hold once its `use`d rules are spliced in (the shipped ones: 17)."""

MAX_VARIANTS = 256
"""Most combinations of `case`s one family may have: each is compiled, checked and proved."""


@dataclass
class Library:
    """Every layout, grid, family and shared `let`/`fn` of a set of spec files.

    Each kind has a namespace of its own, so a family may share its layout's name.
    """

    modules: list[Module] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # (each import's path as written, its file)
    layouts: dict[str, LayoutDef] = field(default_factory=dict)
    grids: dict[str, GridDef] = field(default_factory=dict)
    families: dict[str, FamilyDef] = field(default_factory=dict)
    lets: dict[str, Let] = field(default_factory=dict)
    fns: dict[str, Fn] = field(default_factory=dict)
    params: dict[str, ParamDef] = field(default_factory=dict)
    rules: dict[str, RulesDef] = field(default_factory=dict)
    parts: dict[str, FamilyDef] = field(default_factory=dict)  # 'family.region' -> that region's family
    pages: dict[str, tuple[str, ...]] = field(default_factory=dict)  # page layout -> its region layouts
    unloaded: list = field(default_factory=list)  # (family, Name) of each `before` naming a family not loaded
    unused_rules: list = field(default_factory=list)  # `rules` no grid uses (`check` notes them)

    def family_def(self, name: str) -> FamilyDef:
        """A family, or one region's part of a family of pages (`family.region`)."""
        return self.families[name] if name in self.families else self.parts[name]

    def parts_of(self, family: str, pads: bool = False) -> list[str]:
        """The part families of a family of pages (its data regions, then with `pads` its local
        and canonical pads, `family.pad` and `family.pad'`); [family] for a layout of one box."""
        out = [n for n, p in self.parts.items() if p.part_of == family and (pads or p.shard.region is not None)]
        return out or [family]

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
            target = _import_target(module, imp)
            self.links.append((str(Path(module.path).parent / imp.path), str(target)))
            self.add(parse_file(target, imp.span), depth + 1)
        for table, items in ((self.layouts, module.layouts), (self.grids, module.grids),
                             (self.families, module.families), (self.lets, module.lets),
                             (self.fns, module.fns), (self.params, module.params), (self.rules, module.rules)):
            for item in items:
                prior = table.get(item.name)
                if prior is not None and not same_definition(prior, item):
                    raise SpecError(f"'{item.name}' is already defined at {prior.span}", item.span)
                if prior is None:
                    table[item.name] = item
        for d in module.params:
            if d.name in params.TABLE:
                raise SpecError(f"'{d.name}' is a built-in runtime name ({params.TABLE[d.name].meaning}); "
                                f"declare only new ones", d.span)
            if d.name.startswith("_") or d.name in RESERVED or keyword.iskeyword(d.name):
                raise SpecError(f"'{d.name}' cannot name a runtime quantity (reserved)", d.span)

    def splice_rules(self) -> None:
        """Replace each `use NAME` in a grid by the statements of `rules NAME`, in place, so every
        later pass (and the independent reading) sees the grid as if they were written there.

        A `use` is a statement of its own, so a `case` group of the rules never continues one
        written next to the `use` (that would change which cases are alternatives): such a
        neighbour is an error asking for a statement between them."""
        used: set[str] = set()
        for name, grid in list(self.grids.items()):
            self.grids[name] = dataclasses.replace(grid, body=self._spliced(grid.body, (), used))
        for name, rules in self.rules.items():
            self._spliced(rules.body, (name,), used)  # unused rules' uses are checked too (names only in a grid)
        self.unused_rules = sorted(set(self.rules) - used)

    def _spliced(self, body: tuple, chain: tuple, used: set) -> tuple:
        out: list = []
        after_use: Use | None = None  # the `use` whose statements end `out`, if they end in a case
        for s in body:
            if isinstance(s, Case):
                if after_use is not None:
                    raise _merging(after_use, s, "ends")
                s = dataclasses.replace(s, body=self._spliced(s.body, chain, used))
            after_use = None
            if not isinstance(s, Use):
                out.append(s)
                continue
            rules = self.rules.get(s.name)
            if rules is None:
                known = f" (rules here: {', '.join(sorted(self.rules))})" if self.rules else " (none are defined)"
                raise SpecError(f"'use {s.name}' names no rules{known}", s.span)
            if s.name in chain:
                loop = " -> ".join((*chain[chain.index(s.name):], s.name))
                raise SpecError(f"rules use each other in a circle: {loop}", s.span)
            if len(chain) >= MAX_IMPORT_DEPTH:
                raise SpecError(f"'use' nested too deeply: more than {MAX_IMPORT_DEPTH} levels", s.span)
            used.add(s.name)
            inner = self._spliced(rules.body, (*chain, s.name), used)
            if _count(out) + _count(inner) > MAX_GRID_STATEMENTS:  # rules that use rules twice double each level
                raise SpecError(f"'use {s.name}' makes a grid of more than {MAX_GRID_STATEMENTS} statements", s.span)
            if out and isinstance(out[-1], Case) and isinstance(inner[0], Case):
                raise _merging(s, out[-1], "begins")
            out.extend(inner)
            after_use = s if isinstance(inner[-1], Case) else None
        return tuple(out)

    def rank_families(self) -> None:
        """Give each family its place among those serving its layer kind: every `before`
        honoured (a family, of the same kind, and no cycle), the rest by `order`, then name.
        The runtime tries them in that order, so where two hold a layer the spec chose which."""
        self.unloaded = []
        for fam in self.families.values():
            for b in fam.before:
                other = self.families.get(b.id)
                if b.id == fam.name:
                    raise SpecError(f"family '{fam.name}' is preferred before itself", b.span)
                if other is None and (b.id in self.layouts or b.id in self.grids):
                    raise SpecError(f"family '{fam.name}' is preferred before '{b.id}', which is a "
                                    f"{'layout' if b.id in self.layouts else 'grid'}, not a family", b.span)
                if other is None:  # a file read on its own: nothing to prefer it over (`check` says so)
                    self.unloaded.append((fam.name, b))
                    continue
                if other.serves != fam.serves:
                    raise SpecError(f"family '{fam.name}' serves '{fam.serves}' but '{b.id}' serves "
                                    f"'{other.serves}': a preference is between families of one layer kind", b.span)
        placed: list[str] = []
        waiting = {n: {b.id for b in f.before if b.id in self.families} for n, f in self.families.items()}
        preds = {n: {m for m, after in waiting.items() if n in after} for n in self.families}
        while len(placed) < len(self.families):
            ready = sorted((f.order, n) for n, f in self.families.items() if n not in placed and preds[n] <= set(placed))
            if not ready:  # every family left waits for another left: walk back to a circle
                cur, seen = min(n for n in self.families if n not in placed), []
                while cur not in seen:
                    seen.append(cur)
                    cur = min(p for p in preds[cur] if p not in placed)
                circle = seen[seen.index(cur):]
                raise SpecError(f"the preferences between families {' and '.join(sorted(circle))} go round in a "
                                f"circle: each is to be tried before another of them", self.families[circle[0]].span)
            placed.append(ready[0][1])
        for rank, name in enumerate(placed):
            self.families[name] = dataclasses.replace(self.families[name], order=rank)

    def check_param_names(self) -> None:
        """A declared runtime name (`param`) has one meaning: no let, rank digit or layout index
        of these specs may take its name (a let would fail far from the cause, an index would
        silently shadow it). The error names both places."""
        if not self.params:
            return
        seen: list[tuple[str, str, object]] = []  # (name, what, span)

        def walk(stmts, where):
            for st in stmts:
                if isinstance(st, Let):
                    seen.append((st.name, f"a let of {where}", st.span))
                elif isinstance(st, Ranks):
                    seen.extend((d.name, f"a rank digit of {where}", d.span) for d in st.digits)
                elif isinstance(st, Case):
                    walk(st.body, where)
        for g in self.grids.values():
            walk(g.body, f"grid '{g.name}'")
        for f in self.families.values():
            walk(f.body, f"family '{f.name}'")
        for let in self.lets.values():
            seen.append((let.name, "a let", let.span))
        for ldef in self.layouts.values():
            for box in (ldef, *ldef.regions):
                seen += [(i.name, f"an index of layout '{ldef.name}'", i.span) for i in box.indices]
                seen += [(n, f"a parameter of layout '{ldef.name}'", ldef.span) for n in box.params]
        for name, what, span in seen:
            if name in self.params:
                d = self.params[name]
                raise SpecError(f"param '{name}' has the name of {what} at {span}: a runtime "
                                f"name has one meaning; rename one of them", d.span)

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

    def expand_pages(self) -> None:
        """Give every region of a page layout a layout of its own (`page.region`, the page's
        parameters) and every family of pages one part family per region: the region's local
        and canonical layouts, its shard map and its replicas, under the family's grid and
        statements. A pad region's part maps it onto itself; it is never copied."""
        for ldef in list(self.layouts.values()):
            if ldef.regions and ldef.name not in self.pages:
                self.pages[ldef.name] = tuple(f"{ldef.name}.{r.name}" for r in ldef.regions)
                for r in ldef.regions:  # named as the page's, so messages say which page
                    self.layouts[f"{ldef.name}.{r.name}"] = dataclasses.replace(r, name=f"{ldef.name}.{r.name}")
        for name, fam in list(self.families.items()):
            if fam.shard is not None and fam.shard.replicas:  # `replica` on a layout of one box: the family's
                fam = self.families[name] = dataclasses.replace(
                    fam, body=fam.body + (Replica(fam.shard.replicas, fam.shard.span),))
            if fam.local is None or fam.canonical is None or fam.grid is None:
                continue  # resolve names the missing clause
            local, canon = (self.layouts.get(u.call.fn) for u in (fam.local, fam.canonical))
            if local is None or canon is None:
                continue  # resolve names the unknown layout
            if bool(local.regions) != bool(canon.regions):
                paged = fam.local if local.regions else fam.canonical
                raise SpecError(f"family '{fam.name}': layout '{paged.call.fn}' is a page of regions but "
                                f"the other is one box; local and canonical pages have the same regions", paged.span)
            if not local.regions:
                if fam.shards:
                    raise SpecError(f"family '{fam.name}' names the shard map of region "
                                    f"'{fam.shards[0].region}', but its layouts are not pages of regions",
                                    fam.shards[0].span)
                continue
            self._expand_family(fam, local, canon)

    def _expand_family(self, fam: FamilyDef, local: LayoutDef, canon: LayoutDef) -> None:
        data = lambda ldef: [r.name for r in ldef.regions if not r.pad]  # noqa: E731
        if fam.shard is not None:
            raise SpecError(f"layout '{local.name}' is a page of regions ({', '.join(data(local))}): name each "
                            f"region's shard map ('shard {data(local)[0]} (...) -> (...)')", fam.shard.span)
        seq = fam.sequence
        if seq is not None and any(seq.id not in {d.name for d in r.indices} for r in canon.regions if not r.pad):
            raise SpecError(f"family '{fam.name}': 'sequence {seq.id}' names no index of every data region of the "
                            f"canonical page '{canon.name}' (pages of another cp join region by region along it, so "
                            f"every data region must hold the tokens)",
                            seq.span)
        if data(local) != data(canon):
            raise SpecError(f"family '{fam.name}': the local page '{local.name}' has data regions "
                            f"({', '.join(data(local))}) but the canonical page '{canon.name}' has "
                            f"({', '.join(data(canon))}); they must be the same, in the same order",
                            fam.canonical.span)
        shards = {s.region: s for s in fam.shards}
        for s in fam.shards:
            if s.region not in data(local):
                pads = [r.name for r in local.regions if r.pad]
                why = "is padding, which is never copied" if s.region in pads else "is not a data region"
                raise SpecError(f"family '{fam.name}': region '{s.region}' {why} (data regions: "
                                f"{', '.join(data(local))})", s.span)
        missing = [r for r in data(local) if r not in shards]
        if missing:
            raise SpecError(f"family '{fam.name}' has no shard map for region '{missing[0]}' of its pages "
                            f"(write 'shard {missing[0]} (...) -> (...)')", fam.span)
        page = (local.name, canon.name)

        def part(name: str, lcall: Call, ccall: Call, shard: Shard, extra: tuple, pages=page, seq=None) -> None:
            self.parts[name] = FamilyDef(name, fam.serves, fam.order, fam.grid, LayoutUse(lcall, fam.local.span),
                                         LayoutUse(ccall, fam.canonical.span), shard, fam.body + extra,
                                         shard.span, (), fam.name, pages, sequence=seq)

        for r in data(local):
            s = shards[r]
            extra = (Replica(s.replicas, s.span),) if s.replicas else ()
            part(f"{fam.name}.{r}", Call(f"{local.name}.{r}", fam.local.call.args, fam.local.call.span),
                 Call(f"{canon.name}.{r}", fam.canonical.call.args, fam.canonical.call.span),
                 Shard(s.sources, s.targets, s.span, r, s.replicas), extra, seq=seq)  # each region's claim proved
        for role, ldef, use in (("", local, fam.local), ("'", canon, fam.canonical)):
            for r in ldef.regions:
                if r.pad:  # onto itself: the pad's own box and offset, for its extents at run time
                    call = Call(f"{ldef.name}.{r.name}", use.call.args, use.call.span)
                    ident = tuple(Name(i.name, i.span) for i in r.indices)
                    # its own page on both sides: a canonical pad reads the canonical page's arguments
                    part(f"{fam.name}.{r.name}{role}", call, call, Shard(ident, ident, r.span, None), (),
                         (ldef.name, ldef.name))

    def family_path(self, name: str) -> str:
        return self.families[name].span.file


def _count(stmts) -> int:
    """Statements in a block, those inside its cases included."""
    return sum(1 + (_count(x.body) if isinstance(x, Case) else 0) for x in stmts)


def _merging(use: Use, case: Case, which: str) -> SpecError:
    return SpecError(f"rules '{use.name}' {which} with a case group and a 'case' stands next to its 'use': the "
                     f"two groups would read as one (alternatives of each other); put a statement between them",
                     case.span if which == "ends" else use.span)


SHIPPED = "layoutalg/"
"""An import path that starts so names a file of the shipped library (`layoutalg specs`)."""


def _import_target(module: Module, imp) -> Path:
    """The file an `import` names: `layoutalg/NAME` the shipped library's; any other path the
    importing file's folder's, else, where that folder has none, the shipped library's (so a
    user's folder imports "grids.lal" without a copy of it)."""
    if imp.path.startswith(SHIPPED):
        target = (specs_dir() / imp.path[len(SHIPPED):]).resolve()
        looked = str(target)
        if not target.is_relative_to(specs_dir().resolve()):
            raise SpecError(f"imported path '{imp.path}' leaves the shipped library ({target}): "
                            f"'{SHIPPED}NAME' names a file of it", imp.span)
    else:
        own = (Path(module.path).parent / imp.path).resolve()
        shipped = (specs_dir() / imp.path).resolve()
        target = own if own.exists() or not shipped.is_file() else shipped
        looked = f"{own}" + (f", nor in the shipped library ({shipped})" if own != shipped else "")
    if target.is_dir():
        raise SpecError(f"imported path '{imp.path}' is a folder, not a spec file ({target})", imp.span)
    if not target.exists():
        raise SpecError(f"imported file '{imp.path}' not found (looked for {looked})", imp.span)
    return target


def same_definition(a, b) -> bool:
    """Whether two definitions say the same thing, wherever each was written (two copies of one
    file, imported from two folders, are one definition, not two)."""
    return type(a) is type(b) and _plain(a) == _plain(b)


def _plain(x):
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__,) + tuple(_plain(getattr(x, f.name)) for f in dataclasses.fields(x)
                                           if f.name != "span")
    if isinstance(x, (list, tuple)):
        return tuple(_plain(y) for y in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _plain(v)) for k, v in x.items()))
    return x


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
        elif p.exists():  # a pipe or a device: its read may never end
            raise SpecError(f"cannot read spec file {p}: it is not a regular file")
        else:
            raise SpecError(f"no such spec file or folder: {p}")
    return out


def load(paths) -> Library:
    """Load spec files and folders into one library."""
    lib = Library()
    for f in spec_files(paths):
        lib.add(parse_file(f.resolve()))
        if f.is_symlink():  # a spec file that is a link: re-pointed, it is another source
            lib.links.append((str(f.absolute()), str(f.resolve())))
    lib.splice_rules()
    lib.check_param_names()
    lib.check_limits()
    lib.rank_families()
    lib.expand_pages()
    return lib


def sources(lib: Library) -> tuple[tuple[str, str], ...]:
    """(path, sha256 of the bytes parsed) of every file the library was read from, and of every
    import by the path it is written as (a link re-pointed since is another source); an import
    the shipped library answered because its own folder had no such file, (path, `ABSENT`): a
    file appearing there later is another source (such a library is never cached on disk, whose
    entries record files, not their absence)."""
    from .sources import ABSENT
    read = {m.path: m.digest for m in lib.modules}
    return tuple(sorted({*read.items(), *((path, read[target] if os.path.exists(path) else ABSENT)
                                          for path, target in lib.links)}))


_LOADED: dict[str, tuple[tuple, tuple, Library]] = {}
"""Per folder: (`sources`, its spec files, the library)."""


def load_default(spec_dir: str | Path | None = None) -> Library:
    """The shipped spec library (or `spec_dir`), loaded once per process and again whenever a
    file it was read from changes or the folder's spec files do (`unchanged`): an edited spec
    is never served stale."""
    from . import sources as files
    folder = Path(spec_dir or specs_dir()).resolve()
    hit = _LOADED.get(str(folder))
    if hit is not None and files.unchanged(hit[0], folder, hit[1]):
        return hit[2]
    listing = files.folder_listing(folder)
    lib = load((str(folder),))
    if len(_LOADED) >= 8:
        _LOADED.pop(next(iter(_LOADED)))
    _LOADED[str(folder)] = (sources(lib), listing, lib)
    return lib
