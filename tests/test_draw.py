"""`layoutalg draw`: who writes which bytes, as a picture; the owners it draws are the runs'."""
import subprocess
import sys

import pytest

from layoutalg.tools.draw import cell_bytes, draw, owners, owners_of_reading
from layoutalg.errors import LayoutalgError

from conftest import ROOT
from test_reshard import _group



@pytest.mark.parametrize("config, writers", [("tp=4", 4), ("tp=8", 4), ("tp=8,dcp=2", 8)])
def test_every_canonical_byte_has_one_writer_and_replicas_are_marked(config, writers):
    g = _group("split_nhd", 4, config)
    o = owners(g.mappings)
    assert all(len(w) == 1 for w in o.writers) and len({w[0] for w in o.writers}) == writers
    assert {w[0] for w in o.writers} == {r for r, m in enumerate(g.mappings) if m.is_writer(0)}
    holders, local = o.holders, o.local
    replicated = g.world // writers
    assert set(holders) == {replicated}
    for rank, here in enumerate(local):          # each local byte names a canonical byte its rank holds
        assert -1 not in here and len(set(here)) == len(here)


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_draw_writes_the_picture(tmp_path, suffix):
    g = _group("split_hnd", 4, "tp=8")
    out = tmp_path / f"page.{suffix}"
    line = draw(g.mappings, str(out), "split_hnd tp=8")
    assert out.stat().st_size > 1000 and "8 local pages" in line
    assert cell_bytes(g.mappings)[1]
    if suffix == "svg":
        assert "rank 0 writes" in out.read_text() and "held by more than one rank" in out.read_text()


def test_draw_refuses_what_it_cannot_draw(tmp_path):
    with pytest.raises(LayoutalgError, match=r"\.svg or \.png"):
        draw(_group("mla", 1, "tp=2").mappings, str(tmp_path / "page.pdf"))
    with pytest.raises(LayoutalgError, match="no rank mapping"):
        draw([], str(tmp_path / "page.png"))


def test_draw_command(tmp_path):
    out = tmp_path / "p.png"
    ok = subprocess.run([sys.executable, "-m", "layoutalg", "draw", "specs/split_nhd.lal", "--tp", "2", "--heads", "4",
                         "--block-size", "4", "--head-size", "16", "-o", str(out)], capture_output=True, text=True,
                        cwd=ROOT)
    assert ok.returncode == 0 and out.exists(), ok.stderr
    bad = subprocess.run([sys.executable, "-m", "layoutalg", "draw", "specs/split_nhd.lal", "--tp", "3", "--heads", "4",
                          "-o", str(tmp_path / "q.png")], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1 and "does not apply" in bad.stdout and not (tmp_path / "q.png").exists()


def test_the_spec_reading_agrees_with_the_runs():
    from layoutalg.dsl.library import load_default
    g = _group("split_hnd", 4, "tp=8")
    a, b = owners(g.mappings), owners_of_reading(load_default(), "split_hnd", g.sizes)
    assert (a.writers, a.holders, a.local) == (b.writers, b.holders, b.local)


def test_a_spec_that_does_not_tile_is_drawn_with_its_conflicts(tmp_path):
    """Every rank writes heads 0..heads-1 (the rank is missing from the shard map): two writers
    on the first half of each row, nobody on the rest; draw says so and exits 1."""
    spec = (ROOT / "specs" / "split_nhd.lal").read_text().replace("head(h)", "h")
    (tmp_path / "grids.lal").write_text((ROOT / "specs" / "grids.lal").read_text())
    (tmp_path / "bad.lal").write_text(spec)
    out = tmp_path / "bad.svg"
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "draw", str(tmp_path / "bad.lal"), "--tp", "2",
                           "--heads", "4", "--block-size", "2", "--head-size", "8", "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    assert "the canonical page is not tiled exactly" in proc.stdout
    assert "64 cells with two writers, 64 cells nobody writes" in proc.stdout, proc.stdout
    assert "two writers (64 cells)" in out.read_text() and "drawn from the spec's own reading" in out.read_text()


def test_prove_draws_each_refutation_at_its_counterexample(tmp_path):
    """A shard map that forgets the rank: the refuted rows carry their configuration, and
    `prove --draw` pictures it with the clashes and gaps the counterexample names. The family is
    tests/data/specs/mamba_ssm.lal's (proved whole in seconds, where split NHD's proved rows take
    minutes; split NHD's page that forgets the rank is drawn by the tests above)."""
    text = (ROOT / "tests" / "data" / "specs" / "mamba_ssm.lal").read_text()
    spec = text.replace("-> (tp_rank * local_heads + h, p, n)", "-> (h, p, n)")
    assert spec != text
    (tmp_path / "bad.lal").write_text(spec)
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "prove", str(tmp_path / "bad.lal"), "--no-cache",
                           "--draw", str(tmp_path / "pics")], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1
    assert (tmp_path / "pics" / "mamba_ssm-writers-disjoint.png").stat().st_size > 1000
    assert "cells with two writers" in proc.stdout and "counterexample(s) drawn into" in proc.stdout
    from layoutalg.dsl.library import load
    from layoutalg.verify.prove.runner import Budgets, prove_obligation
    row = prove_obligation(load([tmp_path / "bad.lal"]), "mamba_ssm", "writers-disjoint", {}, Budgets.of())
    assert row.status == "refuted" and row.witness["tp"] >= 2
    assert f"tp={row.witness['tp']}" in row.detail


def test_a_direct_reshard_is_drawn_by_producer(tmp_path):
    """tp 8 -> 2 with 4 heads: each consumer reads from two producers, replicas spread."""
    out = tmp_path / "r.svg"
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "draw", "specs/split_hnd.lal", "--store", "tp=8",
                           "--load", "tp=2", "--heads", "4", "--block-size", "4", "--head-size", "16", "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert all(f"rank {r} feeds" in text for r in (0, 2, 5, 7)) and "rank 1 feeds" not in text
    half = subprocess.run([sys.executable, "-m", "layoutalg", "draw", "specs/split_hnd.lal", "--store", "tp=8",
                           "-o", str(tmp_path / "x.svg")], capture_output=True, text=True, cwd=ROOT)
    assert half.returncode == 2 and "--store and --load go together" in half.stderr


STATE = ["--size", "conv_kernel=3", "--size", "conv_bytes=2", "--size", "ssm_bytes=4", "--size", "ssm_heads=4",
         "--size", "ssm_head_dim=2", "--size", "state_size=2"]


@pytest.mark.parametrize("groups", [1, 4])
def test_a_page_of_regions_read_from_the_spec_agrees_with_the_runs(groups):
    """Mamba2's conv x | B | C and SSM regions, B and C copied on two ranks when groups < tp."""
    from layoutalg.dsl.library import load_default
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig
    names = dict(conv_kernel=3, conv_bytes=2, ssm_bytes=4, ssm_heads=4, ssm_head_dim=2, state_size=2,
                 n_groups=groups)
    page = 2 * 2 * (4 + 2 * max(1, groups // 2) * 2) + 4 * 2 * 2 * 2 + 6   # tp=2, a padded page
    res = Deriver().derive(LayerSpec("mamba2", page, sizes=names), None, ParallelConfig(2, 1))
    assert res.result == "certified", res.reasons
    sizes = dict(tp=2, pcp=1, dcp=1, conv_dim_first=0, page_size=page, **names)
    a, b = owners(res.mappings), owners_of_reading(load_default(), "mamba2", sizes)
    assert (a.writers, a.holders, a.local) == (b.writers, b.holders, b.local)
    assert any(h == 2 for h in b.holders) == (groups == 1)     # copied groups: two holders, one writer


def test_a_page_that_does_not_tile_is_drawn_from_the_spec_with_its_conflicts(tmp_path):
    """B's shard map forgets the group shard: both ranks write the first groups, nobody the rest."""
    for f in ("mamba2.lal", "state.lal"):
        (tmp_path / f).write_text((ROOT / "specs" / f).read_text())
    text = (tmp_path / "mamba2.lal").read_text()
    broken = text.replace("shard b   (k, j) -> (k, by_group(j, groups_here * state_size)) replica group_copy",
                          "shard b   (k, j) -> (k, j) replica group_copy")
    assert broken != text
    (tmp_path / "mamba2.lal").write_text(broken)
    out = tmp_path / "bad.svg"
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "draw", str(tmp_path / "mamba2.lal"), "--tp", "2",
                           *STATE, "--size", "n_groups=4", "-o", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "cells with two writers" in proc.stdout and "cells nobody writes" in proc.stdout, proc.stdout
    assert "drawn from the spec's own reading" in out.read_text() and "ssm_heads=4" in out.read_text()


@pytest.mark.parametrize("store, load, rows", [("tp=8,dcp=2,interleave=2", "tp=2", "consumer 1 (2/2)"),
                                               ("tp=2", "tp=8,dcp=2", "consumer 7")])
def test_a_reshard_across_another_cp_is_drawn_by_producer(tmp_path, store, load, rows):
    """dcp=2 pages hold twice the tokens: small consumers get a row per part of the big page,
    small producers are drawn by their rank (not the virtual part * world + rank)."""
    out = tmp_path / "cross.svg"
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "draw", "specs/split_nhd.lal", "--store", store,
                           "--load", load, "--heads", "4", "--block-size", "4", "--head-size", "16", "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = out.read_text()
    assert rows in text and "bytes are one of 2048" in text
    import re
    ranks = {int(r) for r in re.findall(r"rank (\d+) feeds", text)}
    assert ranks == set(range(8 if store.startswith("tp=8") else 2)), ranks  # real producer ranks, every one


def test_a_refuted_region_is_drawn_as_its_page(tmp_path):
    """A Mamba2 page whose x channels forget the rank: the region's refuted row is pictured as
    the page at its counterexample, the region named."""
    import io
    from layoutalg.dsl.library import load
    from layoutalg.cli.prove import _draw_refutations
    from layoutalg.verify.prove.runner import Budgets, prove_obligation
    for name in ("grids", "state"):
        (tmp_path / f"{name}.lal").write_text((ROOT / "specs" / f"{name}.lal").read_text())
    text = (ROOT / "specs" / "mamba2.lal").read_text()
    old = "shard x   (k, j) -> (k, by_rank(j, heads_here * ssm_head_dim))"
    assert old in text
    (tmp_path / "bad.lal").write_text(text.replace(old, "shard x   (k, j) -> (k, j)"))
    row = prove_obligation(load([tmp_path / "bad.lal"]), "mamba2.x", "writers-disjoint", {}, Budgets.of())
    assert row.status == "refuted" and row.witness["tp"] >= 2
    out = io.StringIO()
    _draw_refutations([str(tmp_path / "bad.lal")], [row], str(tmp_path / "pics"), out)
    assert (tmp_path / "pics" / "mamba2.x-writers-disjoint.png").stat().st_size > 1000
    assert "cells with two writers" in out.getvalue() and "1 counterexample(s) drawn" in out.getvalue()


def test_pictures_name_the_indices_and_bytes(tmp_path):
    """Each page is labelled by the canonical indices its bytes hold (K/V thick, tokens and heads
    where they fit), and each row says its first byte; a page of regions names its regions."""
    from layoutalg.dsl.library import load_default
    from layoutalg.tools.draw import _segments, canonical_names, draw
    lib = load_default()
    g = _group("split_nhd", 2, "tp=2")
    names = canonical_names(lib, "split_nhd", g.sizes)
    assert names[0] == (("kv", 0), ("t", 0), ("h", 0), ("d", 0)) and len(names) == g.mappings[0].canonical_page_size_bytes
    half = len(names) // 2
    assert names[half][0] == ("kv", 1) and names[half - 1][0] == ("kv", 0)
    assert [t for _, t in _segments(names, 0)] == ["kv=0", "kv=1"]
    out = tmp_path / "p.svg"
    draw(g.mappings, str(out), "split", names=names)
    svg = out.read_text()
    assert "kv=1" in svg and "t=1" in svg and "byte 0" in svg
    names = dict(conv_kernel=3, conv_bytes=2, ssm_bytes=4, ssm_heads=4, ssm_head_dim=2, state_size=2, n_groups=1)
    page = 2 * 2 * (4 + 2 * 2) + 4 * 2 * 2 * 2 + 6   # tp=2, a padded page (as the test above)
    regions = canonical_names(lib, "mamba2", dict(tp=2, pcp=1, dcp=1, conv_dim_first=0, page_size=page, **names))
    assert regions[0][0] == ("region", "x") and {n[0][1] for n in regions if n} >= {"x", "b", "c"}
    assert canonical_names(lib, "split_nhd", {**g.sizes, "block_size": 1 << 20}) is None  # too large: no labels


def test_a_reshard_picture_names_the_canonical_bytes_that_move(tmp_path):
    """Each consumer cell is labelled by the canonical element it receives (the global head, by
    the grid's placement), coloured by the producer it comes from."""
    from layoutalg.cli.app import main
    out = tmp_path / "r.svg"
    assert main(["draw", str(ROOT / "specs" / "split_hnd.lal"), "--heads", "4", "--head-size", "8", "--block-size",
                 "4", "--store", "tp=4", "--load", "tp=2", "-o", str(out)]) == 0
    svg = out.read_text()
    assert "h=3" in svg and "kv=1" in svg and "rank 3 feeds" in svg
