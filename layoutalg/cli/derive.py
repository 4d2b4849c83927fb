"""`layoutalg runs`, `explain`, `id` and `derive-corpus`: a family's runs at one configuration,
its digits with strides as formulas, its page format identifier, and the reference corpus."""
from __future__ import annotations

import os
import sys

from .. import params
from ..errors import LayoutalgError
from .common import families_in, sizes_once, writer_text


class Inapplicable(LayoutalgError):
    """The family does not apply at the configuration asked for: said, exit 1. `broken` holds
    (library, family, sizes) where its guards hold but it does not tile (the spec is wrong there)."""

    def __init__(self, message: str, broken: tuple | None = None):
        super().__init__(message)
        self.broken = broken


def runs_command(args) -> int:
    try:
        cf, inst, maps, _ = derived_at_options(args)
    except Inapplicable as e:
        print(e)
        return 1
    first = inst.regions[0][1] if hasattr(inst, "regions") else inst
    regions = f", regions {', '.join(r for r, _ in inst.regions)}" if hasattr(inst, "regions") else ""
    print(f"family {cf.name}: local page {inst.local_page} B, canonical page {inst.canonical_page} B{regions}, "
          f"{len(maps)} rank(s), {maps[0].num_writers if not maps[0].run_writers else 'per-run'} writer(s) "
          f"per block, agnostic={maps[0].parallelism_agnostic}")
    for rank, m in enumerate(maps):
        digits = []
        for (n, rs, _, _), name in zip(first.ranks, first.rank_names):
            digits.append(f"{name}={(rank // rs) % n}")
        print(f"\nrank {rank} ({', '.join(digits)}), {writer_text(m)}, {len(m.runs)} run(s)")
        print(f"  {'local':>8} {'canonical':>10} {'fragment':>9} {'count':>6} {'l.stride':>9} {'c.stride':>9}")
        for r in m.runs:
            print(f"  {r.local_offset:>8} {r.canonical_offset:>10} {r.fragment_size:>9} {r.num_fragments:>6} "
                  f"{r.local_stride:>9} {r.canonical_stride:>9}")
    return 0


def read_names(lib, family: str) -> set:
    from ..compile.codegen import compile_named
    return {b.name for b in compile_named(lib, family).bounds}


def config_line(cf, args) -> str:
    """The configuration a picture shows, in the names its family reads (heads for attention,
    SSM heads for a Mamba state, ...)."""
    values = {"tp": args.tp, "pcp": args.pcp, "dcp": args.dcp, "interleave": args.interleave, "pp": getattr(args, "pp", 1),
              "total_heads": args.heads, "block_size": args.block_size,
              "head_size": args.head_size or params.default_head_size(cf.serves),
              "dtype_bytes": args.dtype_bytes, **dict(args.size)}
    read = {b.name for b in cf.bounds}
    return ", ".join(f"{n}={v}" for n, v in values.items() if n in read or n == "tp")


def derived_at_options(args):
    """(compiled family, instance, every rank's mapping) at the configuration the options give."""
    from ..compile.codegen import compile_named
    from ..compile.compiled import GuardFailed, at_page, fitted_page, stage_sizes
    from ..runtime.lower import TilingError, lower
    lib, names = families_in(args.spec, args.family)
    if len(names) > 1:
        raise LayoutalgError(f"{args.spec} holds {len(names)} families; say which with --family: {', '.join(names)}")
    cf = compile_named(lib, names[0])
    sizes = params.configuration(tp=args.tp, pcp=args.pcp, dcp=args.dcp, interleave=args.interleave,
                                 total_heads=args.heads, heads=args.local_heads or max(1, args.heads // args.tp),
                                 block_size=args.block_size,
                                 head_size=args.head_size or params.default_head_size(cf.serves),
                                 dtype_bytes=args.dtype_bytes, per_token_head_quant=args.per_token_head_quant)
    declared = {n: p for n, p in lib.vocabulary().items() if n not in params.TABLE}
    for name, value in sizes_once(args.cmd, args.size).items():
        if name in params.TABLE:
            raise LayoutalgError(f"--size {name}: a built-in name; set it with its own option (--help)")
        if name not in declared:
            raise LayoutalgError(f"--size {name}: not a name these specs declare; declared: "
                                 f"{', '.join(declared) or 'none'}")
        sizes[name] = value
    sizes.update(stage_sizes(cf, getattr(args, "pp", 1)))  # a stage grid's page holds a stage's layers
    outside = cf.outside_domain(sizes)  # say it plainly before any guard or case speaks
    if outside:
        raise Inapplicable(f"{cf.name} does not apply (the layer would fail closed): {outside}")
    page = args.page_size
    if page is None:
        try:
            page = fitted_page(cf, sizes)
        except GuardFailed as e:  # the family's own reason, not the empty probe page's
            raise Inapplicable(f"{cf.name} does not apply (the layer would fail closed): {e}")
    try:
        inst, why = at_page(cf, sizes, page)
    except GuardFailed as e:
        raise Inapplicable(f"{cf.name} does not apply (the layer would fail closed): {e}")
    if why:
        raise Inapplicable(f"{cf.name} does not apply (the layer would fail closed): {why}")
    outside = params.in_domain({**sizes, "page_size": page})
    if outside:
        print(f"note: {outside}: `layoutalg prove` does not cover these runs")
    try:
        maps = lower(inst)
    except TilingError as e:
        raise Inapplicable(f"{cf.name} does not apply (the layer would fail closed): {e}",
                            (lib, names[0], {**sizes, "page_size": page}))
    from ..record import replace
    from ..runtime.formats import format_id, names_data  # as the runtime names the page, so plans compare formats as it does
    sizes = {**sizes, "page_size": page}
    fmt = format_id(cf.layout_id, inst, names_data(inst), sizes)
    return cf, inst, [replace(m, format_id=fmt) for m in maps], sizes


def explain_command(args) -> int:
    from ..ir.family import resolve, symbolic_copy_map
    lib, names = families_in(args.spec, args.family)
    for name in [p for n in names for p in lib.parts_of(n)]:
        fam = resolve(lib, name)
        region = lib.family_def(name).shard.region
        part = f", region '{region}' of its pages" if region else ""
        print(f"family {name} (serves {fam.serves}{part}) from {os.path.relpath(fam.path)}")
        defined: set = set()
        for v in fam.variants:
            cases = " and ".join(c.text.removeprefix("case ") for c in v.cases) or "always"
            print(f"\n  when {cases}:")
            for g in v.guards:
                print(f"    {g.text}")
            rows = [("digit", "extent", "local stride", "canonical stride", "rank stride")] + [
                (d.name + (" (replica)" if d.replica else ""), str(d.extent), str(d.local), str(d.canonical),
                 str(d.rank)) for d in v.digits]
            C = symbolic_copy_map(fam, v)
            modes = [(str(n), str(c)) for n, c in C.modes()] if C is not None else []
            _define_placeholders(fam, [x for r in rows[1:] for x in r] + [x for m in modes for x in m], defined)
            widths = [max(len(r[k]) for r in rows) for k in range(5)]  # aligned however long a formula is
            for r in rows:
                print("    " + "  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip())
            if modes:
                print("    copy map, local order (extent : canonical stride):")
                width = max(len(n) for n, _ in modes)
                for n, c in modes:
                    print(f"      {n.ljust(width)} : {c}")
        print()
    return 0


def _define_placeholders(fam, texts: list, defined: set) -> None:
    """Print `where _q7 = tp / shards` for each division placeholder the texts use, the first
    time it appears (a placeholder stands for a division the algebra keeps whole)."""
    used = [a for a in fam.atoms.by_symbol.values() if str(a.symbol) not in defined
            and any(str(a.symbol) in t for t in texts)]
    for a in used:
        defined.add(str(a.symbol))
    if used:
        print("    where " + ", ".join(f"{a.symbol} = {a.text}" for a in used))


def corpus_command(args) -> int:
    from ..runtime.corpus import CorpusError, derive_corpus
    if not derive_corpus(args.corpus, sys.stdout, args.specs):  # nothing derived is no corpus, not a success
        raise CorpusError(f"derive-corpus: {args.corpus} holds no layer lines (one JSON object a line)")
    return 0


def id_command(args) -> int:
    from ..compile.codegen import compile_named
    lib, names = families_in(args.spec, args.family)
    for name in names:
        print(f"{compile_named(lib, name).layout_id}  {name}")
    return 0
