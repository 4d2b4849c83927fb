"""Direct reshard plans: consumer ranks filled straight from producer ranks, checked against
the path through canonical pages and against each byte's coordinate in the spec; proved
by Z3 on each pair; refused where the two configurations read different page formats;
and the `layoutalg reshard` command across real processes."""
import re
import subprocess
import sys

import pytest
import torch

from layoutalg.copy.executor import plan
from layoutalg.tools.distributed import coordinates, group_of, hashed, layout_of_pages, parse_config, reshard
from layoutalg.errors import ConfigError, LayoutalgError
from layoutalg.dsl.library import load_default
from layoutalg.mapping import CanonicalPageMapping, CopyRun
from layoutalg.verify.prove.reshard import prove_plans
from layoutalg.verify.prove.runner import Budgets
from layoutalg.plans.reshard import ReshardError, check_plan, direct_plans
from layoutalg.copy.direct import execute
from layoutalg.copy.views import layer_segments

from conftest import ROOT

BLOCKS = 5
# (family, KV heads, producer, consumer): tp up and down, GQA replicas on either side, DCP with
# replicated heads and interleave, PCP as token shards and as replicas
PAIRS = [
    ("split_nhd", 4, "tp=2", "tp=4"), ("split_nhd", 4, "tp=4", "tp=1"), ("split_hnd", 4, "tp=8", "tp=2"),
    ("split_hnd", 4, "tp=1", "tp=16"), ("packed_nhd", 4, "tp=4", "tp=8"), ("packed_hnd", 2, "tp=8", "tp=4"),
    ("split_nhd", 4, "tp=8,dcp=2", "tp=16,dcp=2"), ("split_hnd", 4, "tp=16,dcp=2,interleave=2", "tp=8,dcp=2,interleave=2"),
    ("split_nhd", 4, "tp=2,pcp=2", "tp=4,pcp=2"), ("split_nhd", 4, "tp=4,pcp=2,pcp_replicas=1", "tp=1"),
    ("mla", 1, "tp=4", "tp=1"), ("mla", 1, "tp=2,dcp=2,interleave=2", "tp=8,dcp=2,interleave=2"),
    ("mla", 1, "tp=1,pcp=2", "tp=4,pcp=2"),
    ("flash_nhd", 4, "tp=2", "tp=4"), ("flash_hnd", 4, "tp=8,dcp=2", "tp=16,dcp=2"),  # (2, blocks, ...) tensors
]


QUANTISED = {"quant_split": ("int8", {"kv_scales": 2}), "quant_packed": ("int8", {"kv_scales": 1, "row_align": 8})}
"""Pages of regions: int8 KV with its scales (the names each form reads)."""
SAID = {**QUANTISED, "flash_nhd": ("bf16", {"kv_blocks_second": 1}), "flash_hnd": ("bf16", {"kv_blocks_second": 1})}
"""The element type and the names a layer of each family says (FlashAttention's tensor says so)."""


def _group(family, heads, config, blocks=BLOCKS):
    dtype, names = SAID.get(family, ("bf16", None))
    return group_of(family, parse_config(config), heads, 4, 8 if family == "mla" else 16, dtype, blocks, names=names)


def _filled(group, layer=0):
    """Every rank's KV tensor holding the hash of each byte's coordinate (layer, page, canonical byte)."""
    pages, blocks = layout_of_pages(group, BLOCKS)
    out = []
    for rank, m in enumerate(group.mappings):
        kv = group.empty().zero_()
        h = hashed(layer, pages, coordinates(group, rank))
        for seg in layer_segments(kv, m):  # each stretch of the page where the tensor holds it
            seg.bytes.index_copy_(0, blocks, h[:, seg.start:seg.start + seg.bytes.shape[1]].contiguous())
        out.append(kv)
    return out, pages, blocks


def _bytes(kv, m):
    """Every block's local page, in page order (a copy where the tensor holds it in stretches)."""
    segs = layer_segments(kv, m)
    return segs[0].bytes if len(segs) == 1 else torch.cat([seg.bytes for seg in segs], 1)


@pytest.mark.parametrize("family, heads, store, load", PAIRS)
def test_direct_plan_equals_the_path_through_canonical_pages(family, heads, store, load):
    x, y = _group(family, heads, store), _group(family, heads, load)
    kvs, pages, src_blocks = _filled(x)
    canonical = torch.zeros(BLOCKS, x.mappings[0].canonical_page_size_bytes, dtype=torch.uint8)
    for m, kv in zip(x.mappings, kvs):
        plan(m, kv).store(kv, src_blocks, canonical, pages)
    _, dst_blocks = layout_of_pages(y, BLOCKS)
    plans = direct_plans(x.mappings, y.mappings)
    for p, m in zip(plans, y.mappings):
        direct, through = y.empty().zero_(), y.empty().zero_()
        execute(p, kvs, src_blocks[pages], direct, dst_blocks[pages])
        plan(m, through).load(canonical, pages, through, dst_blocks)
        assert torch.equal(_bytes(direct, m), _bytes(through, m)), (p.consumer, p.producers())
        canon = coordinates(y, p.consumer)
        want, data = hashed(0, pages, canon), canon >= 0  # (-1: a pad byte, never copied)
        assert torch.equal(_bytes(direct, m).index_select(0, dst_blocks)[:, data], want[:, data]), p.consumer


def test_replicas_share_the_reads():
    """Two producers hold each head (tp 8, 4 heads): the two consumers read from different ones."""
    plans = direct_plans(_group("split_nhd", 4, "tp=8").mappings, _group("split_nhd", 4, "tp=2").mappings)
    assert [p.producers() for p in plans] == [(0, 2), (5, 7)]
    assert [p.bytes_from(q) for p in plans for q in p.producers()] == [plans[0].local_page_size_bytes // 2] * 4


@pytest.mark.parametrize("family, heads, store, load", PAIRS[::3])
def test_z3_proves_the_direct_plan_against_the_spec(family, heads, store, load):
    x, y = _group(family, heads, store), _group(family, heads, load)
    rows = prove_plans(load_default(), family, x.sizes, y.sizes, direct_plans(x.mappings, y.mappings),
                       Budgets.of().config)
    assert [(r.obligation, r.status) for r in rows] == [("reshard-cover", "proved"), ("reshard-match", "proved")], rows


def _shifted(plans, k, **change):
    run = plans[0].runs[k]
    return [plans[0]._replace(runs=plans[0].runs[:k] + (run._replace(**change),) + plans[0].runs[k + 1:])] + \
        list(plans[1:])


@pytest.mark.parametrize("change, refuted, said", [
    (dict(src_offset=2), {"reshard-match"}, "but the plan reads producer"),  # reads the next element: wrong bytes
    (dict(dst_offset=2), {"reshard-cover", "reshard-match"}, "is written twice|outside a page"),  # a range twice
    (dict(num_fragments=0), {"reshard-cover"}, "-byte local page"),  # leaves bytes unwritten
])
def test_a_wrong_plan_is_refuted_with_a_counterexample_and_refused_at_run_time(change, refuted, said):
    x, y = _group("split_nhd", 4, "tp=2"), _group("split_nhd", 4, "tp=4")
    plans = direct_plans(x.mappings, y.mappings)
    bad = _shifted(plans, 0, **change)
    rows = {r.obligation: r for r in prove_plans(load_default(), "split_nhd", x.sizes, y.sizes, bad,
                                                 Budgets.of().config)}
    assert {n for n, r in rows.items() if r.status == "refuted"} == refuted, rows
    assert all("consumer rank 0" in rows[n].detail for n in refuted)
    assert re.search(said, rows[min(refuted)].detail), rows[min(refuted)].detail  # (the counterexample in words)
    with pytest.raises(ReshardError, match="consumer rank 0"):
        check_plan(bad[0], x.mappings, y.mappings[0])


def test_configurations_of_different_page_formats_are_refused():
    x, y = _group("split_nhd", 4, "tp=2"), _group("split_nhd", 4, "tp=8,dcp=2")
    with pytest.raises(ReshardError, match="different canonical page formats"):
        direct_plans(x.mappings, y.mappings)
    with pytest.raises(ConfigError, match="different canonical page formats"):
        reshard(x, y, 1)


def test_canonical_bytes_nobody_holds_are_named():
    half = CanonicalPageMapping(8, 4, (CopyRun(0, 0, 4, 1, 4, 4),), 1, 0, True)
    whole = CanonicalPageMapping(8, 8, (CopyRun(0, 0, 8, 1, 8, 8),), 1, 0, True)
    with pytest.raises(ReshardError, match="canonical byte 4 of the page, read by consumer rank 0, is held by no"):
        direct_plans([half], [whole])


def test_a_configuration_the_family_cannot_serve_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"split_nhd .*tp / shards % dcp == 0"):
        _group("split_nhd", 4, "tp=2,dcp=2")
    with pytest.raises(ConfigError, match="expected NAME=VALUE"):
        parse_config("tp=2,cp=2")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "layoutalg", "reshard", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


@pytest.fixture
def forked(monkeypatch):
    """`reshard`'s ranks started by fork rather than spawn: still a process a rank, each joining
    the process group, copying and checking its bytes, but without each re-importing torch and
    the library (seconds a rank). For the tests of what the byte check finds; the spawned
    processes themselves are run by the CLI tests (`_cli`: test_reshard_across_processes, ...)
    and `_spawn`'s errors by test_a_rank_whose_process_fails_is_a_clear_error."""
    import functools
    import torch.multiprocessing as mp
    monkeypatch.setattr(mp, "spawn", functools.partial(mp.start_processes, start_method="fork"))


@pytest.mark.parametrize("direct", [False, True])
def test_reshard_across_processes(direct):
    """Through canonical pages in shared memory (2 + 1 rank processes, heads sharded on the store
    side), and direct (4 + 2: GQA replicas, the consumers reading from different ones)."""
    store, load = ("tp=4", "tp=2") if direct else ("tp=2", "tp=1")
    args = ["--family", "split_hnd", "--store", store, "--load", load, "--heads", "2", "--block-size", "4",
            "--head-size", "16", "--blocks", "6", "--layers", "2"] + (["--direct"] if direct else [])
    proc = _cli(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == ("4 passed, 0 failed" if direct else "2 passed, 0 failed")
    if direct:
        assert "reshard-match  proved" in proc.stdout and "consumer<-producers 0<-0, 1<-3;" in proc.stdout
    else:
        assert "stored: 2 ranks of tp=2" in proc.stdout, proc.stdout


def test_reshard_fails_where_a_loading_rank_gets_wrong_bytes(forked):
    """Consumer rank 1's mapping reads rank 0's heads (a run off by one shard): the check sees it."""
    x, y = _group("split_nhd", 4, "tp=4"), _group("split_nhd", 4, "tp=2")
    m = y.mappings[1]
    wrong = m.__class__(m.canonical_page_size_bytes, m.local_page_size_bytes,
                        tuple(r._replace(canonical_offset=r.canonical_offset - 64) for r in m.runs),
                        m.num_writers, m.writer_index, m.parallelism_agnostic, m.layout_id)
    broken = y.__class__(y.family, y.config, y.sizes, (y.mappings[0], wrong), y.shape, y.stride, y.dtype)
    passed, failed = reshard(x, broken, 2, log=lambda *_: None)
    assert (passed, failed) == (2, 2)


def test_reshard_of_a_configuration_it_cannot_serve_exits_2():
    proc = _cli("--family", "split_nhd", "--store", "tp=2,dcp=2", "--load", "tp=4", "--heads", "4")
    assert proc.returncode == 2, proc.stderr
    assert "error: reshard: split_nhd cannot size a page at tp=2" in proc.stderr and "dcp == 0" in proc.stderr


def test_gather_and_scatter_refuse_bad_input_untouched():
    from layoutalg.errors import LayoutMismatch
    from layoutalg.copy.direct import gather, scatter
    x, y = _group("split_nhd", 4, "tp=2"), _group("split_nhd", 4, "tp=4")
    p = direct_plans(x.mappings, y.mappings)[0]
    kv = x.empty().zero_()
    data = gather(p, 0, kv, [0, 1])
    out = y.empty().fill_(1)
    before = out.clone()
    for bad, why in (([0, 5], "block_ids holds 5, outside the 5 there are"), ([1, 1], "block_ids repeats an id"),
                     ([0.5, 1.0], "block_ids must be a 1-D int64 tensor")):  # as a copy plan reads them
        with pytest.raises(LayoutMismatch, match=why):
            scatter(p, 0, data, out, bad)
    with pytest.raises(ConfigError, match="expected 2 blocks x"):
        scatter(p, 0, data[:-1], out, [0, 1])
    assert torch.equal(out, before)


# ---- groups and pages that must not be mixed -------------------------------------------------

def _rows(x, y, plans):
    return {r.obligation: r for r in prove_plans(load_default(), "split_nhd", x.sizes, y.sizes, plans,
                                                 Budgets.of().config)}


def _pair():
    x, y = _group("split_nhd", 4, "tp=2"), _group("split_nhd", 4, "tp=1")
    return x, y, direct_plans(x.mappings, y.mappings)


@pytest.mark.parametrize("lie", ["producer", "negative", "consumer", "repeated", "missing", "page"])
def test_a_plan_that_is_no_plan_of_the_pair_is_never_proved(lie):
    from layoutalg.plans.reshard import DirectRun
    x, y, plans = _pair()
    p = plans[0]
    n = p.runs[0].fragment_size * p.runs[0].num_fragments
    bad = {"producer": [p._replace(runs=(p.runs[0], p.runs[1]._replace(producer=5)))],
           "negative": [p._replace(runs=p.runs[1:] + (DirectRun(0, 0, 0, -1, -n, 0, 0),))],
           "consumer": [p._replace(consumer=3)],
           "repeated": [p, p],
           "missing": [],
           "page": [p._replace(local_page_size_bytes=2 * p.local_page_size_bytes)]}[lie]
    rows = _rows(x, y, bad)
    assert {r.status for r in rows.values()} == ({"unknown"} if lie == "missing" else {"refuted"}), rows


def test_sizes_the_family_does_not_serve_prove_nothing():
    x, y, plans = _pair()
    rows = prove_plans(load_default(), "split_nhd", {**x.sizes, "page_size": 7}, y.sizes, plans, Budgets.of().config)
    assert {r.status for r in rows} == {"unknown"} and "does not apply at the store" in rows[0].method


def _random_group(rng, size, ranks):
    """A random valid group: the canonical page cut into fragments dealt to ranks in random order."""
    cuts = sorted(rng.sample(range(1, size), min(size - 1, rng.randint(0, 5))))
    frags = list(zip([0] + cuts, cuts + [size]))
    rng.shuffle(frags)
    out = []
    for r in range(ranks):
        mine = frags[r::ranks] or frags[:1]
        runs, lo = [], 0
        for a, b in mine:
            runs.append(CopyRun(lo, a, b - a, 1, b - a, b - a))
            lo += b - a
        out.append(CanonicalPageMapping(size, lo, tuple(runs), 1, 0, True))
    return out


def test_direct_plans_of_random_groups_execute_exactly():
    """Seeded random groups (a fragment may be held by two ranks): every plan built executes,
    with non-negative strides, and puts each producer byte where its canonical byte belongs."""
    import random
    from layoutalg.copy.direct import execute
    rng = random.Random(7)
    built = 0
    for _ in range(300):
        size = rng.randint(1, 24)
        prods, cons = _random_group(rng, size, rng.randint(1, 3)), _random_group(rng, size, rng.randint(1, 3))
        try:
            plans = direct_plans(prods, cons)
        except ReshardError:
            continue  # some canonical byte no producer holds
        built += 1
        truth = torch.randint(0, 256, (3, size), dtype=torch.uint8)  # replicas hold the same bytes
        kvs = [torch.zeros(3, m.local_page_size_bytes, dtype=torch.uint8) for m in prods]
        for kv, m in zip(kvs, prods):
            for r in m.runs:
                for lo, co, n in r.triples():
                    kv[:, lo:lo + n] = truth[:, co:co + n]
        for p, m in zip(plans, cons):
            assert all(r.src_stride >= 0 and r.dst_stride >= 0 for r in p.runs)
            out = torch.zeros(3, m.local_page_size_bytes, dtype=torch.uint8)
            execute(p, kvs, torch.arange(3), out, torch.arange(3))
            for r in m.runs:
                for lo, co, n in r.triples():
                    for k in range(n):
                        assert torch.equal(out[:, lo + k], truth[:, co + k])
    assert built > 100


def test_a_mapping_that_copies_one_byte_twice_is_refused():
    twice = CanonicalPageMapping(8, 4, (CopyRun(0, 0, 4, 1, 4, 4), CopyRun(0, 4, 4, 1, 4, 4)), 1, 0, True)
    whole = CanonicalPageMapping(8, 8, (CopyRun(0, 0, 8, 1, 8, 8),), 1, 0, True)
    with pytest.raises(ConfigError, match="share local byte 0"):
        direct_plans([twice], [whole])
    with pytest.raises(ConfigError, match="share local byte 0"):
        plan(twice, torch.zeros(2, 4, dtype=torch.uint8))


@pytest.mark.parametrize("text", ["tp=0", "pcp=0", "dcp=-1", "pcp_replicas=-1"])
def test_parallel_sizes_below_one_are_refused_by_name(text):
    with pytest.raises(ConfigError, match="expected at least"):
        parse_config(text)


# ---- the concrete page format: one family at other sizes is another format ------------------

def test_opaque_pages_of_two_configurations_are_two_formats():
    """The fallback's canonical page is the group's pages side by side: 2 x 256 bytes and
    1 x 512 bytes are one size and one family, but not one format."""
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig
    d = Deriver()
    two = d.derive(LayerSpec("other", 256), None, ParallelConfig(2, 1)).mappings
    one = d.derive(LayerSpec("other", 512), None, ParallelConfig(1, 1)).mappings
    assert two[0].canonical_page_size_bytes == one[0].canonical_page_size_bytes == 512
    assert two[0].layout_id == one[0].layout_id and two[0].format_id != one[0].format_id
    with pytest.raises(ReshardError, match="page format"):
        direct_plans(two, one)
    assert direct_plans(two, d.derive(LayerSpec("other", 256), None, ParallelConfig(2, 1)).mappings)


@pytest.mark.parametrize("a, b, same", [((2, 8, 4), (4, 8, 4), True), ((2, 8, 4), (2, 4, 8), False),
                                        ((1, 8, 4), (8, 8, 4), True)])
def test_an_agnostic_format_is_one_across_tp_and_another_at_other_sizes(a, b, same):
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout
    d, out = Deriver(), []
    for tp, heads, dim in (a, b):
        kv = torch.zeros(1, 2, 4, max(heads // tp, 1), dim, dtype=torch.bfloat16)
        res = d.derive(LayerSpec("attention", kv[0].numel() * 2, 4, kv.shape[3], dim, 2), TensorLayout.of(kv),
                       ParallelConfig(tp, heads))
        assert res.result == "certified", res.reasons
        out.append(res.mappings)
    assert out[0][0].canonical_page_size_bytes == out[1][0].canonical_page_size_bytes
    assert (out[0][0].format_id == out[1][0].format_id) == same
    if not same:
        with pytest.raises(ReshardError, match="page format"):
            direct_plans(out[0], out[1])


# ---- pages of regions: Mamba2 state across TP, proved and moved -----------------------------

MAMBA = dict(conv_kernel=4, conv_bytes=2, ssm_bytes=4, ssm_heads=8, ssm_head_dim=4, state_size=2)


def _mamba(tp, groups, pad=6):
    """Every rank's mapping of a padded Mamba2 page (groups sharded, or one copied when fewer than tp)."""
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig
    here = groups // tp if groups % tp == 0 else 1
    page = 2 * 3 * (8 // tp * 4 + 2 * here * 2) + 4 * (8 // tp) * 4 * 2 + pad
    names = {**MAMBA, "n_groups": groups}
    res = Deriver().derive(LayerSpec("mamba2", page, sizes=names), None, ParallelConfig(tp, 1))
    assert res.result == "certified", res.reasons
    return res.mappings, dict(tp=tp, pcp=1, dcp=1, interleave=1, conv_dim_first=0, page_size=page, **names)


@pytest.mark.parametrize("a, b, groups", [(2, 4, 2), (4, 1, 1), (1, 4, 2)])
def test_direct_plans_of_padded_pages_are_proved_and_a_wrong_one_refuted(a, b, groups):
    from layoutalg.plans.reshard import DirectPlan
    (xm, xs), (ym, ys) = _mamba(a, groups), _mamba(b, groups)
    plans = direct_plans(xm, ym)          # the consumers' padding is written by no plan
    budget = Budgets.of().config
    rows = prove_plans(load_default(), "mamba2", xs, ys, plans, budget)
    assert [(r.obligation, r.status) for r in rows] == [("reshard-cover", "proved"), ("reshard-match", "proved")]
    p, r0 = plans[0], plans[0].runs[0]
    shifted = DirectPlan(p.consumer, (r0._replace(src_offset=r0.src_offset + 2),) + p.runs[1:],
                         p.local_page_size_bytes, p.producer_page_size_bytes)
    rows = prove_plans(load_default(), "mamba2", xs, ys, (shifted,) + plans[1:], budget)
    assert rows[1].status == "refuted" and "read from a producer byte holding another canonical byte" in rows[1].detail
    pad = p.local_page_size_bytes - 6     # the consumer's padding, written from the producer's
    padded = DirectPlan(p.consumer, p.runs + (r0._replace(dst_offset=pad, fragment_size=2, num_fragments=1),),
                        p.local_page_size_bytes, p.producer_page_size_bytes)
    rows = prove_plans(load_default(), "mamba2", xs, ys, (padded,) + plans[1:], budget)
    assert rows[0].status == "refuted", rows[0]
    with pytest.raises(ReshardError, match="the plan writes local bytes .* but the consumer's mapping holds"):
        check_plan(padded, xm, ym[p.consumer])


def test_reshard_of_mamba_state_across_processes():
    """tp=2 to tp=1 with one group (B and C copied on both producers): 2 + 1 rank processes."""
    names = [f"--size={n}={v}" for n, v in {**MAMBA, "n_groups": 1}.items()]
    proc = _cli("--family", "mamba2", "--store", "tp=2", "--load", "tp=1", "--blocks", "4", "--layers", "2",
                "--direct", *names)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reshard-match  proved" in proc.stdout and proc.stdout.strip().splitlines()[-1] == "2 passed, 0 failed"
    missing = _cli("--family", "mamba2", "--store", "tp=4", "--load", "tp=2")
    assert missing.returncode == 2 and "give each with --size NAME=VALUE" in missing.stderr


def _byte_map(plans):
    return [{(r.producer, s + i, d + i) for r in p.runs for s, d, n in r.triples() for i in range(n)} for p in plans]


@pytest.mark.parametrize("family, heads, store, load", [
    ("split_nhd", 8, "tp=8", "tp=2"), ("split_nhd", 4, "tp=8", "tp=2"), ("split_hnd", 8, "tp=2", "tp=4"),
    ("packed_hnd", 8, "tp=1", "tp=8"), ("mla", 1, "tp=4", "tp=2"),
    ("split_nhd", 2, "tp=4,dcp=2,interleave=2", "tp=8,dcp=2,interleave=2"),
    ("quant_split", 4, "tp=2", "tp=4"), ("quant_packed", 4, "tp=4", "tp=1")])
def test_the_direct_plan_is_composed_in_the_algebra(family, heads, store, load):
    """The runtime composes the plans from the groups' tilings (`direct`, the same pieces the
    all-sizes proof checks), not from byte intervals; they move the bytes the fragments' composition does."""
    import dataclasses
    from layoutalg.plans.reshard import _composed
    x, y = _group(family, heads, store), _group(family, heads, load)
    assert _composed(x.mappings, y.mappings) is not None
    bare = [[dataclasses.replace(m, tilings=()) for m in g.mappings] for g in (x, y)]
    assert _composed(*bare) is None
    assert _byte_map(direct_plans(x.mappings, y.mappings)) == _byte_map(direct_plans(*bare))


def test_a_tiling_that_is_not_the_runs_is_not_used():
    """The tiling only proposes the plan; the runs certify it. A tiling whose two local digits
    swap canonical strides proposes a plan that reads the wrong bytes: the certificate refuses it,
    and the plan is composed from the runs instead (as for ranks listed in another order)."""
    import dataclasses
    from layoutalg.plans.reshard import DirectPlan, _composed, _merged, _strided
    x, y = _group("split_hnd", 8, "tp=2"), _group("split_hnd", 8, "tp=4")
    (t,) = y.mappings[0].tilings
    i, j = next((i, j) for i in range(len(t.local)) for j in range(i) if t.local[i].extent == t.local[j].extent
                and t.local[i].canonical != t.local[j].canonical)
    local = list(t.local)
    local[i], local[j] = local[i]._replace(canonical=local[j].canonical), local[j]._replace(canonical=local[i].canonical)
    wrong = [dataclasses.replace(m, tilings=(t._replace(local=tuple(local)),)) for m in y.mappings]
    proposed = DirectPlan(0, _strided(_merged(_composed(x.mappings, wrong)(0))), wrong[0].local_page_size_bytes,
                          x.mappings[0].local_page_size_bytes)
    with pytest.raises(ReshardError, match="hold canonical"):
        check_plan(proposed, x.mappings, wrong[0])
    right = direct_plans(x.mappings, y.mappings)
    assert direct_plans(x.mappings, wrong) == right
    reordered = direct_plans(x.mappings[::-1], y.mappings)        # producers listed in another order
    assert _byte_map(reordered) == [{(len(x.mappings) - 1 - p, a, b) for p, a, b in m} for m in _byte_map(right)]


def test_a_plan_is_one_whichever_way_it_was_composed():
    """A producer's gather and a consumer's scatter built apart (one from mappings with tilings,
    one from the reference's six fields) must agree on the order of the bytes: a byte map has one plan."""
    import dataclasses
    for family, heads, a, b in [("split_hnd", 8, "tp=2", "tp=4"), ("split_nhd", 4, "tp=8", "tp=2"),
                                ("quant_split", 4, "tp=4", "tp=2")]:
        x, y = _group(family, heads, a), _group(family, heads, b)
        bare = [[dataclasses.replace(m, tilings=()) for m in g.mappings] for g in (x, y)]
        assert direct_plans(x.mappings, y.mappings) == direct_plans(*bare), (family, a, b)


def test_a_plan_of_floats_is_validated_even_after_its_equal_of_ints():
    from layoutalg.copy.direct import gather
    x, y = _group("split_hnd", 8, "tp=2"), _group("split_hnd", 8, "tp=4")
    p = direct_plans(x.mappings, y.mappings)[0]
    kvs, _, blocks = _filled(x)
    gather(p, p.runs[0].producer, kvs[p.runs[0].producer], blocks)
    floats = p._replace(runs=(p.runs[0]._replace(src_offset=float(p.runs[0].src_offset)),) + p.runs[1:])
    assert floats == p
    with pytest.raises(ReshardError):
        gather(floats, p.runs[0].producer, kvs[p.runs[0].producer], blocks)


@pytest.mark.parametrize("how", ["a float extent", "a bool stride", "an extent past the page", "not a tuple",
                                 "a base past the page", "a rank stride of 0", "no canonical base",
                                 "owners that overlap"])
def test_a_tiling_from_outside_that_is_no_tiling_of_the_pages_is_not_composed(how):
    """A tiling is only used where it is ints numbering exactly the pages and the group (so nothing
    it enumerates is unbounded); otherwise the runs' fragments are composed, and the plan is the same."""
    import dataclasses
    from layoutalg.plans.reshard import _composed
    x, y = _group("split_hnd", 8, "tp=2"), _group("split_hnd", 8, "tp=4")
    (t,) = y.mappings[0].tilings
    first = t.local[0]
    bad = {"a float extent": (t._replace(local=(first._replace(extent=float(first.extent)),) + t.local[1:]),),
           "a bool stride": (t._replace(local=(first._replace(local=True),) + t.local[1:]),),
           "an extent past the page": (t._replace(local=(first._replace(extent=first.extent * 10 ** 9),)
                                                  + t.local[1:]),),
           "not a tuple": "tiling", "a base past the page": (t._replace(canonical_base=1),),
           "a rank stride of 0": (t._replace(ranks=tuple(r._replace(rank=0) for r in t.ranks)),),
           "no canonical base": (tuple(t)[:2],),
           "owners that overlap": (t._replace(local=tuple(d._replace(canonical=1) for d in t.local)),)}[how]
    wrong = [dataclasses.replace(m, tilings=bad) for m in y.mappings]
    assert _composed(x.mappings, wrong) is None
    assert _byte_map(direct_plans(x.mappings, wrong)) == _byte_map(direct_plans(x.mappings, y.mappings))


@pytest.mark.parametrize("a, b, groups", [(2, 4, 2), (4, 1, 1), (1, 4, 4), (8, 2, 2)])
def test_pages_of_regions_are_composed_in_the_algebra_region_by_region(a, b, groups):
    """A padded Mamba2 page: each region's tilings refined on their own (B and C replicated when
    there are fewer groups than ranks, x sharded), the same bytes as the fragments' composition."""
    import dataclasses
    from layoutalg.plans.reshard import _composed
    (xm, _), (ym, _) = _mamba(a, groups), _mamba(b, groups)
    assert len(xm[0].tilings) == 4 and _composed(xm, ym) is not None
    bare = [[dataclasses.replace(m, tilings=()) for m in g] for g in (xm, ym)]
    assert _composed(*bare) is None
    assert _byte_map(direct_plans(xm, ym)) == _byte_map(direct_plans(*bare))


def test_gather_and_scatter_check_the_tensors_the_mappings_were_derived_for():
    """A direct plan carries both groups' tensor views: a tensor of another layout but the right
    page size (HND strides given to an NHD plan) is refused before a byte moves, as a copy plan does."""
    from layoutalg.errors import LayoutMismatch
    from layoutalg.copy.direct import gather, scatter
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

    def group(tp):
        layer = LayerSpec("attention", 2 * 4 * (8 // tp) * 16 * 2, block_size=4, num_kv_heads=8 // tp, head_size=16,
                          dtype_bytes=2)
        kv = torch.zeros(3, 2, 4, 8 // tp, 16, dtype=torch.bfloat16)
        res = Deriver().derive(layer, TensorLayout.of(kv), ParallelConfig(tp=tp, total_kv_heads=8), 3)
        assert res.family == "split_nhd", res.reasons
        return res.mappings, kv
    (xm, xkv), (ym, ykv) = group(2), group(4)
    p = direct_plans(xm, ym)[1]
    assert p.producer_tensors == xm[0].tensors and p.consumer_tensors == ym[1].tensors
    src = p.runs[0].producer
    hnd = torch.zeros(3, 2, 8 // 2, 4, 16, dtype=torch.bfloat16).transpose(2, 3)     # HND strides, NHD shape
    with pytest.raises(LayoutMismatch, match="not the tensor 'kv' the mapping was derived for"):
        gather(p, src, hnd, [0, 1])
    data = gather(p, src, xkv, [0, 1])
    wrong = torch.full((3, 2, 8 // 4, 4, 16), 7, dtype=torch.bfloat16).transpose(2, 3)
    with pytest.raises(LayoutMismatch, match="not the tensor 'kv' the mapping was derived for"):
        scatter(p, src, data, wrong, [0, 1])
    assert bool((wrong == 7).all())
    scatter(p, src, data, ykv, [0, 1])


@pytest.mark.parametrize("device, world, gpus, backend", [
    ("cpu", 4, 0, "gloo"), ("cpu", 4, 8, "gloo"), ("cuda", 4, 4, "nccl"), ("cuda", 6, 8, "nccl"),
    ("cuda", 4, 1, "gloo")])  # NCCL refuses two ranks on one GPU: gloo, through host memory
def test_the_process_group_backend_follows_the_device(device, world, gpus, backend):
    from layoutalg.tools.distributed import backend_for
    assert backend_for(device, world, gpus) == backend


def test_an_unknown_or_absent_device_is_a_clear_error():
    from layoutalg.tools.distributed import backend_for
    with pytest.raises(ConfigError, match="device 'tpu' is not one of cpu, cuda"):
        backend_for("tpu", 2, 0)
    x, y = _group("split_nhd", 4, "tp=2"), _group("split_nhd", 4, "tp=4")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="--device cuda, but torch sees no CUDA device here"):
            reshard(x, y, 1, device="cuda", log=lambda *_: None)


def _failing_worker(rank, job):
    raise ValueError(f"rank {rank} cannot go on")


def test_a_rank_whose_process_fails_is_a_clear_error():
    """Not a traceback from torch.multiprocessing: which rank's failure, in one line."""
    from layoutalg.tools.distributed import _spawn
    with pytest.raises(ConfigError, match=r"reshard: a rank's process failed: ValueError: rank \d cannot go on"):
        _spawn(_failing_worker, {}, 2)


# ---- the byte check trusts the engine's naming, not the spec under test -------------------

def _swapped(tmp_path):
    """tests/data/across/swapped_channels.lal in a folder of its own: channel digits swapped under cp > 1."""
    from conftest import ROOT
    (tmp_path / "grids.lal").write_text((ROOT / "specs" / "grids.lal").read_text())
    text = (ROOT / "tests" / "data" / "across" / "swapped_channels.lal").read_text()
    (tmp_path / "swapped.lal").write_text(text.replace("../../../specs/grids.lal", "grids.lal"))
    return str(tmp_path)


def test_a_conversion_that_gives_other_elements_back_is_refused(tmp_path, monkeypatch):
    """The family tiles and proves every other row at every configuration; its pages of cp 1 and
    cp 2 are not one another's parts element by element. The conversion refuses it twice over:
    `one-format` at the two configurations (Z3, each canonical index one element), and, with that
    taken away, the elements read through the runs, naming the byte."""
    from layoutalg.tools.distributed import library_of
    from layoutalg.verify.conversions import conversion
    import layoutalg.verify.prove.meaning as meaning
    specs = _swapped(tmp_path)
    big = group_of("swapped_channels", parse_config("tp=4,dcp=2"), 2, 4, 4, "bf16", 2, specs=specs)
    small = group_of("swapped_channels", parse_config("tp=2"), 2, 4, 4, "bf16", 4, specs=specs)
    with pytest.raises(LayoutalgError, match="not converted: at the big page's configuration the canonical page is "
                                             "not one format with a single rank's: .* names two elements"):
        conversion(library_of(specs), "swapped_channels", big.sizes, small.sizes)
    monkeypatch.setattr(meaning, "unshown", lambda *a, **k: "")
    with pytest.raises(LayoutalgError, match="not converted: byte .* which holds another element"):
        conversion(library_of(specs), "swapped_channels", big.sizes, small.sizes)
    # the control: split NHD, the same pair of configurations, converts
    big = group_of("split_nhd", parse_config("tp=4,dcp=2"), 2, 4, 4, "bf16", 2)
    small = group_of("split_nhd", parse_config("tp=2"), 2, 4, 4, "bf16", 4)
    conv = conversion(library_of(None), "split_nhd", big.sizes, small.sizes)
    assert conv.k == 2
    # a check that compares nothing passes nothing: a conversion moving no byte is not shown to keep any
    from types import SimpleNamespace
    from layoutalg.verify.oracle import unkept
    empty = SimpleNamespace(mapping=SimpleNamespace(runs=()), small_page=conv.small_page)
    none = unkept(library_of(None), "split_nhd", big.sizes, small.sizes, empty)
    assert "moves no byte" in none and none.check == "format", repr(none)
    assert unkept(library_of(None), "split_nhd", big.sizes, small.sizes, conv) is None


def test_check_refutes_a_family_whose_pages_mean_other_things_under_another_cp():
    """`check` compares pages of one model under two cp element by element (`oracle.unkept_between`)
    and names the shard line; split NHD, read the same way, passes (`test_cli` checks every family)."""
    from conftest import ROOT
    from layoutalg.verify.check import check_family
    from layoutalg.compile.codegen import compile_named
    lib = load_default(ROOT / "tests" / "data" / "across")
    rep = check_family(lib, compile_named(lib, "swapped_channels"))
    assert any("swapped_channels.lal:23: pages of another cp: canonical byte" in e for e in rep.errors), rep.errors
    # the same swap inside one index whose placement reads an expression of it (AITER's c // head_size)
    rep = check_family(lib, compile_named(lib, "swapped_aiter"))
    assert any("swapped_aiter.lal:27: pages of another cp: canonical byte" in e for e in rep.errors), rep.errors
    shipped = load_default(ROOT / "specs")
    assert check_family(shipped, compile_named(shipped, "split_nhd")).errors == []


def test_reshard_fails_a_spec_that_means_other_things_under_two_configurations(tmp_path, monkeypatch, forked):
    """Each byte is named by the engine element it holds (`oracle.naming`): the local layout's
    indices, each a global index by the grid's placements. With the conversion's own element
    check taken away, the pages of the family above move, and the byte check fails every
    loading rank, where the spec's own reading of both layouts (the check before) passed them."""
    from layoutalg.verify import conversions
    from layoutalg.tools.distributed import library_of
    import layoutalg.verify.prove.meaning as meaning
    specs = _swapped(tmp_path)
    store = group_of("swapped_channels", parse_config("tp=2"), 2, 4, 4, "bf16", 4, specs=specs)
    load = group_of("swapped_channels", parse_config("tp=4,dcp=2"), 2, 4, 4, "bf16", 2, specs=specs)
    with monkeypatch.context() as m:  # (taken away for the conversion only: the forked ranks see the library)
        m.setattr(conversions, "_keeps_elements", lambda *a: None)
        m.setattr(meaning, "unshown", lambda *a, **k: "")
        conv = conversions.conversion(library_of(specs), "swapped_channels", load.sizes, store.sizes)
    assert reshard(store, load, 1, conversion=conv, log=lambda *a: None) == (0, 4)
    same = group_of("swapped_channels", parse_config("tp=4"), 2, 4, 4, "bf16", 4, specs=specs)
    assert reshard(store, same, 1, log=lambda *a: None) == (4, 0)  # the control: one cp, one meaning


def test_the_engine_naming_reads_placements_and_reports_what_it_takes_from_the_spec():
    from layoutalg.dsl.library import load
    from layoutalg.verify.oracle import naming
    from conftest import ROOT
    lib = load([ROOT / "specs"])
    sizes = dict(tp=2, pcp=1, dcp=1, interleave=1, total_heads=4, heads=2, block_size=2, head_size=2,
                 dtype_bytes=1, per_token_head_quant=0, page_size=16, pcp_replicas=0)
    ranks = [naming(lib, "split_nhd", sizes, r, 16) for r in range(2)]
    assert all(not n.trusted and n.tokens == 2 for n in ranks)
    # the two ranks hold other heads: no (element, token) is named twice, and every byte is named
    named = [(e, t) for n in ranks for e, t in zip(n.element, n.token)]
    assert all(e >= 0 and 0 <= t < 2 for e, t in named) and len(set(named)) == 32
    # AITER's c < H * D, placed by head(c // head_size): each channel of a head is an element of its own
    aiter = dict(sizes, total_heads=2, heads=1, head_size=4, aiter_kv=1, page_size=16)
    n = naming(lib, "aiter", aiter, 0, 16)
    assert len({(e, t) for e, t in zip(n.element, n.token)}) == 16 and not n.trusted
    inline = load([ROOT / "tests" / "data" / "specs" / "mamba_ssm.lal"])  # tp_rank * local_heads + h, inline
    n = naming(inline, "mamba_ssm", dict(tp=2, pcp=1, dcp=1, ssm_heads=4, head_dim=1, state_size=1, dtype_bytes=1,
                                         page_size=2), 1, 2)
    assert n.trusted == ("mamba_ssm.h: the shard map places it by the rank's digits, not by a grid placement",)
    from layoutalg.verify.oracle import trusted
    assert trusted(inline, "mamba_ssm", dict(tp=2, pcp=1, dcp=1, ssm_heads=4, head_dim=1, state_size=1,
                                             dtype_bytes=1, page_size=2)) == n.trusted  # said without naming a byte
