"""A declared domain the runtime never serves is said, in `check` and `prove` alike (issue 56).

The runtime serves a family only where its grid is the worker group, tp * pcp ranks (one
group a pipeline stage). A grid of `world tp * pcp * pp_stages` is accepted by the guards at
every pp_stages, yet served only at 1: a warning naming that part. A grid never the group
(`world tp * pcp * 2`) is an error: nothing it proves is of bytes an engine holds."""
from layoutalg.compile.codegen import compile_family
from layoutalg.dsl.library import load
from layoutalg.ir.family import resolve
from layoutalg.verify.check import check_family

SPEC = '''\
# a page holding every layer of a pipeline stage
param layers in 1 .. 64 samples 2, 4 default 2 "layers of the model"
param pp_stages in 1 .. 4 samples 1, 2 default 1 "pipeline stages"

grid staged:
    world {world}
    require total_heads % tp == 0
    require layers % pp_stages == 0
    require pcp == 1
    ranks stage < pp_stages, head_shard < tp
    fn head(h) = head_shard * heads + h
    fn layer(l) = stage * (layers / pp_stages) + l
    require heads == total_heads / tp

layout pool(L, H, T, D, e):
    index l < L, kv < 2, h < H, t < T, d < D
    element e bytes
    tensor (block, ...)

family pool serves attention:
    grid staged
    local     pool(layers / pp_stages, heads, block_size, head_size, dtype_bytes)
    canonical pool(layers, total_heads, block_size, head_size, dtype_bytes)
    shard (l, kv, h, t, d) -> (layer(l), kv, head(h), t, d)
'''


def _lib(tmp_path, world):
    f = tmp_path / "pool.lal"
    f.write_text(SPEC.format(world=world))
    return load([f])


def _check(lib):
    return check_family(lib, compile_family(resolve(lib, "pool")))


def test_check_warns_of_the_part_never_served(tmp_path):
    rep = _check(_lib(tmp_path, "tp * pcp * pp_stages"))
    assert rep.ok and rep.certified > 0 and rep.never_served > 0
    (w,) = rep.warnings
    assert "pool.lal:5: part of the declared domain is never served" in w
    assert "`world tp * pcp * pp_stages`" in w and "pp_stages=2" in w
    assert "the grid has 2 ranks but the worker group has tp * pcp = 1" in w


def test_check_fails_a_family_never_served(tmp_path):
    rep = _check(_lib(tmp_path, "tp * pcp * 2"))
    assert not rep.ok and rep.certified == 0 and not rep.warnings
    assert any("the runtime never serves this family" in e and "`world tp * pcp * 2`" in e for e in rep.errors)


def test_a_grid_that_is_the_group_says_nothing(tmp_path):
    rep = _check(_lib(tmp_path, "tp * pcp"))  # (pp_stages > 1 then breaks the tiling: not this test's)
    assert rep.never_served == 0 and not rep.warnings


def test_prove_says_it_in_the_page_size_row(tmp_path):
    from layoutalg.verify.prove.runner import prove_family
    (tmp_path / "part").mkdir()
    (tmp_path / "never").mkdir()
    rows = {r.obligation: r for r in prove_family(_lib(tmp_path / "part", "tp * pcp * pp_stages"), "pool")}
    page = rows["page-size"]
    assert page.status == "proved" and "warning: part of the declared domain is never served" in page.method
    assert "pp_stages=2" in page.method or "pp_stages=3" in page.method or "pp_stages=4" in page.method
    rows = prove_family(_lib(tmp_path / "never", "tp * pcp * 2"), "pool")
    page = next(r for r in rows if r.obligation == "page-size")
    assert page.status == "refuted" and "never applies" in page.detail and "is not the worker group" in page.detail
    assert not any(r.status == "proved" for r in rows if r.obligation not in ("structure", "page-size"))


def test_a_name_only_an_unused_fn_reads_makes_no_stage_grid(tmp_path):
    """The prover decides a stage grid as the runtime does, by the names the compiled family
    reads: a library fn that mentions pp but that no family uses changes nothing."""
    f = tmp_path / "mine.lal"
    f.write_text('import "grids.lal"\nfn stage_first(l) = l * pp\n'
                 'layout mine(H, D):\n    index h < H, d < D\n'
                 'family mine serves mine:\n    grid private\n    local mine(2, 2)\n    canonical mine(2 * tp * pcp, 2)\n'
                 '    shard (h, d) -> ((pcp_rank * tp + tp_rank) * 2 + h, d)\n')
    lib = load([f])
    rep = check_family(lib, compile_family(resolve(lib, "mine")))
    assert rep.ok and not rep.warnings and rep.never_served == 0
