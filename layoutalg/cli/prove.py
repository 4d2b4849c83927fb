"""`layoutalg prove`: every obligation of every family, as a table; cached."""
from __future__ import annotations

import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

from ..verdicts import Verdict
from ..errors import LayoutalgError
from ..dsl.library import load, spec_files
from ..verify.prove.store import OBLIGATIONS, Row, cacheable, describe, proof_key, read as _read, write as _write


def _prove_one(args) -> tuple[str, list[dict], float, str, bool]:
    """(family, its rows, seconds, the proof key of the bytes read, whether its page conversions'
    record was kept here: in the worker, beside the rows it rests on, not after the whole table)."""
    from ..verify.prove.runner import Budgets, prove_family, to_json  # Z3 and sympy load only when something is proved
    paths, family, rlimit, guard_s, only, cache = args
    # the parent's cache folder, whatever the fork server's was when it started (a process of its
    # own: the setting dies with it): the rows are written there, and so is the record kept here
    os.environ["LAYOUTALG_CACHE"] = cache
    lib = load(paths)
    key = proof_key(lib, family, rlimit)  # of the bytes this worker read, which may be newer than the parent's
    t = time.perf_counter()
    data = to_json(prove_family(lib, family, Budgets.of(rlimit, guard_s), only=only))
    seconds = time.perf_counter() - t
    if only is not None or not _recordable(lib, family, data):
        return family, data, seconds, key, False
    from ..verify.conversions import record  # (it checks the files are still the bytes these rows are of)
    try:
        return family, data, seconds, key, record(lib, family, rlimit, table=data) is None
    except OSError:  # (a cache folder it cannot write: the parent tries again after the table, and says why)
        return family, data, seconds, key, False


def _cache_setting(use_cache: bool = True) -> str:
    """The `LAYOUTALG_CACHE` a worker sets first: this process's cache folder, or "off" (a worker
    is forked from a fork server that may have started under another setting)."""
    from ..compile.cache import cache_dir
    folder = cache_dir() if use_cache else None
    return str(folder) if folder is not None else "off"


def _fresh_processes(jobs: int) -> ProcessPoolExecutor:
    """Workers that each prove one family, starting from the same state.

    Z3's choices (which model, and near the budget even which verdict) depend on what
    the process solved before, so a worker reused across families would make a family's
    table depend on scheduling. A fork server with the prover preloaded starts every
    family from one state, cheaply; where there is none, a fresh interpreter does.
    """
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        ctx.set_forkserver_preload(["layoutalg.verify.prove.runner"])
    return ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, max_tasks_per_child=1)


def _progress(family: str, data: list[dict], seconds: float, k: int, n: int) -> None:
    bad = {s: sum(1 for r in data if r["status"] == s) for s in (Verdict.REFUTED, Verdict.UNKNOWN)}
    verdict = Verdict.REFUTED if bad[Verdict.REFUTED] else Verdict.UNKNOWN if bad[Verdict.UNKNOWN] else \
        Verdict.PROVED
    print(f"[{k}/{n}] {family}: {verdict} ({len(data)} rows, {seconds:.1f} s)", file=sys.stderr, flush=True)


def heaviest_first(lib, families: list[str]) -> list[str]:
    """`families` in the order to hand them to workers: the most case paths (over a family of
    pages' parts) first, a rough measure of a proof's length, so that the longest proofs do not
    start last and leave one worker busy alone at the end; ties in the order given."""
    from ..dsl.interpret import paths

    def size(family: str) -> int:
        try:
            return sum(len(paths(lib, part)) for part in lib.parts_of(family))
        except Exception:  # noqa: BLE001 - only an order: the prover says what it cannot read
            return 0
    return sorted(families, key=lambda f: -size(f))


def prove_paths(paths, rlimit: int | None = None, jobs: int = 1, use_cache: bool = True, out=None,
                guard_s: float | None = None, family: str | None = None, only=None) -> list:
    """Prove every family of `paths` (or `family`) and print the table; `only` (obligation
    names) asks those rows alone (`prove_family`), which are never read from or written to the
    cache (it holds whole tables)."""
    from ..verify.prove import GUARD_S
    from ..verify.prove import RLIMIT
    out = sys.stdout if out is None else out
    rlimit, guard_s = rlimit or RLIMIT, guard_s or GUARD_S
    lib = load(paths)
    if not lib.families:
        raise LayoutalgError(f"nothing to prove: no family in {', '.join(map(str, paths))} "
                             f"({len(lib.modules)} file(s), {len(lib.grids)} grid(s), {len(lib.layouts)} layout(s))")
    if family is not None and family not in lib.families:
        raise LayoutalgError(f"prove --family: no family {family!r} in {', '.join(map(str, paths))}; its families: "
                             f"{', '.join(lib.families)}")
    names = [family] if family is not None else list(lib.families)
    files = [str(f.resolve()) for f in spec_files(paths)]
    todo, rows, cached = [], {}, set()
    for fam in names:
        key = proof_key(lib, fam, rlimit)
        hit = _read(key) if use_cache and only is None else None
        if hit is not None:
            rows[fam] = hit
            cached.add(fam)
        else:
            todo.append((fam, key))
    if todo:
        from ..ir.family import check_layouts
        check_layouts(lib)
    args = [(files, fam, rlimit, guard_s, only, _cache_setting()) for fam in
            heaviest_first(lib, [fam for fam, _ in todo])]
    keys = dict(todo)

    recorded = set()

    def finish(result, k):
        fam, data, seconds, key, kept = result
        recorded.update([fam] if kept else [])
        rows[fam] = data
        _progress(fam, data, seconds, k, len(args))
        if key != keys[fam]:  # what the key covers changed under the run: these rows are of other bytes
            print(f"prove: {fam}: its spec files, or layoutalg's own modules, changed during the run; the rows "
                  f"shown are of the newer files and are not cached", file=sys.stderr)
        elif cacheable(data) and only is None:
            _write(key, data)

    if args:
        with _fresh_processes(min(jobs, len(args))) as pool:
            futures = [pool.submit(_prove_one, a) for a in args]
            for k, f in enumerate(as_completed(futures), 1):
                finish(f.result(), k)
    out_rows = [Row(**r) for fam in names for r in rows[fam]]
    _table(out_rows, cached, out)
    if only is None:  # (a conversion rests on three rows of the whole table: never on a part of one)
        _record_conversions(lib, [fam for fam in names if fam not in recorded], rows, rlimit)
    return out_rows


def _record_conversions(lib, names, rows: dict, rlimit: int) -> None:
    """Keep, for each family with a `sequence` index whose rows are proved for all sizes, the
    record its page conversions rest on at run time (`verify.conversions.record`, from the table)."""
    from ..verify.conversions import record
    for fam in names:
        if _recordable(lib, fam, rows[fam]):
            record(lib, fam, rlimit)


def _recordable(lib, fam: str, rows: list[dict]) -> bool:
    """Whether `fam` is a family of canonical pages with a `sequence` index whose table proves
    every row its page conversions rest on."""
    fdef = lib.family_def(fam)
    return fdef.page is None and fdef.sequence is not None and all(
        r["status"] == Verdict.PROVED for r in rows if r["obligation"] in ("sequence-order", "one-format",
                                                                         "digits-match-spec"))


def _table(rows: list, cached: set, out) -> None:
    print(f"{'spec':<22} {'family':<11} {'obligation':<21} {'result':<8} {'time':>7}  method", file=out)
    for r in rows:
        spec = os.path.relpath(r.spec) if os.path.isabs(r.spec) else r.spec
        t = "cached" if r.family in cached else f"{r.seconds:.2f}s"
        print(f"{spec:<22} {r.family:<11} {r.obligation:<21} {r.status:<8} {t:>7}  {r.method}", file=out)
        if r.detail and r.status != Verdict.PROVED:
            print(f"    {r.detail}", file=out)
    n = len(rows)
    sym = sum(1 for r in rows if r.status == Verdict.PROVED and "all sizes" in r.method)
    conf = sum(1 for r in rows if r.status == Verdict.PROVED and "configurations" in r.method)
    other = sum(1 for r in rows if r.status == Verdict.PROVED) - sym - conf
    bad = {s: sum(1 for r in rows if r.status == s) for s in (Verdict.REFUTED, Verdict.UNKNOWN)}
    part = sum(1 for r in rows if r.status == Verdict.PROVED and "see reshard-domain" in r.method)
    sym_text = f"{sym} proved for all sizes" + (f" ({part} of them only at the sizes where the plan's pieces "
                                                f"divide: see reshard-domain)" if part else "")
    print(f"\n{n} obligations: {sym_text}, {conf} proved on stated configurations, "
          f"{other} proved by the runtime's check with a witness, {bad[Verdict.REFUTED]} refuted, "
          f"{bad[Verdict.UNKNOWN]} unknown", file=out)


def _reshard_one(args) -> tuple[list[dict], list | str | None]:
    """(rows, the step files of its proof (`steps`: a proof for all sizes of both rows), or why
    it has none, or None where none were asked)."""
    from ..verify.prove.reshard import prove_all_sizes
    from ..verify.prove.reshard.at_sizes import recording
    from ..verify.prove.runner import Budget, to_json
    paths, family, x, y, rlimit, guard_s, cache, steps = args
    # this worker is a process of its own (`_fresh_processes`): the setting dies with it; the
    # parent's folder (or "off"), whatever the fork server's was when it started
    os.environ["LAYOUTALG_CACHE"] = cache
    lib = load(paths)
    if not steps:  # (recording builds each step's chains: only where they are written)
        return to_json(prove_all_sizes(lib, family, x, y, Budget(rlimit, guard_s))), None
    with recording() as asked:
        rows = prove_all_sizes(lib, family, x, y, Budget(rlimit, guard_s))
    from ..verify.prove.certificate_files import step_texts
    from ..verify.prove.store import RESHARD
    main = [r for r in rows if r.obligation in RESHARD]
    if not all(r.status == Verdict.PROVED and "all sizes" in r.method for r in main):
        return to_json(rows), "its rows are not proved for all sizes (" + \
            ", ".join(f"{r.obligation} {r.status}" for r in main) + ")"
    return to_json(rows), step_texts(lib, family, steps[0], steps[1], asked)


def prove_reshard(paths, family: str | None, store: str, load_: str, rlimit: int | None = None,
                  guard_s: float | None = None, jobs: int = 1, use_cache: bool = True, steps: list | None = None):
    """The direct plan from configuration `store` to `load` ('tp=2,dcp=1') of each family
    (or `family`), proved for all sizes (`all_sizes.prove_all_sizes`), each family in a fresh
    process as the library's proofs are (`_fresh_processes`): a verdict never depends on what
    the calling process solved before. The family's own rows a plan rests on (`one-format`,
    `sequence-order`) are taken from the proof cache unless `use_cache` is false. With a list
    `steps`, each family's step files (`certificate_files.step_texts`), or why it has none, are
    added to it as (family, obligation, files or why)."""
    from ..params import parse_config
    from ..verify.prove import GUARD_S
    from ..verify.prove import RLIMIT
    lib = load(paths)
    names = [family] if family else list(lib.families)
    if not names:
        raise LayoutalgError(f"nothing to prove: no family in {', '.join(map(str, paths))}")
    for n in names:
        if n not in lib.families:
            raise LayoutalgError(f"prove --reshard: no family {n!r}; the loaded ones: {', '.join(lib.families)}")
    x, y = parse_config(store, also=("block_size",)), parse_config(load_, also=("block_size",))
    files = [str(f.resolve()) for f in spec_files(paths)]
    args = [(files, n, x, y, rlimit or RLIMIT, guard_s or GUARD_S, _cache_setting(use_cache),
             None if steps is None else (store, load_)) for n in names]
    with _fresh_processes(max(1, min(jobs, len(args)))) as pool:
        done = list(pool.map(_reshard_one, args))
    if steps is not None:
        from ..verify.prove.certificate_files import pair_name
        steps += [(n, pair_name(store, load_), made) for n, (_, made) in zip(names, done)]
    return [Row(**r) for rows, _ in done for r in rows]


def _only(names, args):
    """The obligations `--obligation` names, each one of a library proof's (an error otherwise,
    and with `--reshard` or `--pipeline`, which prove rows of their own); None where none is named."""
    if not names:
        return None
    if getattr(args, "reshard", None) or getattr(args, "pipeline", False):
        raise LayoutalgError("prove: --obligation names rows of a library's proof; --reshard and --pipeline prove "
                             "rows of their own")
    unknown = [n for n in names if n not in OBLIGATIONS]
    if unknown:
        raise LayoutalgError(f"prove --obligation: no obligation {unknown[0]!r}; a library's: {', '.join(OBLIGATIONS)}")
    return frozenset(names)


def prove_command(args, out=None) -> int:
    out = sys.stdout if out is None else out  # (the stdout of this call, not of the first import)
    from ..resources import specs_dir
    paths = args.specs or [str(specs_dir())]
    t = time.perf_counter()
    certificates = getattr(args, "certificates", None)
    only = _only(getattr(args, "obligation", None), args)
    if certificates:  # before any proof, not after it
        from ..verify.prove.certificate_files import check_target
        check_target(certificates)
    if getattr(args, "pipeline", False):
        from ..verify.prove import GUARD_S
        from ..verify.prove import RLIMIT
        from ..verify.prove.pipeline import stages_row
        rows = [stages_row(args.rlimit or RLIMIT, args.timeout or GUARD_S)]
        _table(rows, set(), out)
        print(f"({time.perf_counter() - t:.1f} s)", file=out)
        if certificates and rows[0].status == Verdict.PROVED:
            from ..verify.prove.certificate_files import stages_text, write_steps
            write_steps([("pipeline", "stages-tile", stages_text())], certificates)
            print(f"certificates: 1 SMT-LIB file in {certificates}; re-check it with "
                  f"`layoutalg certify {certificates}`", file=out)
        return 0 if rows[0].status == Verdict.PROVED else 1
    if getattr(args, "reshard", None):
        made: list | None = [] if certificates else None
        rows = prove_reshard(paths, args.family, *args.reshard, args.rlimit, args.timeout, args.jobs,
                             not args.no_cache, made)
        print(f"direct plans from {args.reshard[0]} to {args.reshard[1]}, for all sizes:", file=out)
        _table(rows, set(), out)
        print(f"({time.perf_counter() - t:.1f} s)", file=out)
        if certificates:
            from ..verify.prove.certificate_files import write_steps
            from ..verify.prove.lemmas import SHARED
            index = write_steps(made, certificates)
            files = sum(int(what.split()[0]) for _, _, what in index if not what.startswith("none"))
            plans = [what for family, _, what in index if family != SHARED]
            none = sum(1 for what in plans if what.startswith("none"))
            print(f"certificates: {files} SMT-LIB files for {len(plans) - none} plans in {certificates}"
                  + (f"; {none} plans not proved for all sizes have none ({os.path.join(certificates, 'index.tsv')} "
                     f"says why)" if none else "") + f"; re-check them with `layoutalg certify {certificates}`",
                  file=out)
        print("\nobligations:\n" + describe(dict.fromkeys(r.obligation for r in rows)), file=out)
        return 1 if any(r.status != Verdict.PROVED for r in rows) else 0
    folder = getattr(args, "draw", None)
    if folder:
        from ..tools.draw import need_matplotlib
        need_matplotlib()  # before any proof: the pictures could not be drawn
    if folder and os.path.exists(folder) and not os.path.isdir(folder):  # say it before the proof, not after
        raise LayoutalgError(f"prove: --draw {folder}: not a folder (the pictures are files in it)")
    rows = prove_paths(paths, args.rlimit, args.jobs, not args.no_cache, out, args.timeout, args.family, only)
    print(f"({time.perf_counter() - t:.1f} s)", file=out)
    missing = sorted(n for n in only or () if not any(r.obligation == n for r in rows))
    if missing:  # a row asked of no family here: nothing was checked for it, which is no pass
        raise LayoutalgError(f"prove --obligation {missing[0]}: no family proved here has that row (a page of regions "
                             f"has the regions-tile rows, a family with a `sequence` claim sequence-order, one whose "
                             f"pages another configuration reads one-format); the table above holds the others")
    if getattr(args, "draw", None):
        _draw_refutations(paths, rows, args.draw, out)
    if certificates:
        from ..verify.prove.certificate_files import write
        from ..verify.prove.lemmas import SHARED
        index = write(load(paths), rows, certificates)
        files = sum(int(what.split()[0]) for _, _, what in index if not what.startswith("none"))
        none = sum(1 for _, _, what in index if what.startswith("none"))
        shared = sum(1 for family, _, _ in index if family == SHARED)
        print(f"certificates: {files} SMT-LIB files for {len(index) - none - shared} rows"
              + (f" and {shared} shared lemmas" if shared else "") + f" in {certificates}; {none} rows "
              f"proved outside SMT have none ({os.path.join(certificates, 'index.tsv')} says why); "
              f"re-check them with `layoutalg certify {certificates}`", file=out)
    print("\nobligations:\n" + describe(None if only is None else dict.fromkeys(r.obligation for r in rows)), file=out)
    return 1 if any(r.status != Verdict.PROVED for r in rows) else 0


def _draw_refutations(paths, rows, folder: str, out) -> None:
    """Each refuted row with a counterexample configuration, as a picture of who writes which
    bytes there; a row that cannot be drawn says why, and the verdicts stand as they are."""
    import os
    from ..tools.draw import canonical_names, draw, owners_of_reading
    from ..dsl.library import load
    lib = load(paths)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise LayoutalgError(f"prove: --draw {folder}: cannot make the folder: {e.strerror or e}") from None
    drawn = 0
    for r in rows:
        if r.status != Verdict.REFUTED or not r.witness:
            continue
        name = os.path.join(folder, f"{r.family}-{r.obligation}.png")
        page, _, region = r.family.rpartition(".")  # a region's row is drawn as its page, the region named
        family, what = (page, f"{page} (region '{region}')") if r.family not in lib.families and page in \
            lib.families else (r.family, r.family)
        try:
            sizes = ", ".join(f"{k}={v}" for k, v in r.witness.items())
            print(draw(owners_of_reading(lib, family, r.witness), name, f"{what} {r.obligation}: {sizes}",
                       names=canonical_names(lib, family, r.witness)), file=out)
            drawn += 1
        except Exception as e:  # noqa: BLE001 - a picture is a courtesy, never the verdict
            print(f"not drawn: {r.family} {r.obligation}: {e}", file=out)
    print(f"{drawn} counterexample(s) drawn into {folder}", file=out)
