"""run_plan: the runs of a copy map, checked against the map itself."""
from layoutalg.algebra.ops import coalesce, invert_and_compose
from layoutalg.algebra.layout import Layout
from layoutalg.runtime.lower import run_plan
from layoutalg.mapping import CopyRun, merged_triples
from layouts import random_compact


def run_plan_post(C: Layout, plan) -> None:
    """The runs cover [0, C.size()) once, send each byte where C does, and are maximal."""
    offsets, fs, nf, ls, cs = plan
    runs = [CopyRun(lo, co, fs, nf, ls, cs) for lo, co in offsets]
    got = {lo + b: co + b for r in runs for lo, co, n in r.triples() for b in range(n)}
    assert got == {x: C(x) for x in range(C.size())}
    assert sum(n for r in runs for _, _, n in r.triples()) == C.size()
    assert [lo for lo, _ in offsets] == sorted(lo for lo, _ in offsets)
    # maximal fragments: no two fragments would merge
    triples = [t for r in runs for t in r.triples()]
    assert len(merged_triples(runs)) == len(triples) or fs == 1 and C.size() == 1


def test_run_plan_random(rng):
    for _ in range(400):
        A = random_compact(rng)
        B = Layout(A.shape, tuple(rng.choice((1, 2, 3, 4, 24)) for _ in A.shape))
        C = coalesce(invert_and_compose(B, A))
        if sorted(C(i) for i in range(C.size())) != list(range(C.size())):
            continue  # run_plan describes bijective copy maps
        run_plan_post(C, run_plan(C))


def test_whole_page_is_one_run():
    offsets, fs, nf, ls, cs = run_plan(coalesce(Layout((4, 8), (1, 4))))
    assert (offsets, fs, nf) == ([(0, 0)], 32, 1)


def test_strided_fragments_become_one_run():
    # 4 local rows of 16 bytes go to every 64th canonical byte: a single strided run
    offsets, fs, nf, ls, cs = run_plan(Layout((16, 4), (1, 64)))
    assert (offsets, fs, nf, ls, cs) == ([(0, 0)], 16, 4, 16, 64)


def test_fast_path_equals_the_algebra(corpus_rows):
    """lower's integer fast path computes exactly coalesce(invert_and_compose(...))."""
    from layoutalg.runtime.corpus import layer_of
    from layoutalg.runtime.lower import copy_map, fast_copy_map
    from layoutalg.runtime.derive import Deriver, _sizes
    deriver = Deriver()
    seen = 0
    for row in corpus_rows[::7]:
        layer, tensor, par, _ = layer_of(row)
        for cf in deriver._by_kind.get(layer.kind, []) + [deriver.fallback]:
            try:
                inst = cf.evaluate(_sizes(layer, tensor, par))
            except Exception:
                continue
            C = copy_map(inst)
            assert fast_copy_map(inst) == list(zip(C.shape, C.stride)) or C == Layout((1,), (0,))
            seen += 1
    assert seen > 1000


def test_one_certificate_breaks_the_same_way_on_both_paths():
    """`tiling` is the one certificate: the fast path and `certify` refuse the same instances,
    and name the chain that breaks (local page, rank grid, canonical page)."""
    from layoutalg.compile.compiled import LocalDigit, RankDigit
    from layoutalg.runtime.lower import TilingError, certify, fast_copy_map, lower
    from layoutalg.runtime.derive import compiled_library
    import pytest
    inst = compiled_library()["split_nhd"].evaluate(dict(
        tp=2, pcp=1, dcp=1, interleave=1, total_heads=4, heads=2, block_size=2, head_size=2,
        dtype_bytes=1, per_token_head_quant=0, compress_ratio=1, page_size=16))
    assert fast_copy_map(inst) and certify(inst)

    def bend(digits, k, **field):
        return tuple(d._replace(**field) if j == k else d for j, d in enumerate(digits))
    tp = next(k for k, r in enumerate(inst.ranks) if r.extent == 2)
    big = max(range(len(inst.local)), key=lambda k: inst.local[k].local)
    broken = {"local page": inst._replace(local=bend(inst.local, big, local=inst.local[big].local * 2)),
              "rank grid": inst._replace(ranks=bend(inst.ranks, tp, rank=3)),
              "canonical page": inst._replace(ranks=bend(inst.ranks, tp, canonical=inst.ranks[tp].canonical + 1))}
    for what, bad in broken.items():
        assert isinstance(bad.local[0], LocalDigit) and isinstance(bad.ranks[0], RankDigit)
        try:
            assert fast_copy_map(bad) is None, what  # the fast path hands the naming to certify
        except TilingError as e:
            assert f"the {what} " in str(e)
        with pytest.raises(TilingError, match=f"the {what} ") as e:
            lower(bad)
        assert (e.value.reason.check, e.value.reason.family) == ("tiling", "split_nhd")  # the chain's reason, kept
