"""Direct reshard plans proved for all sizes (`prove.reshard.all_sizes`): built in the algebra from the
two digit tables, checked by Z3 against the spec's reading of both configurations; each
verdict shown to fail on a mutant plan, and the runtime's plans shown to be the proved ones."""
import os

import pytest

from layoutalg.tools.distributed import group_of
from layoutalg.errors import LayoutalgError
from layoutalg.dsl.library import load_default
from layoutalg.params import parse_config
from layoutalg.verify.prove.reshard import all_sizes as replan, symplan
from layoutalg.verify.prove.runner import Budgets
from layoutalg.plans.reshard import direct_plans

from test_cli import run


@pytest.fixture(scope="module")
def lib():
    return load_default()


def _rows(lib, family, store, load, edit=None):
    rows = replan.prove_all_sizes(lib, family, parse_config(store), parse_config(load), Budgets.of().full, edit)
    return {r.obligation: r for r in rows}


@pytest.mark.parametrize("family, store, load", [
    ("split_hnd", "tp=2", "tp=1"),                          # two producers into one consumer
    ("split_nhd", "tp=2,dcp=2,interleave=2", "tp=2,dcp=2"),  # GQA replicas, tokens dealt in pairs then one by one
])
def test_direct_plans_are_proved_for_all_sizes(lib, family, store, load):
    """A slice: every family and pair of one format, `python tests/reshard_matrix.py --all-sizes`."""
    rows = _rows(lib, family, store, load)
    for r in rows.values():
        assert r.status == "proved", (r.obligation, r.detail)
        assert r.method.startswith("all sizes at this configuration pair")


def _first_run(edit_run):
    def edit(plans):
        p = plans[0]
        return (p._replace(runs=edit_run(p.runs)),) + plans[1:]
    return edit


def test_a_plan_reading_the_wrong_producer_is_refuted(lib):
    rows = _rows(lib, "split_nhd", "tp=2", "tp=1", _first_run(lambda rs: (rs[0]._replace(producer=1 - rs[0].producer),)
                                                               + rs[1:]))
    assert rows["reshard-match"].status == "refuted"
    assert "another canonical byte" in rows["reshard-match"].detail and "head_size=" in rows["reshard-match"].detail
    assert rows["reshard-cover"].status == "proved"  # every byte still written once


def test_a_plan_reading_a_producer_outside_the_group_is_refuted(lib):
    rows = _rows(lib, "split_nhd", "tp=2", "tp=1", _first_run(lambda rs: (rs[0]._replace(producer=2),) + rs[1:]))
    assert rows["reshard-cover"].status == rows["reshard-match"].status == "refuted"
    assert "outside the group" in rows["reshard-cover"].detail


def test_a_plan_writing_a_run_twice_or_missing_one_is_refuted(lib):
    twice = _rows(lib, "split_hnd", "tp=2", "tp=1", _first_run(lambda rs: rs[:1] * len(rs)))  # as many bytes
    assert twice["reshard-cover"].status == "refuted" and "twice" in twice["reshard-cover"].detail
    assert twice["reshard-match"].status == "proved"  # what it writes, it reads from the right place
    short = _rows(lib, "split_hnd", "tp=2", "tp=1", _first_run(lambda rs: rs[1:]))
    assert short["reshard-cover"].status == "refuted" and "fewer or more bytes" in short["reshard-cover"].detail


def test_a_plan_whose_bytes_are_not_what_it_says_is_never_proved(lib):
    rows = _rows(lib, "split_nhd", "tp=1", "tp=2", _first_run(lambda rs: (rs[0]._replace(src=rs[0].src + 1),)
                                                               + rs[1:]))
    assert {r.status for r in rows.values()} == {"unknown"}
    assert "not shown to be the spec's" in rows["reshard-match"].detail


@pytest.mark.parametrize("family, store, load, why", [
    ("opaque", "tp=1", "tp=2", "format id"),
    ("split_nhd", "tp=2,dcp=2", "tp=3,dcp=3", "no case of the family applies at both"),  # 2 pages are no 3
    ("split_nhd", "tp=2", "tp=2,dcp=4", "the load configuration (tp=2,pcp=1,dcp=4,interleave=1,pcp_replicas=0) "
                                        "is served by no case of the family at any size"),  # dcp beyond tp: no grid
])
def test_pairs_with_no_plan_for_all_sizes_are_unknown(lib, family, store, load, why):
    rows = _rows(lib, family, store, load)
    assert {r.status for r in rows.values()} == {"unknown"}
    assert why in rows["reshard-cover"].method + rows["reshard-cover"].detail


CROSS = [
    ("split_nhd", "tp=2", "tp=2,dcp=2", "block_size % 2 == 0; (block_size - 1) % 2 == 0"),  # small producers
    ("mla", "tp=4,dcp=2,interleave=2", "tp=2", "block_size % 4 == 0; (block_size - 2) % 4 == 0"),  # small consumers
    ("split_hnd", "tp=2", "tp=2,dcp=2,interleave=16", "(block_size - 16) % 32 == 0"),  # interleave = block_size
    ("split_nhd", "tp=2,pcp=2", "tp=2,pcp=2,pcp_replicas=1", "(block_size - 1) % 2 == 0"),  # PCP shards -> replicas
    ("split_nhd", "tp=4", "tp=4,dcp=4,interleave=2", "block_size % 8 == 0; (block_size - 2) % 8 == 0; "
                                                     "(block_size - 4) % 8 == 0; (block_size - 6) % 8 == 0"),  # k = 4
]
"""Pairs across another cp; the suite proves the first three (20 s more for the last two), and
`LAYOUTALG_FULL=1` all of them."""


@pytest.fixture(scope="module")
def small_producers(lib):
    """The unedited plans of CROSS[0] (small producers, two residue cases), proved once for the
    tests that read them (the cross-cp proof and the CLI table's summary of it)."""
    return _rows(lib, *CROSS[0][:3])


@pytest.mark.parametrize("family, store, load, cases", CROSS if os.environ.get("LAYOUTALG_FULL") == "1" else CROSS[:3])
def test_direct_plans_across_another_cp_are_proved_for_every_size(lib, small_producers, family, store, load, cases):
    """Pages of another cp: the small side's ranks are k virtual ranks each, its digits moved
    onto the big page. Where a rank's chunks of tokens need not divide evenly among the k
    small pages, the plan is built once per residue (a `Transpose` block), each on its
    domain, and together they cover every size: no `reshard-domain` row is left."""
    rows = small_producers if (family, store, load) == CROSS[0][:3] else _rows(lib, family, store, load)
    assert replan.DOMAIN_ROW not in rows
    for n in replan.RESHARD:
        assert rows[n].status == "proved", (n, rows[n].detail)
        assert "across another cp" in rows[n].method and "see reshard-domain" not in rows[n].method
        assert "by cases of how a rank's chunks of tokens fall into the small pages" in rows[n].method
        for case in cases.split("; "):
            assert case in rows[n].method


def _thirds(plans):
    """A mutant whose every case holds only where 3 divides block_size too."""
    import sympy
    return tuple(p._replace(domain=p.domain + ((sympy.Symbol("block_size", integer=True, positive=True), 3),))
                 for p in plans)


@pytest.fixture(scope="module")
def thirds_rows(lib):
    """The rows of the `_thirds` mutant of CROSS[0]'s pair, proved once for the two tests reading them."""
    return replan.prove_all_sizes(lib, "split_nhd", parse_config("tp=2"), parse_config("tp=2,dcp=2"),
                                  Budgets.of().full, _thirds)


def test_sizes_no_case_covers_are_said_never_proved(thirds_rows):
    """A plan whose every case holds only where 3 divides block_size too: the rest of the
    sizes are the `reshard-domain` row, unknown, with an example outside."""
    rows = {r.obligation: r for r in thirds_rows}
    for n in replan.RESHARD:
        assert rows[n].status == "proved", (n, rows[n].detail)
        assert "see reshard-domain" in rows[n].method
    domain = rows[replan.DOMAIN_ROW]
    assert domain.status == "unknown" and "block_size % 3 == 0" in domain.detail
    assert "block_size=" in domain.detail.split("; not at ", 1)[1]  # an example outside, with its block size


def _odd_case(edit_run):
    """A mutant of the plans of the residue case where a rank's chunks do not divide evenly
    (its domain reads `block_size - r`), the other case left whole."""
    def edit(plans):
        if not any(a.is_Add for p in plans for a, _ in p.domain):
            return plans
        return (plans[0]._replace(runs=edit_run(plans[0].runs)),) + plans[1:]
    return edit


@pytest.mark.parametrize("store, load", [("tp=2", "tp=2,dcp=2,interleave=4"), ("tp=2,dcp=2,interleave=4", "tp=2")])
def test_a_residue_case_with_a_piece_one_step_short_is_refuted(lib, store, load):
    """The case n = 2q + 1 (block_size 4, 12, 20, ... at interleave 4): a piece of q + 1
    steps cut to q leaves a consumer byte unwritten."""
    def short(runs):
        r = next(r for r in runs if any(str(e).endswith("+ 1") for e, _, _ in r.modes))
        k = runs.index(r)
        return runs[:k] + (r._replace(modes=tuple((e - 1 if str(e).endswith("+ 1") else e, a, b)
                                                   for e, a, b in r.modes)),) + runs[k + 1:]
    rows = _rows(lib, "split_nhd", store, load, _odd_case(short))
    assert rows["reshard-cover"].status == "refuted", rows["reshard-cover"].detail
    assert "fewer or more bytes" in rows["reshard-cover"].detail


def test_a_residue_case_reading_the_next_chunk_is_refuted(lib):
    """The case n = 2q + 1: a piece reading its producer one chunk of tokens later copies
    tokens of another place (the offsets of the odd case are its own, not the even case's)."""
    def later(runs):
        r = runs[-1]
        token = r.modes[-1][1] / 8  # the piece steps two chunks of 4 of the producer's tokens at a time
        at = tuple((i, b + 4 if i == "t" else b, w) for i, b, w in r.src_at)  # its reading moved along
        return runs[:-1] + (r._replace(src=r.src + 4 * token, src_at=at),)
    rows = _rows(lib, "split_nhd", "tp=2", "tp=2,dcp=2,interleave=4", _odd_case(later))
    assert rows["reshard-match"].status == "refuted", rows["reshard-match"].detail
    assert rows["reshard-cover"].status == "proved"


def _odd_plans(edit_plans):
    """A mutant of the whole residue case where a rank's chunks do not divide evenly."""
    return lambda plans: edit_plans(plans) if any(a.is_Add for p in plans for a, _ in p.domain) else plans


def _shifted_q(plan):
    """`plan` with its residue quotient q = (n - rho) / k read one larger, (n - rho + k) / k."""
    from layoutalg.ir.sizes import Atom
    q = next(s for s in plan.atoms if s.name.startswith("block"))
    a = plan.atoms[q]
    return plan._replace(atoms={**plan.atoms, q: Atom(q, a.op, a.num + a.den, a.den)})


@pytest.mark.parametrize("which", ["first", "last"])
def test_plans_of_one_case_reading_q_differently_are_never_proved(lib, which):
    """Z3 reads one table of derived sizes for a whole case. Plans that define q differently,
    and copy nothing at all, once came back proved: the last plan's q made the case's
    exactness fact contradict its domain, and every query was vacuously unsat. Now the
    case is not checked, and says why."""
    def edit(plans):
        plans = tuple(p._replace(runs=()) for p in plans)
        i = 0 if which == "first" else len(plans) - 1
        return plans[:i] + (_shifted_q(plans[i]),) + plans[i + 1:]
    rows = _rows(lib, "split_nhd", "tp=2", "tp=2,dcp=2,interleave=4", _odd_plans(edit))
    for n in replan.RESHARD:
        assert rows[n].status == "unknown", (n, rows[n].status, rows[n].detail)
        assert "defines block0.q as" in rows[n].detail


def test_an_atom_one_plan_defines_and_another_reads_as_a_size_is_never_proved(lib):
    """Consumer 0's plan defines a derived size named `block_size` (a symbol of its own,
    `block_size + 1`); consumer 1's plan reads it in one extent, where the runtime, finding
    no definition in that plan, reads the size: Z3 and the runtime would read two plans."""
    import sympy

    from layoutalg.ir.sizes import Atom

    def edit(plans):
        q = next(s for s in plans[0].atoms if s.name == "block0.q")
        size = next(s for s in plans[0].atoms[q].num.free_symbols if s.name == "block_size")
        plain = sympy.Symbol("block_size")
        p0 = plans[0]._replace(atoms={**plans[0].atoms, plain: Atom(plain, "/", size + 1, sympy.Integer(1))})
        r = plans[1].runs[0]
        r = r._replace(modes=tuple(tuple(sympy.sympify(x).xreplace({q: q + plain - size - 1}) for x in m)
                                   for m in r.modes))
        return (p0, plans[1]._replace(runs=(r,) + plans[1].runs[1:])) + plans[2:]
    rows = _rows(lib, "split_nhd", "tp=2", "tp=2,dcp=2,interleave=4", _odd_plans(edit))
    for n in replan.RESHARD:
        assert rows[n].status == "unknown" and "defines block_size as nothing" in rows[n].detail, rows[n].detail


def test_a_domain_reading_a_derived_size_is_never_proved(lib):
    """A case domain written with an exact quotient, `(8 * (block_size / 8) - block_size) % 8`:
    Z3 would read the quotient floored outside the domain it decides, the runtime exactly
    (always 0: every size), so the two would take the case at different sizes."""
    import sympy

    from layoutalg.ir.sizes import Atom

    def edit(plans):
        if any(a.is_Add for p in plans for a, _ in p.domain):
            return plans
        q = next(s for s in plans[0].atoms if s.name == "block0.q")
        a = plans[0].atoms[q]
        size = next(s for s in a.num.free_symbols if s.name == "block_size")
        r = sympy.Symbol("mutant.r", integer=True)
        atoms = {**plans[0].atoms, q: Atom(q, "//", a.num, a.den), r: Atom(r, "/", size, a.den)}
        return tuple(p._replace(atoms=atoms, domain=((a.den * r - size, a.den),)) for p in plans)
    rows = _rows(lib, "split_nhd", "tp=2", "tp=2,dcp=2,interleave=4", edit)
    for n in replan.RESHARD:
        assert rows[n].status == "unknown" and "whose mutant.r is no size" in rows[n].detail, rows[n].detail


def test_a_case_whose_every_plan_reads_q_one_larger_is_not_proved(lib):
    """The same shifted q in every plan (one consistent reading, a wrong one) is checked, and fails."""
    rows = _rows(lib, "split_nhd", "tp=2", "tp=2,dcp=2,interleave=4",
                 _odd_plans(lambda plans: tuple(_shifted_q(p) for p in plans)))
    for n in replan.RESHARD:
        assert rows[n].status != "proved", (n, rows[n].detail)


def test_a_plan_across_another_cp_reading_the_wrong_part_is_refuted(lib):
    """Small producers (tp=2 under tp=2, dcp=2): producer v is rank v % 2's part v // 2 of the big
    page; reading the other part's rank is the right rank at the wrong tokens."""
    rows = _rows(lib, "split_nhd", "tp=2", "tp=2,dcp=2", _first_run(lambda rs: (rs[0]._replace(
        producer=(rs[0].producer + 2) % 4),) + rs[1:]))
    assert rows["reshard-match"].status == "refuted", rows["reshard-match"].detail
    assert rows["reshard-cover"].status == "proved"


def test_small_consumers_given_each_others_parts_are_refuted(lib):
    """Small consumers: plan j * world + s fills part j of consumer s; two parts swapped."""
    def swap(plans):
        w = len(plans) // 2
        return tuple(p._replace(consumer=(p.consumer + w) % len(plans)) for p in plans)
    rows = _rows(lib, "mla", "tp=4,dcp=2", "tp=2", swap)
    assert rows["reshard-match"].status == "refuted", rows["reshard-match"].detail
    assert rows["reshard-cover"].status == "proved"


def _blocks(lib, family, store, load, edit=None):
    rows = replan.prove_all_sizes(lib, family, parse_config(store, also=("block_size",)),
                                  parse_config(load, also=("block_size",)), Budgets.of().full, edit)
    return {r.obligation: r for r in rows}


@pytest.mark.parametrize("store, load, k", [
    ("tp=2,block_size=64", "tp=2,block_size=16", 4),  # big producer pages, each read as 4 small ones
    ("tp=2,block_size=8", "tp=2,block_size=24", 3),   # small producer pages, 3 joined into a big one
])
def test_direct_plans_across_block_sizes_are_proved_for_every_block_size(lib, store, load, k):
    """Pages of B and k * B tokens are parts of one another along the sequence: proved with B
    symbolic, the numbers given fixing only k."""
    rows = _blocks(lib, "split_nhd", store, load)
    for r in rows.values():
        assert r.status == "proved", (r.obligation, r.detail)
        assert f"read as B and {k} * B, for every B" in r.method


def test_a_plan_across_block_sizes_reading_the_wrong_part_is_refuted(lib):
    """Small producers (block size 8 under 16): producer v is rank v % 2's page v // 2 of the
    big one; reading the other page's rank reads the right rank at the wrong tokens."""
    rows = _blocks(lib, "split_nhd", "tp=2,block_size=8", "tp=2,block_size=16", _first_run(
        lambda rs: (rs[0]._replace(producer=(rs[0].producer + 2) % 4),) + rs[1:]))
    assert rows["reshard-match"].status == "refuted", rows["reshard-match"].detail
    assert "store block_size=" in rows["reshard-match"].detail and "load block_size=" in rows["reshard-match"].detail


@pytest.mark.parametrize("family, store, load", [
    ("split_nhd", "tp=2,block_size=16", "tp=4,block_size=64"),   # four small producer pages a consumer page
    ("split_hnd", "tp=4,block_size=48", "tp=2,block_size=16"),   # a big producer page read as three
])
def test_the_runtime_plan_across_block_sizes_is_the_proved_plan(lib, family, store, load):
    from layoutalg.verify.conversions import conversion
    from layoutalg.plans.reshard import cross_plans
    cs, cl = parse_config(store, also=("block_size",)), parse_config(load, also=("block_size",))
    bs, bl = cs.pop("block_size"), cl.pop("block_size")
    x, y = group_of(family, cs, 4, bs, 8, "bf16", 2), group_of(family, cl, 4, bl, 8, "bf16", 2)
    big, small = (x, y) if bs > bl else (y, x)
    cross = cross_plans(x.mappings, y.mappings, conversion(lib, family, big.sizes, small.sizes))
    runtime = [_runtime_triples(p) for part in cross.parts for p in part]
    assert symplan.triples_at(lib, family, x.sizes, y.sizes) == runtime


def test_block_sizes_that_are_not_parts_of_one_another_are_an_error(lib):
    with pytest.raises(LayoutalgError, match="neither is a whole multiple"):
        _blocks(lib, "split_nhd", "tp=2,block_size=32", "tp=2,block_size=48")
    with pytest.raises(LayoutalgError, match="given for the store configuration only"):
        _blocks(lib, "split_nhd", "tp=2,block_size=32", "tp=2")
    with pytest.raises(LayoutalgError, match="outside the proved domain"):
        _blocks(lib, "split_nhd", "tp=2,block_size=4096", "tp=2,block_size=8192")
    for bad in (-16, 0, "16", 16.0, True):
        with pytest.raises(LayoutalgError, match="not a whole number of at least 1"):
            replan.prove_all_sizes(lib, "split_nhd", {"tp": 2, "block_size": bad}, {"tp": 2, "block_size": 32},
                                   Budgets.of().full)


def test_block_sizes_the_family_does_not_serve_are_not_proved(lib):
    """Only k is proved for every B; a block size given that the family refuses (3 tokens dealt
    in pairs) says so, rather than prove a pair no deployment has."""
    rows = _blocks(lib, "split_nhd", "tp=2,dcp=2,interleave=2,block_size=3", "tp=2,block_size=6")
    assert {r.status for r in rows.values()} == {"unknown"}
    assert "block_size=3 is served by no case" in rows["reshard-cover"].method


def test_a_plan_whose_domain_is_empty_proves_nothing(lib):
    """The plan's domain (where its pieces divide) joins every query: one no size meets would
    make each query unsat, so it is checked to hold somewhere first."""
    import sympy

    def never(plans):
        return tuple(p._replace(domain=p.domain + ((sympy.Integer(1) + 0 * sympy.Symbol("block_size"), 2),))
                     for p in plans)
    rows = _rows(lib, "split_nhd", "tp=2", "tp=2,dcp=2", never)
    assert {rows[n].status for n in replan.RESHARD} == {"unknown"}
    assert "no size is shown where the plan's pieces divide" in rows["reshard-cover"].detail


def test_a_configuration_outside_the_domain_is_an_error(lib):
    with pytest.raises(LayoutalgError, match="names 'heads'"):
        replan.prove_all_sizes(lib, "split_nhd", {"tp": 2, "heads": 4}, parse_config("tp=1"), Budgets.of().full)
    with pytest.raises(LayoutalgError, match="outside the proved domain"):
        replan.prove_all_sizes(lib, "split_nhd", {"tp": 4096}, parse_config("tp=1"), Budgets.of().full)


def _runtime_triples(plan):
    return {(r.producer, s + k, d + k) for r in plan.runs for s, d, n in r.triples() for k in range(n)}


@pytest.mark.parametrize("family, store, load, heads", [
    ("split_nhd", "tp=2", "tp=4", 8),
    ("split_hnd", "tp=8", "tp=2", 2),                        # GQA: consumers spread their reads over replicas
    ("split_nhd", "tp=4,dcp=2,interleave=2", "tp=4,dcp=2", 2),
    ("packed_hnd", "tp=4", "tp=1", 4),
    ("aiter", "tp=2", "tp=4", 4),
    ("mla", "tp=2,dcp=2", "tp=4,dcp=2", 1),
])
def test_the_runtime_plan_is_the_proved_plan_at_its_sizes(lib, family, store, load, heads):
    names = {"aiter_kv": 1} if family == "aiter" else None
    x = group_of(family, parse_config(store), heads, 16, 8, "bf16", 2, names)
    y = group_of(family, parse_config(load), heads, 16, 8, "bf16", 2, names)
    runtime = direct_plans(x.mappings, y.mappings)
    symbolic = symplan.plans_at(lib, family, x.sizes, y.sizes)
    assert len(symbolic) == len(runtime)
    for s, r in zip(symbolic, runtime):
        assert symplan.triples(lib_family(lib, family), s, x.sizes, y.sizes) == _runtime_triples(r)


# ---- pages of regions: each region's plan from its base of both pages, the regions apart -------

MAMBA = dict(conv_kernel=4, conv_bytes=2, ssm_bytes=4, ssm_heads=8, ssm_head_dim=4, state_size=2, n_groups=2)
GDN = dict(gdn_k_heads=4, gdn_v_heads=8, gdn_k_dim=2, gdn_v_dim=3, conv_kernel=3, conv_bytes=2, ssm_bytes=4)


PAGES = [
    ("gdn", "tp=2", "tp=4", 4),       # conv state q | k | v, each sharded, rows with the others between them
    ("mamba2", "tp=4", "tp=2", 4),    # B and C groups copied on two ranks at tp=4, one group a rank at tp=2
] + ([("quant_packed", "tp=2", "tp=1", 3)] if os.environ.get("LAYOUTALG_FULL") == "1" else [])
"""quant_packed's rows padded to `row_align` (data, scale and the row's padding, copied: it lies
in the tensor; 34 s) are proved with `LAYOUTALG_FULL=1`: each configuration's reading divides the
shared sizes by it with a quotient of its own, which Z3 sees equal (`Z3Ops.shared`)."""


@pytest.mark.parametrize("family, store, load, regions", PAGES)
def test_direct_plans_of_pages_of_regions_are_proved_for_all_sizes(lib, family, store, load, regions):
    rows = _rows(lib, family, store, load)
    for r in rows.values():
        assert r.status == "proved", (r.obligation, r.detail)
        assert r.method.startswith("all sizes at this configuration pair") and f"{regions} regions each" in r.method


@pytest.mark.parametrize("family, store, load, names", [
    ("gdn", "tp=2", "tp=4", GDN), ("gdn", "tp=4", "tp=1", GDN),
    ("mamba2", "tp=2", "tp=4", MAMBA), ("mamba2", "tp=4", "tp=1", {**MAMBA, "n_groups": 1}),
    ("quant_split", "tp=2", "tp=8", {"kv_scales": 2}),   # GQA: 4 heads on 8 ranks
    ("quant_packed", "tp=4", "tp=2", {"kv_scales": 1, "row_align": 8}),
])
def test_the_runtime_plan_of_a_page_is_the_proved_plan_at_its_sizes(lib, family, store, load, names):
    dtype = "int8" if family.startswith("quant") else "bf16"
    x = group_of(family, parse_config(store), 4, 16, 8, dtype, 2, names)
    y = group_of(family, parse_config(load), 4, 16, 8, dtype, 2, names)
    runtime = direct_plans(x.mappings, y.mappings)
    assert symplan.triples_at(lib, family, x.sizes, y.sizes) == [_runtime_triples(r) for r in runtime]


def test_a_page_plan_reading_the_wrong_producer_is_refuted(lib):
    rows = _rows(lib, "gdn", "tp=2", "tp=1", _first_run(lambda rs: (rs[0]._replace(producer=1 - rs[0].producer),)
                                                         + rs[1:]))
    assert rows["reshard-match"].status == "refuted"
    assert "region 'q'" in rows["reshard-match"].detail and "another canonical byte" in rows["reshard-match"].detail
    assert rows["reshard-cover"].status == "proved"


def _edited(tmp_path, spec, *changes):
    import shutil
    from conftest import ROOT
    from layoutalg.dsl.library import load
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    path = tmp_path / "specs" / spec
    text = path.read_text()
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path.write_text(text)
    return load([str(path)])


def test_a_page_whose_regions_overlap_is_refuted(tmp_path):
    lib = _edited(tmp_path, "gdn.lal", ("offset Q + j + (2 * Q + V) * w", "offset Q - 1 + j + (2 * Q + V) * w"))
    rows = _rows(lib, "gdn", "tp=2", "tp=4")  # k begins on q's last channel, in every page
    assert rows["reshard-cover"].status == "refuted", rows["reshard-cover"].detail
    assert "'gdn_page.q' and 'gdn_page.k' of the consumer page share a byte" in rows["reshard-cover"].detail
    assert rows["reshard-match"].status == "refuted"  # and in the producer's: one byte read as two
    assert "of the producer page share a byte, one byte read as two canonical bytes" in rows["reshard-match"].detail


# a page overlapping in the producer only, a pad over data, a canonical page of another size
_SHIFT = ("layout gdn_page(K, Q, V, H, A, B, ec, es, page):", "layout gdn_page(K, Q, V, H, A, B, ec, es, page, s):")


_OVERLAP = (_SHIFT, ("offset K * (2 * Q + V) * ec / es + b", "offset K * (2 * Q + V) * ec / es - s + b"),
            ("gdn_v_dim, gdn_k_dim, conv_bytes, ssm_bytes, page_size)",
             "gdn_v_dim, gdn_k_dim, conv_bytes, ssm_bytes, page_size, tp % 4 // 2)"),
            ("+ gdn_v_heads * gdn_k_dim * gdn_v_dim * ssm_bytes))", "+ gdn_v_heads * gdn_k_dim * gdn_v_dim * ssm_bytes), 0)"))


def test_regions_that_overlap_in_the_producer_page_only_are_refuted(tmp_path):
    lib = _edited(tmp_path, "gdn.lal", *_OVERLAP)
    rows = _rows(lib, "gdn", "tp=2", "tp=1")  # at tp=2 the recurrent state begins one element inside v
    assert rows["reshard-match"].status == "refuted", rows["reshard-match"].detail
    assert "and 'gdn_page.recurrent' of the producer page share a byte, one byte read as two canonical bytes" \
        in rows["reshard-match"].detail
    assert rows["reshard-cover"].status == "proved"  # the consumer's page (tp=1) is tiled: each byte written once


def test_a_part_of_a_page_left_undecided_does_not_keep_another_parts_refutation_waiting(tmp_path, monkeypatch):
    """Whether two regions of a page share a byte is hunted for in every pair within a share of
    the budget before any pair is asked within the whole of it: here the first pair asked is
    made undecided (as a hard query is), and the pair that shares a byte is still found first."""
    lib = _edited(tmp_path, "gdn.lal", *_OVERLAP)
    asked, tiling = [], []
    solve, violation = replan.solve_query, replan._tiling_violation

    def solve_query(mx, my, query, budget):
        if not tiling:
            return solve(mx, my, query, budget)
        if not asked:  # the first pair asked: as hard as a query can be
            asked.append((budget.rlimit, "unknown"))
            return "unknown", None
        status, model = solve(mx, my, query, budget)
        asked.append((budget.rlimit, status))
        return status, model

    def tiling_violation(*a, **k):
        tiling.append(1)
        try:
            return violation(*a, **k)
        finally:
            tiling.pop()
    monkeypatch.setattr(replan, "solve_query", solve_query)
    monkeypatch.setattr(replan, "_tiling_violation", tiling_violation)
    rows = _rows(lib, "gdn", "tp=2", "tp=1")
    assert rows["reshard-match"].status == "refuted", rows["reshard-match"].detail
    full = Budgets.of().full.rlimit
    found = [k for k, (_, status) in enumerate(asked) if status == "sat"]
    assert found and all(rlimit < full for rlimit, _ in asked[:found[0] + 1]), asked


def test_a_pad_over_data_is_never_proved(tmp_path):
    lib = _edited(tmp_path, "quant_split.lal", ("        offset 2 * T * H * D + s + S * (h + H * (t + T * kv))\n",
                                                "        offset 2 * T * H * D + s + S * (h + H * (t + T * kv))\n"
                                                "    pad p:\n        index z < 1\n"
                                                "        offset 2 * T * H * D + 2 * T * H * S - 1 + z\n"))
    rows = _rows(lib, "quant_split", "tp=2", "tp=1")  # the last scale byte is a pad byte too
    assert rows["reshard-cover"].status == "refuted", rows["reshard-cover"].detail
    assert "a pad byte the region's plan writes" in rows["reshard-cover"].detail


def test_quantised_rows_of_another_width_under_another_tp_are_not_proved(tmp_path):
    lib = _edited(tmp_path, "quant_packed.lal", ("canonical quant_rows(total_heads, block_size * cp, head_size, "
                                                 "scale_bytes, row)", "canonical quant_rows(total_heads, block_size "
                                                 "* cp, head_size, scale_bytes, row + tp % 4 // 2 * row_align)"))
    rows = _rows(lib, "quant_packed", "tp=2", "tp=1")  # at tp=2 each canonical row is row_align bytes wider
    assert {r.status for r in rows.values()} == {"unknown"}, [(r.status, r.detail) for r in rows.values()]


def test_canonical_pages_of_another_size_have_no_plan(tmp_path):
    lib = _edited(tmp_path, "gdn.lal", ("+ gdn_v_heads * gdn_k_dim * gdn_v_dim * ssm_bytes))",
                                        "+ gdn_v_heads * gdn_k_dim * gdn_v_dim * ssm_bytes + tp))"))
    rows = _rows(lib, "gdn", "tp=2", "tp=4")  # its canonical pad grows with tp: two page formats
    assert {r.status for r in rows.values()} == {"unknown"}
    assert "canonical pages of one shape" in rows["reshard-cover"].method


def test_a_division_by_zero_in_a_plan_is_no_proof(lib):
    import sympy
    from layoutalg.ir.sizes import Atom
    q = sympy.Symbol("_zero", integer=True)

    def edit(plans):
        return tuple(p._replace(runs=p.runs + (symplan.SymbolicRun(0, 0, 0, ((0, q, q),)),),
                                atoms={**p.atoms, q: Atom(q, "/", sympy.Integer(4), sympy.Integer(0))}) for p in plans)
    rows = _rows(lib, "split_nhd", "tp=2", "tp=1", edit)
    assert {r.status for r in rows.values()} == {"unknown"} and "division exact" in rows["reshard-cover"].detail


def lib_family(lib, family):
    from layoutalg.ir.family import resolve
    return resolve(lib, family)


def test_cli_proves_a_pair_and_fails_on_an_unknown_one():
    proc = run("prove", "specs/split_nhd.lal", "--reshard", "tp=1", "tp=2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 proved for all sizes," in proc.stdout and "direct plans from tp=1 to tp=2" in proc.stdout
    proc = run("prove", "specs/opaque.lal", "--reshard", "tp=1", "tp=2")
    assert proc.returncode == 1 and "0 refuted, 2 unknown" in proc.stdout
    proc = run("prove", "specs/split_nhd.lal", "--reshard", "tp=1", "tq=2")
    assert proc.returncode == 2 and "tq=2" in proc.stderr


def test_the_summary_of_a_pair_across_another_cp_proved_by_residue_cases(small_producers):
    """`prove --reshard tp=2 tp=2,dcp=2`'s table (the CLI prints `_table` of these rows, and exits 0
    where every row is proved): both rows proved for all sizes, by residue cases, no reshard-domain row."""
    import io

    from layoutalg.cli.prove import _table
    rows = list(small_producers.values())
    out = io.StringIO()
    _table(rows, set(), out)
    assert all(r.status == "proved" for r in rows)  # the CLI's exit status 0
    assert "2 proved for all sizes, 0 proved" in out.getvalue() and "0 unknown" in out.getvalue()
    assert "reshard-domain" not in out.getvalue()


def test_the_summary_counts_rows_proved_only_on_a_domain(thirds_rows):
    """Rows proved where no case covers every size say so in the last line (the mutant whose
    cases all need 3 to divide block_size)."""
    import io

    from layoutalg.cli.prove import _table
    out = io.StringIO()
    _table(thirds_rows, set(), out)
    assert "3 obligations: 2 proved for all sizes (2 of them only at the sizes where the plan's pieces divide: " \
        "see reshard-domain)" in out.getvalue() and "1 unknown" in out.getvalue()


# ---- plans and specs that must never be proved ----------------------------------------------

def test_plans_that_leave_a_consumer_rank_out_are_refuted(lib):
    for edit in (lambda ps: ps[:1], lambda ps: (), lambda ps: (ps[0], ps[0])):
        rows = _rows(lib, "split_nhd", "tp=1", "tp=2", edit)
        assert rows["reshard-cover"].status == "refuted" and "the load group has 2 ranks" in rows["reshard-cover"].detail
        assert rows["reshard-match"].status == "unknown"


def test_negative_extents_are_no_plan(lib):
    import sympy

    def edit(plans):
        return tuple(p._replace(runs=tuple(r._replace(modes=((sympy.Integer(-1), 0, 0), (-r.modes[0][0],) + r.modes[0][1:])
                                                       + r.modes[1:]) for r in p.runs)) for p in plans)
    rows = _rows(lib, "split_nhd", "tp=1", "tp=2", edit)  # every product unchanged, every byte gone
    assert rows["reshard-cover"].status == rows["reshard-match"].status == "refuted"
    assert "negative extent" in rows["reshard-cover"].detail


def test_a_division_that_is_never_exact_leaves_no_proof(lib):
    import sympy
    from layoutalg.ir.sizes import Atom
    q = sympy.Symbol("_never", integer=True)
    never = Atom(q, "/", 2 * sympy.Symbol("block_size", integer=True, positive=True) + 1, sympy.Integer(2))

    def edit(plans):  # a wrong producer (refuted alone) and an empty run reading the inexact division
        return tuple(p._replace(runs=tuple(r._replace(producer=1 - r.producer) for r in p.runs)
                                + (symplan.SymbolicRun(0, 0, 0, ((0, q, q),)),), atoms={**p.atoms, q: never})
                     for p in plans)
    rows = _rows(lib, "split_nhd", "tp=2", "tp=1", edit)
    assert {r.status for r in rows.values()} == {"unknown"}
    assert "division exact" in rows["reshard-match"].detail


def _mutated(tmp_path, old, new):
    from conftest import ROOT
    from layoutalg.dsl.library import load
    grids = (ROOT / "specs" / "grids.lal").read_text()
    assert old in grids
    (tmp_path / "grids.lal").write_text(grids.replace(old, new))
    (tmp_path / "split_nhd.lal").write_text((ROOT / "specs" / "split_nhd.lal").read_text())
    return load([str(tmp_path / "split_nhd.lal")])


def test_a_spec_whose_divisions_are_read_lazily_and_never_exact_is_not_proved(tmp_path):
    lib = _mutated(tmp_path, "fn head(h) = head_shard * heads + h ", "fn head(h) = head_shard * heads + h + 0 * (tp / 3) ")
    rows = _rows(lib, "split_nhd", "tp=1", "tp=2")  # the runtime refuses every size: (tp) / (3) is never whole
    assert {r.status for r in rows.values()} == {"unknown"}


_SMALL_GRID = """
param kv_blocks_second in 0 .. 1 default 0 "1 when K and V are outside the blocks (split NHD reads it)"
param cpu_attn_layout in 0 .. 2 default 0 "vLLM's CPU attention backend (split NHD reads it)"
param aiter_kv in 0 .. 2 default 0 "ROCm's two-slot page (split NHD reads it)"
grid heads:   # a small grid: tp heads shards, a cp of 1
    world tp * pcp
    require total_heads % tp == 0
    let shards = tp, cp = 1
    require heads == total_heads / shards
    ranks {ranks}
    fn head(h) = head_shard * heads + h
    agnostic when cp == 1
    fn token(t) = t
"""


def _small(tmp_path, ranks):
    from conftest import ROOT
    from layoutalg.dsl.library import load
    (tmp_path / "grids.lal").write_text(_SMALL_GRID.format(ranks=ranks))
    (tmp_path / "split_nhd.lal").write_text((ROOT / "specs" / "split_nhd.lal").read_text())
    return load([str(tmp_path / "split_nhd.lal")])


def test_a_grid_whose_digits_miss_ranks_of_its_world_is_not_proved(tmp_path):
    lib = _small(tmp_path, "head_shard < shards")  # a world of tp * pcp ranks, digits for tp of them
    for edit in (None, lambda ps: tuple(p._replace(runs=tuple(r._replace(producer=1) for r in p.runs)) for p in ps)):
        rows = _rows(lib, "split_nhd", "tp=1,pcp=2", "tp=1,pcp=2", edit)  # (and every read from a rank with no digits)
        assert {r.status for r in rows.values()} == {"unknown"}
        assert "number exactly its world" in rows["reshard-cover"].detail


def test_a_requirement_the_compiler_adds_is_read_by_the_reshard_prover(tmp_path):
    """Without `require block_size % interleave == 0` the compiler still splits `t // interleave`
    exactly and refuses a block that is no whole number of chunks: the plan is proved where the
    runtime serves, the prover reading the compiler's guard as the runtime checks it."""
    from layoutalg.compile.codegen import compile_named
    from layoutalg.compile.compiled import GuardFailed
    lib = _mutated(tmp_path, "        require block_size % interleave == 0\n", "")
    rows = _rows(lib, "split_nhd", "tp=1,pcp=2,interleave=2", "tp=1,pcp=2")
    assert {r.status for r in rows.values()} == {"proved"}, {n: r.detail for n, r in rows.items()}
    sizes = {"tp": 1, "pcp": 2, "dcp": 1, "interleave": 2, "total_heads": 1, "heads": 1, "block_size": 3,
             "head_size": 1, "dtype_bytes": 1, "per_token_head_quant": 0, "pcp_replicas": 0, "kv_blocks_second": 0,
             "aiter_kv": 0, "page_size": 6}
    with pytest.raises(GuardFailed, match=r"\(block_size\) / \(interleave\) is a whole number"):
        compile_named(lib, "split_nhd").evaluate(sizes)


def test_configurations_are_read_strictly(lib, tmp_path):
    from layoutalg.errors import ConfigError
    with pytest.raises(ConfigError, match="tp is given twice"):
        parse_config("tp=2,tp=4")
    with pytest.raises(LayoutalgError, match="not a whole number"):
        replan.prove_all_sizes(lib, "split_nhd", {"tp": "2"}, parse_config("tp=1"), Budgets.of().full)
    bare = _small(tmp_path, "pcp_rank < pcp, head_shard < shards")  # a library that declares no pcp_replicas
    rows = _rows(bare, "split_nhd", "tp=1", "tp=2")
    assert {r.status for r in rows.values()} == {"proved"}  # the configuration's pcp_replicas=0 means nothing here
    with pytest.raises(LayoutalgError, match="declare no pcp_replicas"):
        _rows(bare, "split_nhd", "tp=1", "tp=2,pcp_replicas=1")


def test_ranks_that_are_not_ints_and_unknown_divisions_are_no_plan(lib):
    import sympy
    from layoutalg.ir.sizes import Atom
    half = _rows(lib, "split_nhd", "tp=2", "tp=1", _first_run(lambda rs: rs[:1] + tuple(r._replace(producer=0.5)
                                                                                        for r in rs[1:])))
    assert {r.status for r in half.values()} == {"refuted"} and "ranks are ints" in half["reshard-cover"].detail
    q = sympy.Symbol("_odd", integer=True)

    def odd(plans):
        return tuple(p._replace(atoms={**p.atoms, q: Atom(q, "?", sympy.Integer(4), sympy.Integer(2))}) for p in plans)
    rows = _rows(lib, "split_nhd", "tp=1", "tp=2", odd)
    assert {r.status for r in rows.values()} == {"refuted"} and "none of /, //, %" in rows["reshard-match"].detail


def test_a_configuration_name_given_as_a_size_is_an_error():
    from layoutalg.errors import ConfigError
    with pytest.raises(ConfigError, match="part of the configuration"):
        group_of("split_nhd", parse_config("tp=2,pcp=2"), 8, 16, 128, "bf16", 4, names={"pcp_replicas": 1})
    for text in ("", " , ", "tp=1_0", "tp=+2", "tp=\u0662"):
        with pytest.raises(ConfigError):
            parse_config(text)


def _slot_library(tmp_path):
    """split_nhd on a grid that deals tokens round robin (token(t) = t * cp + cp_rank) while its
    shard map places them in blocks by another of the grid's fns (slot): the pages tile."""
    from conftest import ROOT
    from layoutalg.dsl.library import load
    grids = (ROOT / "specs/grids.lal").read_text()
    for old, new in [("        fn token(t) = t\n", "        fn token(t) = t\n        fn slot(t) = t\n"),
                     ("        require block_size % interleave == 0\n"
                      "        fn token(t) = ((t // interleave) * cp + cp_rank) * interleave + t % interleave\n",
                      "        require interleave == 1\n        fn token(t) = t * cp + cp_rank\n"
                      "        fn slot(t) = cp_rank * block_size + t\n")]:
        assert old in grids
        grids = grids.replace(old, new)
    (tmp_path / "grids.lal").write_text(grids)
    spec = (ROOT / "specs/split_nhd.lal").read_text().replace("(kv, token(t), head(h), d)", "(kv, slot(t), head(h), d)")
    (tmp_path / "slot.lal").write_text(spec)
    return load([tmp_path / "slot.lal"])


@pytest.fixture(scope="module")
def slot_library(tmp_path_factory):
    """`_slot_library`, written and loaded once for the two tests that read it (one library object:
    its parsed and resolved forms are shared; the two tests ask its `sequence-order` row at two budgets)."""
    return _slot_library(tmp_path_factory.mktemp("slot"))


def test_a_cross_cp_plan_rests_on_the_sequence_claim(slot_library):
    """The cross-cp check matches canonical indices, the small page's token
    shifted by its part, which is each token's place only where `sequence t` holds. The slot
    spec's plan (12 of 16 bytes the wrong token at block_size 4) was proved for all sizes."""
    rows = _rows(slot_library, "split_nhd", "tp=2", "tp=2,dcp=2")
    for n in replan.RESHARD:
        assert rows[n].status == "unknown", (n, rows[n].status)
        assert "sequence-order is not proved for all sizes (refuted" in rows[n].detail


def test_a_cross_cp_plan_of_one_pair_rests_on_the_sequence_claim_there(lib, slot_library):
    """The same for the plans `layoutalg reshard --direct` proves per pair (`prove_cross_plans`)."""
    from layoutalg.verify.prove.reshard import sequence_unshown
    x, y = (group_of("split_nhd", parse_config(c), 1, 4, 8, "bf16", 2) for c in ("tp=2", "tp=2,dcp=2"))
    budget = Budgets.of().config
    assert sequence_unshown(lib, "split_nhd", x.sizes, y.sizes, budget) is None
    why = sequence_unshown(slot_library, "split_nhd", x.sizes, y.sizes, budget)
    assert "sequence-order is not proved for all sizes (refuted" in why  # for all sizes, not at the pair alone


@pytest.mark.parametrize("family, store, load, heads, block_size", [
    ("split_nhd", "tp=2", "tp=2,dcp=2", 1, 16),                        # small producers: two parts a page
    ("split_nhd", "tp=2", "tp=2,dcp=2", 1, 7),                         # ... a rank's 7 tokens: 4 and 3
    ("mla", "tp=4,dcp=2", "tp=2", 1, 16),                              # small consumers, producers replicated
    ("mla", "tp=4,dcp=2,interleave=4", "tp=2", 1, 12),                 # ... 3 chunks a rank: 2 and 1
    ("split_hnd", "tp=8", "tp=4,dcp=2,interleave=2", 2, 16),          # GQA replicas, tokens dealt in pairs
    ("split_hnd", "tp=8", "tp=4,dcp=2,interleave=2", 2, 6),
    ("split_nhd", "tp=2", "tp=2,dcp=2,interleave=8", 1, 8),           # interleave = block_size: one chunk
    ("split_nhd", "tp=4", "tp=4,dcp=4,interleave=2", 1, 10),          # 5 chunks into 4 small pages
    ("split_nhd", "tp=2,dcp=2,interleave=4", "tp=4,dcp=4,interleave=4", 1, 12),  # cp 2 to 4
])
def test_the_runtime_plan_across_another_cp_is_the_proved_plan_at_its_sizes(lib, family, store, load, heads,
                                                                              block_size):
    """`reshard.cross_plans` composes the small group's mappings onto the big pages from their
    fragments; at every size its bytes are those of the plan proved for all sizes, of the
    residue case the sizes lie in (virtual consumer `part * world + s` is consumer s's plan
    for that part)."""
    from layoutalg.verify.conversions import conversion
    from layoutalg.plans.reshard import cross_plans
    x = group_of(family, parse_config(store), heads, block_size, 8, "bf16", 2)
    y = group_of(family, parse_config(load), heads, block_size, 8, "bf16", 2)
    big, small = (x, y) if x.mappings[0].canonical_page_size_bytes > y.mappings[0].canonical_page_size_bytes else (y, x)
    cross = cross_plans(x.mappings, y.mappings, conversion(lib, family, big.sizes, small.sizes))
    runtime = [_runtime_triples(p) for part in cross.parts for p in part]
    proved = symplan.triples_at(lib, family, x.sizes, y.sizes)
    assert len(proved) == len(runtime) > 1 and proved == runtime


def test_a_reshard_verdict_does_not_depend_on_what_the_process_solved_before(lib):
    """`prove --reshard` proves each family in a fresh process started from one state, as the
    library's proofs are: Z3's choices depend on what a process solved before, so rows asked
    after other proofs in the caller's process are the rows asked first."""
    from layoutalg.cli.prove import prove_reshard

    def shown(rows):
        return [(r.family, r.obligation, r.status, r.method, r.detail) for r in rows]
    first = prove_reshard(["specs/gdn.lal"], "gdn", "tp=2", "tp=1")
    _rows(lib, "gdn", "tp=2", "tp=1")  # the same queries, solved in this process
    again = prove_reshard(["specs/gdn.lal"], "gdn", "tp=2", "tp=1")
    assert [r.obligation for r in first] == ["reshard-cover", "reshard-match"]
    assert {r.status for r in first} == {"proved"}
    assert shown(again) == shown(first)


def test_a_familys_one_format_row_is_proved_once_per_spec_text(lib, tmp_path, monkeypatch):
    """A direct plan rests on its family's `one-format` row: asked once per spec text, prover and
    budget (the proof cache), again when the spec changes, every time with the cache off."""
    from layoutalg.verify.prove import runner
    from layoutalg.verify.prove.reshard.all_sizes import _one_format_unproved
    calls = []
    real = runner.one_format
    monkeypatch.setattr(runner, "one_format", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    monkeypatch.setenv("LAYOUTALG_CACHE", str(tmp_path / "cache"))
    budget = Budgets.of().full
    assert _one_format_unproved(lib, "split_hnd", budget) == _one_format_unproved(lib, "split_hnd", budget) \
        == ("proved", "")
    assert calls == ["split_hnd"]
    edited = _edited(tmp_path, "split_hnd.lal", ("# Split HND:", "#  Split HND:"))  # another text, one meaning
    assert _one_format_unproved(edited, "split_hnd", budget) == ("proved", "") and len(calls) == 2
    monkeypatch.setenv("LAYOUTALG_CACHE", "off")
    _one_format_unproved(lib, "split_hnd", budget)
    assert calls == ["split_hnd"] * 3
    # a refuted row refutes the plans resting on it; a cached row is read, not asked again
    from layoutalg.verify.prove.store import Row
    monkeypatch.setattr(runner, "one_format", lambda lib_, part, *a: Row("s", part, "one-format", "refuted", "m", 0.0))
    assert _one_format_unproved(lib, "split_hnd", budget)[0] == "refuted"
    monkeypatch.setenv("LAYOUTALG_CACHE", str(tmp_path / "cache"))
    assert _one_format_unproved(lib, "split_hnd", budget) == ("proved", "")
