"""`samples.fitted_instance` stops at the first page where a guard fails that fails at every page
(`CompiledFamily.page_free`), and says exactly what trying every page said."""
import itertools
import random

import pytest

from conftest import ROOT
from layoutalg.compile.codegen import compile_family
from layoutalg.compile.compiled import CompiledFamily, GuardFailed
from layoutalg.dsl.library import load
from layoutalg.ir.family import resolve
from layoutalg.verify.samples import fitted_instance, sample_domain

LIB = load([ROOT / "specs"])


def _outcome(cf, sizes):
    try:
        inst, fitted = fitted_instance(cf, dict(sizes))
        return "fits", fitted["page_size"], inst.local_page
    except (GuardFailed, ArithmeticError) as e:
        return type(e).__name__, str(e)


@pytest.mark.parametrize("part", ["split_nhd", "mla", "quant_packed.data", "mamba2.ssm", "nvfp4.v_scales",
                                  "aiter_shuffle.key", "opaque"])
def test_stopping_early_says_what_every_page_said(part, monkeypatch):
    """Over a seeded draw of each family's sample configurations (fitting and refused ones), the
    outcome and message are those with no guard taken as failing at every page, which tries each
    page in turn."""
    cf = compile_family(resolve(LIB, part))
    samples = sample_domain(LIB, cf)
    every = [dict(zip(samples, v)) for v in itertools.product(*samples.values())]
    drawn = random.Random(7).sample(every, min(400, len(every)))
    early = [_outcome(cf, s) for s in drawn]
    monkeypatch.setattr(CompiledFamily, "page_free", lambda self: frozenset())
    assert early == [_outcome(cf, s) for s in drawn]
    assert any(o[0] == "GuardFailed" for o in early)  # (the draw meets refusals: the early stop is exercised)


def test_a_guard_that_reads_the_page_and_all_after_it_are_not_page_free():
    """MLA's `page_size % block_size == 0` reads the page: neither it nor a guard or case after it
    (which a page may then reach otherwise) is taken as failing at every page."""
    cf = compile_family(resolve(LIB, "mla"))
    reads = [(k, j) for k, v in enumerate(cf.source.split("def _variant_")[1:])
             for j in range(len(cf.guards[k])) if f"page_size, block_size, 2) == 0): raise _Guard({k}, {j})" in v]
    assert reads and (0, 3) in reads
    free = cf.page_free()
    assert free == {(0, 0), (0, 1), (0, 2)}, free  # before the first reading of the page only
    assert not free & set(reads)


PAGED = """import "grids.lal"

layout bytes(P):
    index b < P
    offset b

family paged serves fallback:
    grid private
    require page_size >= 2 * block_size        # fails at the first page tried (0), holds at larger ones
    require kv_blocks_second == 0
    local     bytes(page_size)
    canonical bytes(page_size * tp * pcp)
    shard (b) -> (rank * page_size + b)
"""


def test_a_guard_on_the_page_that_fails_at_the_first_page_tried_lets_the_next_pages_be_tried(tmp_path):
    """A guard that reads the page fails at page 0 (where the fit starts) and holds at three
    blocks: the layer fits there, as before any guard was taken as failing at every page; the
    guard after it (no page in it) is not taken so either, as a page may reach it otherwise."""
    (tmp_path / "grids.lal").write_text((ROOT / "specs" / "grids.lal").read_text())
    (tmp_path / "paged.lal").write_text(PAGED)
    lib = load([tmp_path / "paged.lal"])
    cf = compile_family(resolve(lib, "paged"))
    assert cf.page_free() == frozenset()
    sizes = {n: v[0] for n, v in sample_domain(lib, cf).items()}
    inst, fitted = fitted_instance(cf, sizes)
    assert fitted["page_size"] == 3 * sizes["block_size"] == inst.local_page
    with pytest.raises(GuardFailed, match="kv_blocks_second == 0 does not hold"):
        fitted_instance(cf, {**sizes, "kv_blocks_second": 1})
