"""Which obligations are proved how, with counterexamples and a cache.

For each family and each path through its grid's cases, an obligation is tried
1. fully symbolic on small sizes (every size <= 8): a quick hunt for counterexamples;
2. fully symbolic over the declared domain (`params.DOMAIN`): unsat proves it for
   every size and every rank;
3. where Z3 answers unknown within the budget: with a symbolic rank on every
   enumerated configuration of that path, and the output says so.
The runs obligations are per configuration by nature (the runs are what the lowering
emits for a configuration). The structural certificate (`structural`) is reported
beside them; it must agree with Z3.
"""
from __future__ import annotations

import itertools
import os
import re
import time
from dataclasses import asdict

from .. import params
from ..check import instantiate
from ..compile import compile_family
from ..compiled import GuardFailed
from ..errors import SpecError
from ..family import resolve
from ..interpret import Reading, paths
from ..library import Library
from ..lower import TilingError, lower_uncertified, run_plan, certify as certify_instance
import z3

from .obligations import PER_CONFIGURATION, SYMBOLIC, Model, query, runs_query, value
from .store import Row
from .structural import certify

SMALL = {n: (lo, min(hi, 8)) for n, (lo, hi) in params.DOMAIN.items()}
CONFIG_DOMAIN = {
    "tp": (1, 2, 3, 4, 8), "pcp": (1, 2), "dcp": (1, 2, 4), "interleave": (1, 2, 4), "total_heads": (1, 2, 4, 8),
    "heads": (1, 2, 4), "block_size": (4, 8), "head_size": (2,), "dtype_bytes": (1, 2),
    "per_token_head_quant": (0,), "compress_ratio": (1,),
}
"""Configurations for the fallback and the runs obligations (page_size fitted to each)."""


def configurations(lib: Library, family: str, cf, limit: int = 48) -> dict[tuple, list[dict]]:
    """Enumerated configurations where the compiled family `cf` applies, grouped by case path."""
    out: dict[tuple, list[dict]] = {}
    seen = set()
    names = list(CONFIG_DOMAIN)
    for values in itertools.product(*(CONFIG_DOMAIN[n] for n in names)):
        sizes = dict(zip(names, values))
        try:
            inst, sizes = instantiate(cf, sizes)
        except GuardFailed:
            continue
        key = tuple(sorted(sizes.items()))
        if key in seen:
            continue
        seen.add(key)
        path = tuple(Reading(lib, family, sizes).taken)
        group = out.setdefault(path, [])
        if len(group) < limit:
            group.append(sizes)
    return out


def _where(lib: Library, family: str, name: str) -> str:
    f = lib.families[family]
    span = f.shard.span if f.shard else f.span
    if name in ("local-bijective", "canonical-bijective"):
        use = f.local if name.startswith("local") else f.canonical
        span = lib.layouts[use.call.fn].span if use.call.fn in lib.layouts else span
    if name == "writers-cover" and f.canonical:
        span = f.canonical.span
    return f"{os.path.relpath(span.file)}:{span.line}"


def _sizes_text(m: Model, model) -> str:
    text = "".join(mod.path and open(mod.path).read() for mod in m.lib.modules)
    used = [n for n in params.NAMES if re.search(rf"\b{n}\b", text)]
    return ", ".join(f"{n}={value(model, m.sizes[n])}" for n in used)


def explain(lib: Library, family: str, name: str, m: Model, model, w: dict) -> str:
    """A counterexample a person can act on, in the spec's own names."""
    where, sizes = _where(lib, family, name), _sizes_text(m, model)

    def idx(x):
        return ", ".join(f"{n}={value(model, v)}" for n, v in x.items())

    def rank(d):
        return value(model, m.rank_of(d))

    if name in ("local-bijective", "canonical-bijective"):
        ldef, bound = m.r.layout(w["role"])
        i, j = w["i"], w["j"]
        oi = value(model, m.r.expr(ldef.offset, {**bound, **i}))
        if z3.is_true(model.eval(w["clash"], model_completion=True)):
            return (f"{where}: the {w['role']} layout sends ({idx(i)}) and ({idx(j)}) both to element {oi}, "
                    f"with {sizes}")
        return (f"{where}: the {w['role']} layout sends ({idx(i)}) to element {oi}, outside its "
                f"{value(model, w['size'])} elements, with {sizes}")
    if name == "shard-in-range":
        c = {n: value(model, v) for n, v in w["c"].items()}
        return (f"{where}: rank {rank(w['d'])} sends local ({idx(w['i'])}) to canonical "
                f"({', '.join(f'{n}={v}' for n, v in c.items())}), outside the canonical box, with {sizes}")
    if name == "shard-injective":
        return (f"{where}: rank {rank(w['d'])} sends local ({idx(w['i'])}) and ({idx(w['j'])}) to the same "
                f"canonical index, with {sizes}")
    if name == "writers-disjoint":
        d, e = w["d"], w["e"]
        c = m.r.shard(w["i"], d)
        byte = value(model, m.r.offset("canonical", c))
        block = 0
        rext = dict((n, value(model, x)) for n, x in m.r.rank_extents())
        for n in m.r.replicas:
            block = block * rext[n] + value(model, d[n])
        return (f"{where}: ranks {rank(d)} and {rank(e)} both write canonical byte {byte} of block {block} "
                f"({', '.join(f'{n}={value(model, v)}' for n, v in c.items())}) with {sizes}")
    if name == "writers-cover":
        vals = {k: value(model, v) for k, v in w.items()}
        return (f"{where}: {vals['world']} ranks in {vals['writers']} writer classes store "
                f"{vals['world'] // max(1, vals['writers'])} x {vals['local']} bytes into a {vals['canon']}-byte "
                f"canonical page, with {sizes}" + _gap_text(lib, family, m, model))
    if name == "single-rank-identity":
        return f"{where}: on a single rank local ({idx(w['i'])}) moves to another canonical byte, with {sizes}"
    if name == "runs-match-spec":
        spec_byte = value(model, m.canonical_byte(w["i"], w["d"]) + w["b"])
        return (f"{where}: rank {rank(w['d'])} copies local byte {value(model, w['x'])} to canonical byte "
                f"{value(model, w['claimed'])}, but the spec puts it (local {idx(w['i'])}) at canonical byte "
                f"{spec_byte}, with {sizes}")
    if name == "runs-cover-local":
        return f"{where}: the runs cover some local byte twice or not at all, with {sizes}"
    if name == "digits-match-spec":
        vals = {k: value(model, w[k]) for k in ("local", "want_local", "canon", "want_canon")}
        return (f"{where}: on rank {rank(w['d'])}, local ({idx(w['i'])}) is at local byte {vals['local']} and "
                f"canonical byte {vals['canon']} by the digit table, but at {vals['want_local']} and "
                f"{vals['want_canon']} by the spec, with {sizes}")
    return f"{where}: counterexample with {sizes}"


def _gap_text(lib, family, m, model) -> str:
    """Name the first canonical bytes no writer stores, at the counterexample's sizes."""
    try:
        sizes = {n: value(model, m.sizes[n]) for n in params.NAMES}
        maps = lower_uncertified(compile_family(resolve(lib, family)).evaluate(sizes))
    except Exception:  # noqa: BLE001 - the gap is a courtesy; the refutation stands without it
        return ""
    from ..check import tiling_errors
    errs = tiling_errors(maps)
    return f" ({errs[0]})" if errs else ""


def prove_obligation(lib: Library, family: str, name: str, by_path: dict, timeout: float,
                     quick: bool = False, fam=None) -> Row:
    t0 = time.perf_counter()
    spec = lib.families[family].span.file
    methods, proved_configs, unknown = [], [], []
    all_paths = paths(lib, family)
    if name == "digits-match-spec" and fam is None:
        return Row(spec, family, name, "unknown", "not in normal form", 0.0)
    for k, path in enumerate(all_paths):
        extra = (fam.variants[k], fam.atoms) if name == "digits-match-spec" else ()
        # 1. small sizes: hunt for a counterexample; 2. the whole domain: prove it
        # quick mode (counterexample hunting) gives the small sizes the whole budget
        for bounds, budget in ((SMALL, timeout if quick else min(timeout, 1.0)), (None, timeout)):
            if quick and bounds is None:
                break
            m = Model(lib, family, path, bounds=bounds)
            v, w = query(m, name, *extra)
            status, model = m.solve(v, budget, seeds=1 if bounds is SMALL else 3)
            if status == "sat":
                return Row(spec, family, name, "refuted", "symbolic sizes, symbolic rank",
                           time.perf_counter() - t0, explain(lib, family, name, m, model, w))
            if status == "unsat" and bounds is None:
                methods.append("symbolic")
                break
        else:
            # 3. fall back: symbolic rank on each enumerated configuration of this path
            configs = by_path.get(path, [])
            for sizes in configs:
                m = Model(lib, family, path, sizes=sizes)
                v, w = query(m, name, *extra)
                status, model = m.solve(v, timeout)
                if status == "sat":
                    return Row(spec, family, name, "refuted", "symbolic rank, one configuration",
                               time.perf_counter() - t0, explain(lib, family, name, m, model, w))
                if status == "unknown":
                    unknown.append(sizes)
                else:
                    proved_configs.append(sizes)
            methods.append(f"{len(configs)} configurations")
    elapsed = time.perf_counter() - t0
    if unknown:
        return Row(spec, family, name, "unknown", f"timeout on {len(unknown)} configuration(s)", elapsed)
    if quick:  # quick mode only hunts counterexamples: finding none proves nothing
        return Row(spec, family, name, "unknown", "quick mode: no counterexample on small sizes", elapsed)
    n_paths = len(methods)
    sym = methods.count("symbolic")
    if sym == n_paths:
        return Row(spec, family, name, "proved", "symbolic: all sizes, all ranks", elapsed)
    return Row(spec, family, name, "proved",
               f"symbolic in {sym} of {n_paths} cases; symbolic rank on {len(proved_configs)} configurations "
               f"for the rest", elapsed, configurations=proved_configs)


def prove_runs(lib: Library, family: str, name: str, by_path: dict, timeout: float, cf) -> Row:
    t0 = time.perf_counter()
    spec = lib.families[family].span.file
    n, proved = 0, []
    for path, configs in by_path.items():
        for sizes in configs:
            inst = cf.evaluate(sizes)
            try:
                plan = run_plan(certify_instance(inst))
            except TilingError as e:
                text = ", ".join(f"{k}={v}" for k, v in sizes.items())
                return Row(spec, family, name, "refuted", "lowering certificate, one configuration",
                           time.perf_counter() - t0, f"{_where(lib, family, name)}: {e}, with {text}")
            m = Model(lib, family, path, sizes=sizes)
            v, w = runs_query(m, name, inst, *plan)
            status, model = m.solve(v, timeout)
            if status == "sat":
                return Row(spec, family, name, "refuted", "symbolic rank, one configuration",
                           time.perf_counter() - t0, explain(lib, family, name, m, model, w))
            if status == "unknown":
                return Row(spec, family, name, "unknown", "timeout", time.perf_counter() - t0)
            n += 1
            proved.append(sizes)
    return Row(spec, family, name, "proved", f"symbolic rank on {n} configurations", time.perf_counter() - t0,
               configurations=proved)


def prove_family(lib: Library, family: str, timeout: float = 5.0, quick: bool = False) -> list[Row]:
    """Every obligation of one family, plus its structural certificate.

    `quick` hunts counterexamples only (small sizes, a few configurations) and stops at
    the first refutation: what the mutation tests need.
    """
    rows = []
    t0 = time.perf_counter()
    try:
        fam = resolve(lib, family)
    except SpecError as e:  # the algebra cannot take it; Z3 reads the spec directly all the same
        fam = None
        rows.append(Row(lib.families[family].span.file, family, "structure", "unknown",
                        "stride chains (sympy): all sizes", time.perf_counter() - t0,
                        f"not in normal form: {e.message}"))
    cf = compile_family(fam) if fam is not None else None
    if fam is not None and not quick:
        certs = [certify(fam, v) for v in fam.variants]
        bad = [c.detail for c in certs if c.status != "proved"]
        rows.append(Row(fam.path, family, "structure", "unknown" if bad else "proved",
                        "stride chains (sympy): all sizes", time.perf_counter() - t0, "; ".join(bad)))
    by_path = None
    for name in SYMBOLIC:
        if by_path is None and not quick:
            by_path = configurations(lib, family, cf, 48) if fam is not None else {}
        rows.append(prove_obligation(lib, family, name, by_path or {}, timeout, quick, fam))
        if quick and rows[-1].status == "refuted":
            return rows
    if by_path is None:
        by_path = configurations(lib, family, cf, 6 if quick else 48) if fam is not None else {}
    for name in PER_CONFIGURATION:
        if fam is None:
            rows.append(Row(lib.families[family].span.file, family, name, "unknown", "not lowered", 0.0))
            continue
        rows.append(prove_runs(lib, family, name, by_path, timeout, cf))
        if quick and rows[-1].status == "refuted":
            return rows
    return rows


def to_json(rows: list[Row]) -> list[dict]:
    return [asdict(r) for r in rows]


