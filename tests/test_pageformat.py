"""Pages of another cp: a canonical page under cp holds block_size * cp tokens, so two
configurations of one family with another cp read pages of two formats. The conversion
between them is a layout composition; checked here against the spec's own reading of
both layouts, byte for byte, and end to end across processes."""
import itertools
import subprocess
import sys

import pytest

from layoutalg.distributed import group_of, parse_config, reshard
from layoutalg.errors import LayoutalgError
from layoutalg.interpret import Reading
from layoutalg.library import load_default
from layoutalg.mapping import merged_triples
from layoutalg.pageformat import conversion

from conftest import ROOT
from test_reshard import _group


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
    with pytest.raises(LayoutalgError, match="differ in t, h"):
        conversion(lib, "split_nhd", a.sizes, {**_group("split_nhd", 4, "tp=2").sizes, "total_heads": 2})


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "layoutalg", "reshard", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_reshard_to_another_dcp_across_processes():
    proc = _cli("--family", "split_hnd", "--store", "tp=2", "--load", "tp=8,dcp=2,interleave=2", "--heads", "4",
                "--block-size", "4", "--head-size", "16", "--blocks", "4", "--layers", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "converted: 1 x 4 pages of 1024 bytes into 1 x 2 of 2048" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "8 passed, 0 failed"
    direct = _cli("--family", "split_hnd", "--store", "tp=2", "--load", "tp=8,dcp=2", "--heads", "4", "--direct")
    assert direct.returncode == 2 and "a direct plan across them is not built yet" in direct.stderr


def test_a_wrong_conversion_is_caught_by_the_byte_check():
    """The conversion's two halves of each page swapped: every loading rank holds wrong bytes."""
    lib = load_default()
    load = group_of("split_hnd", parse_config("tp=8,dcp=2"), 4, 4, 16, "bf16", 5)
    store = group_of("split_hnd", parse_config("tp=2"), 4, 4, 16, "bf16", 10)
    c = conversion(lib, "split_hnd", load.sizes, store.sizes)
    half = c.small_page
    runs = tuple(r._replace(canonical_offset=(r.canonical_offset + half) % (2 * half)) for r in c.mapping.runs)
    wrong = c._replace(mapping=c.mapping.__class__(c.mapping.canonical_page_size_bytes, c.mapping.local_page_size_bytes,
                                                   runs, 1, 0, False))
    assert reshard(store, load, 1, conversion=c, log=lambda *_: None) == (8, 0)
    assert reshard(store, load, 1, conversion=wrong, log=lambda *_: None) == (0, 8)


@pytest.mark.parametrize("family, heads, a, b", [("split_nhd", 4, "tp=2", "tp=8,dcp=2"),
                                                 ("split_hnd", 4, "tp=16,dcp=2,interleave=2", "tp=1,pcp=2"),
                                                 ("mla", 1, "tp=2,dcp=2,interleave=2", "tp=1")])
def test_stored_under_one_cp_loaded_under_another_in_process(family, heads, a, b):
    """A slice of tests/reshard_matrix.py's 532 such pairs: store, convert, load, every byte checked
    against the spec's coordinates of both formats."""
    from reshard_matrix import converted
    assert converted(family, heads, a, b)
