"""Pages of another cp: a canonical page under cp holds block_size * cp tokens, so two
configurations of one family with another cp read pages of two formats. The conversion
between them is a layout composition; checked here against the spec's own reading of
both layouts, byte for byte, and end to end across processes."""
import itertools
import shutil
import subprocess
import sys

import pytest

from layoutalg.tools.distributed import group_of, parse_config, reshard
from layoutalg.errors import LayoutalgError
from layoutalg.dsl.interpret import Reading
from layoutalg.dsl.library import load, load_default
from layoutalg.mapping import merged_triples
from layoutalg.verify.conversions import conversion

from conftest import ROOT
from test_reshard import _group, forked  # noqa: F401 (a fixture)


@pytest.mark.parametrize("family, heads, big, small, k", [
    ("split_nhd", 4, "tp=8,dcp=2", "tp=2", 2), ("split_hnd", 4, "tp=16,dcp=2,interleave=2", "tp=4", 2),
    ("packed_nhd", 4, "tp=2,pcp=2", "tp=1", 2), ("packed_hnd", 2, "tp=4,pcp=2,dcp=2", "tp=8,dcp=2", 2),
    ("mla", 1, "tp=4,dcp=2,pcp=2", "tp=1", 4)])
def test_conversion_matches_the_spec_byte_for_byte(family, heads, big, small, k):
    lib = load_default()
    gb, gs = _group(family, heads, big), _group(family, heads, small)
    c = conversion(lib, family, gb.sizes, gs.sizes)
    assert (c.k, c.token) == (k, "t")
    rb, rs = Reading(lib, family, gb.sizes), Reading(lib, family, gs.sizes)
    ext, per = rb.extents("canonical"), rs.extents("canonical")["t"]
    e = 1 if family == "mla" else 2
    want = {}
    for values in itertools.product(*(range(ext[n]) for n in ext)):
        idx = dict(zip(ext, values))
        j, t = divmod(idx["t"], per)
        for b in range(e):
            want[rb.offset("canonical", idx) + b] = rs.offset("canonical", {**idx, "t": t}) + j * c.small_page + b
    have = {lo + i: co + i for lo, co, n in merged_triples(c.mapping.runs) for i in range(n)}
    assert have == want


def test_pages_that_differ_in_more_than_the_tokens_do_not_convert():
    lib = load_default()
    a = _group("split_nhd", 4, "tp=8,dcp=2")
    with pytest.raises(LayoutalgError, match="differ in t, h; pages of another cp differ in the sequence"):
        conversion(lib, "split_nhd", a.sizes, _group("split_nhd", 2, "tp=1").sizes)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "layoutalg", "reshard", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_reshard_to_another_dcp_across_processes():
    """Heads sharded on both sides, tokens dealt by DCP in pairs on the loading one: 2 + 4 rank
    processes (tp=2 -> tp=8,dcp=2 with 4 heads, the same path in 2 + 8, is the in-process tests' pair)."""
    proc = _cli("--family", "split_hnd", "--store", "tp=2", "--load", "tp=4,dcp=2,interleave=2", "--heads", "2",
                "--block-size", "4", "--head-size", "16", "--blocks", "4", "--layers", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "converted: 1 x 4 pages of 512 bytes into 1 x 2 of 1024" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "4 passed, 0 failed"


@pytest.mark.usefixtures("forked")
def test_a_wrong_conversion_is_caught_by_the_byte_check():
    """The conversion's two halves of each page swapped: every loading rank holds wrong bytes."""
    lib = load_default()
    load = group_of("split_hnd", parse_config("tp=4,dcp=2"), 2, 4, 16, "bf16", 5)  # (4 loading ranks: a short run)
    store = group_of("split_hnd", parse_config("tp=2"), 2, 4, 16, "bf16", 10)
    c = conversion(lib, "split_hnd", load.sizes, store.sizes)
    half = c.small_page
    runs = tuple(r._replace(canonical_offset=(r.canonical_offset + half) % (2 * half)) for r in c.mapping.runs)
    wrong = c._replace(mapping=c.mapping.__class__(c.mapping.canonical_page_size_bytes, c.mapping.local_page_size_bytes,
                                                   runs, 1, 0, False))
    assert reshard(store, load, 1, conversion=c, log=lambda *_: None) == (4, 0)
    assert reshard(store, load, 1, conversion=wrong, log=lambda *_: None) == (0, 4)


@pytest.mark.parametrize("family, heads, a, b", [("split_nhd", 4, "tp=2", "tp=8,dcp=2"),
                                                 ("split_hnd", 4, "tp=16,dcp=2,interleave=2", "tp=1"),
                                                 ("mla", 1, "tp=2,dcp=2,interleave=2", "tp=1"),
                                                 ("quant_split", 4, "tp=2", "tp=8,dcp=2"),
                                                 ("quant_packed", 2, "tp=4,dcp=2,interleave=2", "tp=1")])
def test_stored_under_one_cp_loaded_under_another_in_process(family, heads, a, b):
    """A slice of tests/reshard_matrix.py's 532 such pairs: store, convert, load, every byte checked
    against the spec's coordinates of both formats."""
    from reshard_matrix import converted
    assert converted(family, heads, a, b)


@pytest.mark.parametrize("family, heads, a, b", [("split_nhd", 4, "tp=2", "tp=8,dcp=2"),
                                                 ("mla", 1, "tp=1", "tp=2,dcp=2,interleave=2"),
                                                 ("quant_packed", 2, "tp=1", "tp=4,dcp=2")])
def test_direct_plans_across_another_cp_execute_and_are_proved(family, heads, a, b):
    """No canonical page in between: the small group's mappings composed onto the big pages,
    each consumer byte checked against the spec's coordinates; Z3 proves each plan, and
    refutes the plans of the parts taken the other way round. An attention layout, MLA and a
    page of regions (every family and pair: `python tests/reshard_matrix.py --prove`)."""
    from reshard_matrix import converted
    from layoutalg.verify.prove.reshard import prove_cross_plans
    from layoutalg.verify.prove.runner import Budgets
    from layoutalg.plans.reshard import cross_plans
    assert converted(family, heads, a, b, direct=True)
    lib = load_default()
    x, y = _group(family, heads, a), _group(family, heads, b)
    big, small = (x, y) if x.mappings[0].canonical_page_size_bytes > y.mappings[0].canonical_page_size_bytes else (y, x)
    c = conversion(lib, family, big.sizes, small.sizes)
    cross = cross_plans(x.mappings, y.mappings, c)
    rows = prove_cross_plans(lib, family, x.sizes, y.sizes, cross, c.token, Budgets.of().config)
    assert [r.status for r in rows] == ["proved", "proved"], rows
    if cross.small == "consumer":
        wrong = cross._replace(parts=cross.parts[::-1])
    else:
        shift = [p._replace(runs=tuple(r._replace(producer=(r.producer + cross.world) % (cross.world * cross.k))
                                       for r in p.runs)) for p in cross.parts[0]]
        wrong = cross._replace(parts=(tuple(shift),))
    rows = prove_cross_plans(lib, family, x.sizes, y.sizes, wrong, c.token, Budgets.of().config)
    assert rows[1].status == "refuted" and "part" in rows[1].detail, rows[1]


@pytest.mark.parametrize("family, a, b, why", [
    ("opaque", "tp=1", "tp=2", "declares no `sequence`"),          # its page grows with tp, not with cp
    ("split_nhd", "tp=2", "tp=2", "differ in nothing"),
])
def test_pages_that_are_not_parts_of_one_another_do_not_convert(family, a, b, why):
    lib = load_default()
    x = _group(family, 4, a) if family != "opaque" else None
    if family == "opaque":
        sizes = dict(tp=1, pcp=1, dcp=1, interleave=1, page_size=4)
        with pytest.raises(LayoutalgError, match=why):
            conversion(lib, family, {**sizes, "tp": 2}, sizes)
        return
    with pytest.raises(LayoutalgError, match=why):
        conversion(lib, family, x.sizes, x.sizes)


def test_convert_refuses_pages_of_the_wrong_shape():
    import torch
    from layoutalg.copy.direct import convert
    lib = load_default()
    c = conversion(lib, "mla", _group("mla", 1, "tp=2,dcp=2").sizes, _group("mla", 1, "tp=1").sizes)
    with pytest.raises(LayoutalgError, match="expected"):
        convert(c, torch.zeros(2, c.big_page, dtype=torch.uint8), torch.zeros(4, c.small_page + 1, dtype=torch.uint8),
                to_small=True)


def test_reshard_to_another_block_size_across_processes():
    """Pages of block size 4 and of 8 are parts of one another along the tokens, as pages of
    another cp are: two small pages join into one, here stored by a pipeline of two stages (the
    direct plan: tests/test_pipeline.py). Two stages of one rank store, two ranks load (heads sharded)."""
    proc = _cli("--family", "split_hnd", "--store", "pp=2,tp=1,block_size=4", "--load", "tp=2,block_size=8",
                "--heads", "4", "--head-size", "16", "--blocks", "4", "--layers", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stored: 2 stages (layers 0, 1) of 1 ranks" in proc.stdout, proc.stdout  # a pipeline, each stage a group
    assert "converted: 2 x 4 pages of 1024 bytes into 2 x 2 of 2048" in proc.stdout, proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "4 passed, 0 failed"
    odd = _cli("--family", "split_hnd", "--store", "tp=2,block_size=4", "--load", "tp=2,block_size=6",
               "--heads", "4", "--head-size", "16", "--blocks", "4", "--layers", "1")
    assert odd.returncode == 2 and "not a multiple of 4" in odd.stderr, odd.stdout + odd.stderr


CONVERTED = '''import "grids.lal"

layout bytes(P):
    index b < P
    offset b

layout halves(P):
    index b < P
    offset (b % 2) * (P / 2) + b // 2

family fc serves fallback:
    grid private
    case tp >= 1:
        require page_size // (tp - 1) > 0   # (at tp = 1 a division by 0, read on this case's paths only)
        case tp > 4:
            require tp > 4
    case tp >= 1:
        require tp >= 1
    local bytes(page_size)
    canonical CANONICAL(page_size * tp * pcp)
    shard (b) -> (rank * page_size + b)
'''


@pytest.mark.parametrize("canonical, affine", [("bytes", True), ("halves", False)])
def test_a_canonical_layout_is_shown_affine_on_the_path_its_sizes_take(tmp_path, canonical, affine):
    """`canonical_boxes` asks Z3 of the case path the numbers take, with no other path's
    divisions among its side conditions: a case read on the way there (its nested cases all
    fail at tp = 1) that divides by 0 makes no query vacuous, and a layout that is not affine
    is said so."""
    from layoutalg.verify.conversions import canonical_boxes
    shutil.copy(ROOT / "specs" / "grids.lal", tmp_path / "grids.lal")
    (tmp_path / "fc.lal").write_text(CONVERTED.replace("CANONICAL", canonical))
    lib = load([tmp_path / "fc.lal"])
    sizes = dict(tp=1, pcp=1, dcp=1, interleave=1, pcp_replicas=0, block_size=4, head_size=3, page_size=8)
    if affine:
        (box,) = canonical_boxes(lib, "fc", sizes)
        assert box.strides == {"b": 1}
    else:
        with pytest.raises(LayoutalgError, match="not affine"):
            canonical_boxes(lib, "fc", sizes)
