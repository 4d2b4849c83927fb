"""Lowering against the direct reading of the spec text, on random configurations.

The direct reading (`interpret`) shares no code with the normal form, the algebra or
the lowering, so a bug in any of them shows up here as a byte that lands elsewhere.
"""
from layoutalg.compile.compiled import GuardFailed
from layoutalg.dsl.interpret import Reading, byte_map
from layoutalg.dsl.library import load_default
from layoutalg.runtime.lower import lower
from layoutalg.runtime.derive import compiled_library


def test_random_configurations_agree_byte_for_byte(rng):
    lib, fams = load_default(), compiled_library()
    agreed = 0
    for _ in range(150):
        tp, total = rng.choice((1, 2, 3, 4, 8)), rng.choice((1, 2, 3, 4, 6, 8))
        bs, interleave = rng.choice((1, 2, 4, 6)), rng.choice((1, 2, 3))
        heads = max(1, total // tp)
        sizes = dict(tp=tp, pcp=rng.choice((1, 2, 3)), dcp=rng.choice((1, 2)), interleave=interleave,
                     total_heads=total, heads=heads, block_size=bs, head_size=rng.choice((1, 2, 3)),
                     dtype_bytes=rng.choice((1, 2)), per_token_head_quant=0, compress_ratio=1)
        if rng.random() < 0.5:  # else the grid's default: PCP deals tokens out
            sizes["pcp_replicas"] = rng.choice((0, 1))
        for name, cf in fams.items():
            if cf.serves not in ("attention", "mla", "fallback"):
                continue  # pages of regions: test_regions builds their pages the engine's way
            page = {"attention": 2 * bs * heads * sizes["head_size"] * sizes["dtype_bytes"],
                    "mla": bs * rng.choice((2, 3)), "fallback": rng.choice((1, 5))}[cf.serves]
            full = {**sizes, "page_size": page}
            try:
                maps = lower(cf.evaluate(full))
            except GuardFailed:
                continue
            reading = Reading(lib, name, full)
            assert all(ok for ok, _ in reading.guards)
            for rank, m in enumerate(maps):
                got = {lo + b: co + b for r in m.runs for lo, co, n in r.triples() for b in range(n)}
                assert got == byte_map(reading, rank), (name, full, rank)
            agreed += 1
    assert agreed > 200


def _first_path_in_order(lib, family, sizes):
    """The path the compiled code takes, as the spec reads it: each path in order, the first
    whose every case holds (None where none does)."""
    from layoutalg.dsl.interpret import paths
    for path in paths(lib, family):
        try:
            r = Reading(lib, family, sizes, path=path)
        except (ArithmeticError, LookupError):
            continue
        if all(ok for ok, _ in r.cases):
            return r
    return None


def _same_reading(a, b) -> bool:
    return (a.path, a.taken, a.cases, a.guards, a.ranks, a.replicas, a.world, a.agnostic, a.placements) == \
        (b.path, b.taken, b.cases, b.guards, b.ranks, b.replicas, b.world, b.agnostic, b.placements)


def test_a_reading_takes_the_first_path_whose_every_case_holds(rng):
    """A reading of numbers takes each group's first case that holds, and where that fails (a
    nested group with no case that holds) reads every path in order: both give the path read
    in order, for every shipped family at random configurations, and a spec whose first case
    holds but leads nowhere falls through to the next."""
    from layoutalg.verify.samples import sample_domain
    lib = load_default()
    domain = sample_domain(lib)
    compared, taken = 0, set()
    for _ in range(60):
        sizes = {n: rng.choice(values) for n, values in sorted(domain.items())}
        sizes["page_size"] = rng.choice((64, 256, 1024, 4096))
        for family in lib.families:
            for part in lib.parts_of(family):
                want = _first_path_in_order(lib, part, sizes)
                try:
                    got = Reading(lib, part, dict(sizes))
                except LookupError:
                    assert want is None, (part, sizes)
                    continue
                assert want is not None and _same_reading(got, want), (part, sizes, got.path, want.path)
                compared += 1
                taken.add((part, got.path))
    assert compared > 500 and len(taken) > 2 * len({p for p, _ in taken})  # (families reading several paths)


def test_a_case_whose_nested_cases_all_fail_falls_through(tmp_path):
    from layoutalg.dsl.library import load
    import shutil
    from conftest import ROOT
    shutil.copy(ROOT / "specs" / "grids.lal", tmp_path / "grids.lal")
    (tmp_path / "f.lal").write_text('''import "grids.lal"

layout bytes(P):
    index b < P
    offset b

family f serves fallback:
    grid private
    case block_size > 1:
        case head_size == 1:
            let p = page_size
        case head_size == 2:
            let p = page_size
    case block_size > 0:
        let p = page_size
    local bytes(p)
    canonical bytes(page_size * tp * pcp)
    shard (b) -> (rank * page_size + b)
''')
    lib = load([tmp_path / "f.lal"])
    sizes = dict(tp=1, pcp=1, dcp=1, interleave=1, pcp_replicas=0, block_size=4, head_size=3, page_size=8)
    r = Reading(lib, "f", dict(sizes))
    assert r.path == (1,) and _same_reading(r, _first_path_in_order(lib, "f", sizes))
    assert Reading(lib, "f", {**sizes, "head_size": 2}).path == (0, 1)


def test_a_let_read_before_and_after_a_fn_it_calls_is_redefined_reads_each(tmp_path):
    """A let read in a case's condition is read again after a `fn` it calls is redefined, as a
    path read alone reads it (the compiler refuses a let that calls a fn; the reading stays one
    whichever way it takes its path)."""
    from layoutalg.dsl.library import load
    import shutil
    from conftest import ROOT
    shutil.copy(ROOT / "specs" / "grids.lal", tmp_path / "grids.lal")
    (tmp_path / "fm.lal").write_text('''import "grids.lal"

fn f(a) = a * 2

layout bytes(P):
    index b < P
    offset b

grid g:
    world tp * pcp
    ranks pcp_rank < pcp, tp_rank < tp
    let x = f(1)
    case x == 5:
        require tp >= 1
    case tp >= 1:
        require tp >= 1
    fn f(a) = a * 3
    case x == 3:
        require tp >= 1
    case tp >= 1:
        require tp >= 1

family fm serves fallback:
    grid g
    local bytes(page_size)
    canonical bytes(page_size * tp * pcp)
    shard (b) -> (rank * page_size + b)
''')
    lib = load([tmp_path / "fm.lal"])
    sizes = dict(tp=1, pcp=1, dcp=1, interleave=1, pcp_replicas=0, page_size=8)
    r = Reading(lib, "fm", dict(sizes))
    assert r.path == (1, 0) and _same_reading(r, _first_path_in_order(lib, "fm", sizes))
