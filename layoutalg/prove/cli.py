"""`layoutalg prove`: every obligation of every family, as a table; cached."""
from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from ..library import load, spec_files
from .store import Row, describe, proof_key, read as _read, write as _write


def _prove_one(args) -> tuple[str, list[dict], float]:
    from .runner import prove_family, to_json  # Z3 and sympy load only when something is proved
    paths, family, timeout = args
    lib = load(paths)
    t = time.perf_counter()
    return family, to_json(prove_family(lib, family, timeout)), time.perf_counter() - t


def prove_paths(paths, timeout: float = 5.0, jobs: int = 1, use_cache: bool = True, out=sys.stdout) -> list:
    lib = load(paths)
    files = [str(f.resolve()) for f in spec_files(paths)]
    todo, rows, cached = [], {}, set()
    for fam in lib.families:
        key = proof_key(lib, fam)
        hit = _read(key) if use_cache else None
        if hit is not None:
            rows[fam] = hit
            cached.add(fam)
        else:
            todo.append((fam, key))
    if todo:
        from ..family import check_layouts
        check_layouts(lib)
    args = [(files, fam, timeout) for fam, _ in todo]
    if jobs > 1 and len(args) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_prove_one, args))
    else:
        results = [_prove_one(a) for a in args]
    keys = dict(todo)
    for fam, data, _ in results:
        rows[fam] = data
        if not any(r["status"] == "unknown" for r in data):
            _write(keys[fam], data)
    out_rows = [Row(**r) for fam in lib.families for r in rows[fam]]
    _table(out_rows, cached, out)
    return out_rows


def _table(rows: list, cached: set, out) -> None:
    print(f"{'spec':<22} {'family':<11} {'obligation':<21} {'result':<8} {'time':>7}  method", file=out)
    for r in rows:
        spec = os.path.relpath(r.spec) if os.path.isabs(r.spec) else r.spec
        t = "cached" if r.family in cached else f"{r.seconds:.2f}s"
        print(f"{spec:<22} {r.family:<11} {r.obligation:<21} {r.status:<8} {t:>7}  {r.method}", file=out)
        if r.detail and r.status != "proved":
            print(f"    {r.detail}", file=out)
    n = len(rows)
    sym = sum(1 for r in rows if r.status == "proved" and "all sizes" in r.method)
    conf = sum(1 for r in rows if r.status == "proved" and "all sizes" not in r.method)
    bad = {s: sum(1 for r in rows if r.status == s) for s in ("refuted", "unknown")}
    print(f"\n{n} obligations: {sym} proved for all sizes, {conf} proved on enumerated configurations, "
          f"{bad['refuted']} refuted, {bad['unknown']} unknown", file=out)


def prove_command(args) -> int:
    from .._resources import specs_dir
    paths = args.specs or [str(specs_dir())]
    t = time.perf_counter()
    rows = prove_paths(paths, args.timeout, args.jobs, not args.no_cache)
    print(f"({time.perf_counter() - t:.1f} s)")
    print("\nobligations:\n" + describe())
    return 1 if any(r.status != "proved" for r in rows) else 0
