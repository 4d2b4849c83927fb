"""`layoutalg check`: parse, derive and check every family of a spec file or folder, by
enumeration at small configurations, and which families can take one tensor."""
from __future__ import annotations

import sys
import time

from ..errors import LayoutalgError
from .common import writer_text


def check_command(args) -> int:
    from ..resources import specs_dir
    from ..verify.check import check_family, sized_cases
    from ..compile.codegen import compile_named
    from ..ir.family import check_layouts
    from ..dsl.library import load
    args.specs = args.specs or [str(specs_dir())]
    lib = load(args.specs)
    check_layouts(lib)  # a broken layout is the finding, even in a file with no family
    if not lib.families:
        raise LayoutalgError(f"nothing to check: no family in {', '.join(args.specs)} ({len(lib.modules)} file(s), "
                             f"{len(lib.grids)} grid(s), {len(lib.layouts)} layout(s))")
    compiled = {name: compile_named(lib, name) for name in lib.families}
    layouts = [n for n in lib.layouts if "." not in n]  # a page's regions are not layouts of their own here
    print(f"{len(layouts)} layout(s), {len(lib.grids)} grid(s), {len(lib.families)} family(ies) "
          f"in {len(lib.modules)} file(s)\n")
    for fam, b in lib.unloaded:  # a misspelt preference would otherwise never apply, silently
        print(f"note: {b.span}: family '{fam}' is preferred before '{b.id}', which is not loaded with it: "
              f"no preference here\n")
    for name in lib.unused_rules:  # rules nothing uses check nothing: say so rather than pass them
        print(f"note: {lib.rules[name].span}: rules '{name}' are used by no grid loaded with them, so nothing "
              f"reads or checks their statements here\n")
    print(f"{'family':<12} {'certified':>9} {'fail-closed':>11} {'oracle':>6}  result")
    bad, examples = 0, {}
    for n, (name, cf) in enumerate(compiled.items(), 1):
        t = time.perf_counter()
        rep = check_family(lib, cf)
        status = ("ok" if rep.ok else f"{len(rep.errors)} error(s)") + \
            (f", {len(rep.warnings)} warning(s)" if rep.warnings else "")
        note = f", {rep.witnesses} configuration(s) from Z3" if rep.witnesses else ""
        print(f"{name:<12} {rep.certified:>9} {rep.failed_closed:>11} {rep.oracle_checked:>6}  {status} "
              f"({time.perf_counter() - t:.2f} s{note})", flush=True)
        print(f"[{n}/{len(compiled)}] {name}: {status}", file=sys.stderr, flush=True)
        for err in rep.errors[:5]:
            print(f"    {err}")
        for line in rep.warnings:
            print(f"    warning: {line}")
        for line in sized_cases(lib, name) + rep.notes:
            print(f"    note: {line}")
        bad += not rep.ok
        examples[name] = rep.example
    bad += _recognition(lib, compiled)
    print("\ncertified: the family applies and its runs tile, on the sample configurations of the names it "
          "reads (params.TABLE and each `param`); fail-closed: its guards reject the configuration (the runtime "
          "would try the next family); oracle: also compared byte for byte with a direct reading of the spec")
    for name, example in examples.items():
        if example is None:
            continue
        sizes, maps = example
        read = {b.name for b in compiled[name].bounds} | {"tp", "pcp"}  # what the family reads, and the group
        shown = ", ".join(f"{k}={v}" for k, v in sizes.items() if k in read)
        print(f"\n{name}, example with {shown}: {len(maps)} ranks, runs as (local, canonical, fragment, count, "
              f"local stride, canonical stride)")
        for rank, m in enumerate(maps[:8]):
            print(f"  rank {rank} ({writer_text(m)}): "
                  + " ".join(str(tuple(r)) for r in m.runs[:8]) + (" ..." if len(m.runs) > 8 else ""))
        if len(maps) > 8:
            print(f"  ... and {len(maps) - 8} more ranks (`layoutalg runs` prints them all)")
    return 1 if bad else 0


def _recognition(lib, compiled: dict) -> int:
    """Two families of one kind that take one tensor must read it alike (`recognition`): printed;
    1 where some pair reads one apart at the sizes compared, or is neither shown apart for all
    sizes nor shown to read alike (the runtime refuses a layer such a pair both takes)."""
    from ..verify.check import sample_domain, spec_line
    from ..verify.prove.together import pairs
    from ..verify.recognition import alike, confusions, unproved
    together = pairs(lib, compiled)
    found, tally = confusions(lib, compiled, sample_domain(lib), together=together)
    if not tally.pairs:
        print("\nrecognition: no two families serve one kind here: no tensor to tell apart")
        return 0
    compared = tally.pairs - tally.apart
    print(f"\nrecognition: {tally.pairs} pair(s) of families of one kind; {tally.apart} never take one layer at "
          f"any size (Z3: no size serves both, or with one tensor); the other {compared}: {tally.offered} layer(s) of "
          f"one offered to the other, at the samples and {tally.found} configuration(s) Z3 found where both apply, "
          f"{tally.taken} taken by both and read byte by byte"
          + ("" if tally.offered or not compared else
             " (nothing compared: no layer of one family was offered to another)"))
    for t in together.values():
        if t.status != "apart" and alike(compiled[t.first], compiled[t.second]):
            print(f"    families {t.first} and {t.second}: shown to read alike every tensor both take, at every size "
                  f"(one grid, one shard map by canonical index name, one tensor's dims)")
    missing = unproved(compiled, together)
    for u in missing:  # past the samples nothing says the two read alike: the runtime refuses such a layer
        why = "Z3 found sizes where both apply" if u.status == "together" else u.why
        print(f"    {spec_line(lib, u.first, 'family')}: families {u.first} and {u.second} are not shown apart for "
              f"all sizes ({why}) nor shown to read a tensor both take alike: the runtime refuses a layer both "
              f"take; a guard one requires and the other refuses would tell them apart")
    for c in found:
        shapes = ", ".join(str(t.shape) for t in c.tensors)
        shown = ", ".join(f"{k}={v}" for k, v in c.sizes.items() if k in _read_by(compiled, c))
        print(f"    {spec_line(lib, c.first, 'family')}: families {c.first} and {c.second} both take a layer of "
              f"{c.blocks} block(s) with tensor {shapes}, at {shown}, and read it apart: {c.why}; a runtime name "
              f"must tell them apart (a guard one requires and the other refuses), or the first the runtime "
              f"tries reads the other's tensor in its own order")
    return 1 if found or missing else 0


def _read_by(compiled: dict, c) -> set:
    return {b.name for n in (c.first, c.second) for b in (compiled[n].bounds or ())} | {"tp", "pcp"}
