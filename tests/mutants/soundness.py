"""Hold the prover's verdicts against byte enumeration of what the runtime emits.

    python tests/mutants/soundness.py [--count 200] [--seed 1]

Makes seeded random one-token mutants of the shipped families (a name, an operator or a
number changed in a layout, shard, canonical or require line), keeps those that still
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
             "grid", "and", "or", "not", "family", "serves", "layout", "import", "order", "let"}


def mutate(text: str, rng: random.Random) -> tuple[str, str] | None:
    """One random token edit on a line that carries meaning; None when the draw finds none."""
    lines = text.split("\n")
    body = [k for k, line in enumerate(lines) if re.match(r"\s+(index|offset|local|canonical|shard|require)\b", line)]
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
    from layoutalg.check import configurations, instantiate, tiling_errors
    from layoutalg.compile import compile_family
    from layoutalg.compiled import GuardFailed
    from layoutalg.family import resolve
    from layoutalg.interpret import Reading, byte_map
    from layoutalg.lower import lower_uncertified
    from layoutalg.algebra import NotCompact
    cf = compile_family(resolve(lib, name))
    faults = []
    for sizes in configurations():
        try:
            inst, sizes = instantiate(cf, sizes)
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
    from layoutalg.check import check_family
    from layoutalg.compile import compile_named
    rep = check_family(lib, compile_named(lib, name))
    if rep.certified == 0 and not rep.errors:
        return ["unchecked: no configuration applies"]
    return rep.errors


def judge(text: str, family: str, folder: Path) -> dict | None:
    """Prove and enumerate one mutant; None when it is not a well-formed spec."""
    from layoutalg.compile import compile_named
    from layoutalg.errors import LayoutalgError
    from layoutalg.family import check_layouts
    from layoutalg.library import load
    from layoutalg.prove.runner import prove_family
    path = folder / f"{family}.lal"
    path.write_text(text)
    try:
        lib = load([path])
        check_layouts(lib)
        compile_named(lib, family)
    except (LayoutalgError, RecursionError):
        return None
    rows = prove_family(lib, family)
    faults = enumerate_page_faults(lib, family) if family in PAGES else enumerate_faults(lib, family)
    verdict = "proved" if all(r.status == "proved" for r in rows) else \
        "refuted" if any(r.status == "refuted" for r in rows) else "unknown"
    return {"verdict": verdict, "faults": faults, "rows": rows}


def mutants(count: int, seed: int, families=FAMILIES):
    """(family, description, text) for `count` seeded mutants, round robin over the families."""
    rng = random.Random(seed)
    made = 0
    while made < count:
        family = families[made % len(families)]
        text = re.sub(r'import "(\w+\.lal)"', lambda m: f'import "{SPECS / m.group(1)}"',
                      (SPECS / f"{family}.lal").read_text())
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
    args = ap.parse_args(argv)
    tally = {"malformed": 0, "broken": 0, "refuted": 0, "unknown": 0, "proved": 0, "unsound": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for family, what, text in mutants(args.count, args.seed, PAGES if args.pages else FAMILIES):
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
