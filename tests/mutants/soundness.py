"""Hold the prover's verdicts against byte enumeration of what the runtime emits.

    python tests/mutants/soundness.py [--count 200] [--seed 1] [--pages | --grids]

Makes seeded random one-token mutants of the shipped families (a name, an operator or a
number changed in a layout, shard, canonical or require line; with `--grids`, in a statement
of the shared grids.lal the family imports; a dense box's implied offset is written out first,
so its strides are mutated too), keeps those that still
parse, resolve and compile, then for each one
- proves it (`prove_family`, full mode), and
- enumerates it: on every sample configuration where the compiled family applies, the
  runs the lowering emits are checked for exact tiling and byte for byte against the
  spec's direct reading (`check`'s two tests, without the runtime's certificate).
A mutant is *broken* when the enumeration finds a fault. The prover is *unsound* on a
mutant it proves (every row proved) that is broken: that count must be 0. The script
prints how many broken mutants were refuted, and exits 1 on any unsound verdict.
"""
from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SPECS = ROOT / "specs"
FAMILIES = ("split_nhd", "split_hnd", "packed_nhd", "packed_hnd", "mla", "opaque")
PAGES = ("quant_packed", "quant_split", "mamba2", "gdn")
"""Families of pages of regions (`--pages`): a mutant is broken where the runtime's page
certificate refuses it, its runs do not tile with the pads, or they differ from the spec's
direct reading of any region."""
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+|//|[-+*/%<>]")
_KEYWORDS = {"index", "offset", "element", "bytes", "tensor", "block", "local", "canonical", "shard", "require",
             "grid", "and", "or", "not", "family", "serves", "layout", "import", "order", "let", "before", "sequence",
             "case", "ranks", "world", "replica", "agnostic", "when", "fn", "use", "rules"}
FAMILY_LINES = r"\s+(index|offset|local|canonical|shard|require)\b"
GRID_LINES = r"\s+(require|let|ranks|world|fn|replica|case|agnostic)\b"


def explicit_offsets(text: str) -> str:
    """The spec with each dense box's implied offset (`index` without `offset`) written out,
    row-major as the language reads it, so a mutation can reach its strides."""
    lines, out = text.split("\n"), []
    for k, line in enumerate(lines):
        out.append(line)
        m = re.match(r"(\s+)index (.*)", line)
        if not m:
            continue
        indent, decls = m.group(1), m.group(2).partition("#")[0]
        rest = []
        for later in lines[k + 1:]:
            if later.strip() and not later.startswith(indent):
                break
            rest.append(later.strip())
        if any(r.startswith("offset") for r in rest if not r.startswith("#")):
            continue
        pairs = [d.split("<") for d in decls.split(",")]
        expr = pairs[0][0].strip()
        for name, extent in pairs[1:]:
            expr = f"({expr}) * ({extent.strip()}) + {name.strip()}"
        out.append(f"{indent}offset {expr}")
    return "\n".join(out)


def _block(lines: list, header: str) -> range:
    """The line numbers of the definition that starts with `header` (up to the next blank line)."""
    start = next((k for k, line in enumerate(lines) if line.startswith(header)), None)
    if start is None:
        return range(0)
    end = next((k for k in range(start + 1, len(lines)) if not lines[k].strip()), len(lines))
    return range(start, end)


def grid_lines(grids: str, family_text: str) -> set:
    """The lines of grids.lal a family reads: its grid and the rules that grid uses."""
    lines = grids.split("\n")
    name = re.search(r"^\s+grid (\w+)", family_text, re.M).group(1)
    own = _block(lines, f"grid {name}:")
    used = {m.group(1) for k in own for m in [re.match(r"\s+use (\w+)", lines[k])] if m}
    return set(own).union(*(_block(lines, f"rules {u}:") for u in used))


def mutate(text: str, rng: random.Random, lines_re: str = FAMILY_LINES, only=None) -> tuple[str, str] | None:
    """One random token edit on a line that carries meaning (of `only`, where given); None when
    the draw finds none."""
    lines = text.split("\n")
    body = [k for k, line in enumerate(lines) if re.match(lines_re, line) and (only is None or k in only)]
    k = rng.choice(body)
    code, _, comment = lines[k].partition("#")
    toks = [m for m in _TOKEN.finditer(code) if m.group() not in _KEYWORDS]
    if not toks:
        return None
    t = rng.choice(toks)
    word = t.group()
    names = sorted({m.group() for m in _TOKEN.finditer(code) if re.match(r"[A-Za-z_]", m.group())} - _KEYWORDS)
    if word.isdigit():
        new = rng.choice([str(int(word) + 1), str(max(0, int(word) - 1)), str(int(word) * 2)])
    elif word in ("+", "-", "*", "//", "/", "%"):
        new = rng.choice([op for op in ("+", "-", "*", "//", "%") if op != word])
    elif word in ("<", ">"):
        return None
    else:
        choice = rng.random()
        if choice < 0.5 and len(names) > 1:
            new = rng.choice([n for n in names if n != word])
        elif choice < 0.75:
            new = f"({word} + 1)"
        else:
            new = f"({word} * 2)"
    if new == word:
        return None
    lines[k] = code[:t.start()] + new + code[t.end():] + (("#" + comment) if comment else "")
    return "\n".join(lines), f"line {k + 1}: {word!r} -> {new!r}"


def enumerate_faults(lib, name) -> list[str]:
    """Faults of the runs the lowering emits, on the sample configurations where the family applies."""
    from layoutalg.verify.samples import configurations, fitted_instance
    from layoutalg.verify.check import tiling_errors
    from layoutalg.compile.codegen import compile_family
    from layoutalg.compile.compiled import GuardFailed
    from layoutalg.ir.family import resolve
    from layoutalg.dsl.interpret import Reading, byte_map
    from layoutalg.runtime.lower import lower_uncertified
    from layoutalg.algebra.ops import NotCompact
    cf = compile_family(resolve(lib, name))
    faults = []
    for sizes in configurations():
        try:
            inst, sizes = fitted_instance(cf, sizes)
        except (GuardFailed, ArithmeticError):
            continue
        if max(inst.local_page, inst.canonical_page) > 1 << 16:
            continue
        try:
            maps = lower_uncertified(inst)
        except (NotCompact, ValueError) as e:
            faults.append(f"{sizes}: not lowerable: {e}")
            continue
        errs = tiling_errors(maps)
        if errs:
            faults.append(f"{sizes}: {errs[0]}")
            continue
        try:
            reading = Reading(lib, name, sizes)
            for rank, m in enumerate(maps):
                got = {lo + b: co + b for r in m.runs for lo, co, n in r.triples() for b in range(n)}
                if got != byte_map(reading, rank):
                    faults.append(f"{sizes}: rank {rank} differs from the direct reading")
                    break
        except (ArithmeticError, LookupError) as e:
            faults.append(f"{sizes}: direct reading fails: {e}")
    return faults


def enumerate_page_faults(lib, name) -> list[str]:
    """`enumerate_faults` for a family of pages: `layoutalg check`'s enumeration (the runtime's page
    certificate, tiling with the pads, the direct reading of every region) on the samples of every
    name it reads, or on Z3's models of its guards where no sample applies. Nothing to check is a
    fault of its own kind, so a vacuous enumeration never counts as sound."""
    from layoutalg.verify.check import check_family
    from layoutalg.compile.codegen import compile_named
    rep = check_family(lib, compile_named(lib, name))
    if rep.certified == 0 and not rep.errors:
        return ["unchecked: no configuration applies"]
    return rep.errors


def judge(text: str, family: str, folder: Path) -> dict | None:
    """Prove and enumerate one mutant; None when it is not a well-formed spec."""
    from layoutalg.compile.codegen import compile_named
    from layoutalg.errors import LayoutalgError
    from layoutalg.ir.family import check_layouts
    from layoutalg.dsl.library import load
    from layoutalg.verify.prove.runner import prove_family
    path = folder / f"{family}.lal"
    path.write_text(text)
    try:
        lib = load([path])
        check_layouts(lib)
        compile_named(lib, family)
    except (LayoutalgError, RecursionError):
        return None
    rows = prove_family(lib, family)
    # one-box families: the uncertified runs on the built-in samples, and `check`'s enumeration, which also
    # samples the names the specs declare (pcp_replicas)
    faults = enumerate_page_faults(lib, family) if family in PAGES else \
        enumerate_faults(lib, family) + [f for f in enumerate_page_faults(lib, family) if not f.startswith("unchecked")]
    verdict = "proved" if all(r.status == "proved" for r in rows) else \
        "refuted" if any(r.status == "refuted" for r in rows) else "unknown"
    return {"verdict": verdict, "faults": faults, "rows": rows}


def mutants(count: int, seed: int, families=FAMILIES, grids: Path | None = None):
    """(family, description, text) for `count` seeded mutants, round robin over the families.
    With `grids` (a folder), the mutation is in grids.lal, written there, which the family imports."""
    rng = random.Random(seed)
    made = 0
    while made < count:
        family = families[made % len(families)]
        text = (SPECS / f"{family}.lal").read_text()
        if grids is not None:
            shared = (SPECS / "grids.lal").read_text()
            m = mutate(shared, rng, GRID_LINES, grid_lines(shared, text))
            if m is None:
                continue
            (grids / "grids.lal").write_text(m[0])
            text = re.sub(r'import "(\w+\.lal)"', lambda x: x.group(0) if x.group(1) == "grids.lal"
                          else f'import "{SPECS / x.group(1)}"', text)
            made += 1
            yield family, "grids.lal " + m[1], text
            continue
        text = re.sub(r'import "(\w+\.lal)"', lambda m: f'import "{SPECS / m.group(1)}"', explicit_offsets(text))
        m = mutate(text, rng)
        if m is None:
            continue
        made += 1
        yield family, m[1], m[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pages", action="store_true", help="mutate the families of pages of regions instead")
    ap.add_argument("--grids", action="store_true", help="mutate the shared grids.lal the families import instead")
    args = ap.parse_args(argv)
    tally = {"malformed": 0, "broken": 0, "refuted": 0, "unknown": 0, "proved": 0, "unsound": 0}
    with tempfile.TemporaryDirectory() as tmp:
        grid_families = tuple(f for f in FAMILIES if f != "opaque")  # the opaque grid is not in grids.lal's rules
        for family, what, text in mutants(args.count, args.seed, PAGES if args.pages else
                                          grid_families if args.grids else FAMILIES,
                                          Path(tmp) if args.grids else None):
            res = judge(text, family, Path(tmp))
            if res is None:
                tally["malformed"] += 1
                continue
            broken = bool(res["faults"])
            tally["broken"] += broken
            if broken:
                tally[res["verdict"]] += 1
            if broken and res["verdict"] == "proved":
                tally["unsound"] += 1
                print(f"UNSOUND {family} {what}: {res['faults'][0]}", flush=True)
            print(f"{family:<11} {what:<40} {'broken' if broken else 'sound':<7} {res['verdict']}", flush=True)
    print(f"\n{args.count} mutants: {tally['malformed']} malformed (rejected with a SpecError), "
          f"{tally['broken']} broken by enumeration, of which {tally['refuted']} refuted, {tally['unknown']} unknown, "
          f"{tally['proved']} proved (unsound: {tally['unsound']})")
    return 1 if tally["unsound"] else 0


if __name__ == "__main__":
    sys.exit(main())
