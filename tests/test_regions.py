"""Pages of several regions: the language, the runtime's certificate, and bytes that come
back under another TP. Each expected page is built here the way the engine lays it out
(vLLM's Mamba2 state shapes, quantised rows), not from the spec, from a hash of every
element's global coordinate."""
import pytest
import torch

from layoutalg.copy.executor import plan
from layoutalg.errors import SpecError
from layoutalg.dsl.library import load
from layoutalg.runtime.records import LayerSpec, ParallelConfig

from conftest import FULL, ROOT



# ---- Mamba2: conv state (K, x | B | C) then SSM state, padded -------------------------

M = dict(ssm_heads=4, ssm_head_dim=4, state_size=2, conv_kernel=4, conv_bytes=2, ssm_bytes=4)


def mamba_full(ng):
    """The whole model's state of one sequence: values that name their coordinate."""
    K, I, N = M["conv_kernel"] - 1, M["ssm_heads"] * M["ssm_head_dim"], M["state_size"]
    width = I + 2 * ng * N
    conv = torch.arange(K * width, dtype=torch.int16).reshape(K, width) + 1
    ssm = torch.arange(M["ssm_heads"] * M["ssm_head_dim"] * N, dtype=torch.int32).reshape(
        M["ssm_heads"], M["ssm_head_dim"], N) + 100000
    return conv, ssm


def mamba_local(ng, tp, rank, pad, ds=False):
    """Rank `rank`'s page as vLLM lays it out: x channels of its heads, its B and C groups
    (one group, copied, when groups are fewer than ranks), then its heads' SSM state. The
    conv state is (K, channels), or with `ds` (channels, K)."""
    conv, ssm = mamba_full(ng)
    I, N = M["ssm_heads"] * M["ssm_head_dim"], M["state_size"]
    xs = I // tp
    g, first = (ng // tp, rank * (ng // tp)) if ng % tp == 0 else (1, rank // (tp // ng))
    parts = [conv[:, rank * xs:(rank + 1) * xs], conv[:, I + first * N:I + (first + g) * N],
             conv[:, I + ng * N + first * N:I + ng * N + (first + g) * N]]
    hs = M["ssm_heads"] // tp
    conv_here = torch.cat(parts, 1).T if ds else torch.cat(parts, 1)
    page = torch.cat([conv_here.contiguous().view(torch.uint8).flatten(),
                      ssm[rank * hs:(rank + 1) * hs].contiguous().view(torch.uint8).flatten()])
    return torch.cat([page, torch.zeros(pad, dtype=torch.uint8)])


def mamba_group(deriver, ng, tp, pad=0, ds=False):
    page = mamba_local(ng, tp, 0, pad).numel()
    sizes = {**M, "n_groups": ng, "conv_dim_first": int(ds)}
    res = deriver.derive(LayerSpec("mamba2", page, sizes=sizes), None, ParallelConfig(tp, 1))
    assert res.result == "certified" and res.family == ("mamba2_ds" if ds else "mamba2"), res.reasons
    return res.mappings


@pytest.mark.parametrize("ng,src,dst,ds", [(4, 1, 2, 0), (4, 2, 4, 0), (4, 4, 1, 0), (1, 4, 2, 0), (1, 2, 4, 0),
                                           (2, 4, 1, 0), (2, 1, 4, 0), (1, 4, 2, 1), (4, 2, 1, 1)])
def test_mamba2_state_stored_under_one_tp_loads_under_another(deriver, ng, src, dst, ds):
    maps = mamba_group(deriver, ng, src, pad=6, ds=ds)
    pages = torch.zeros(5, maps[0].canonical_page_size_bytes, dtype=torch.uint8)
    page_ids, blocks = [3, 0, 4], [0, 2, 1]
    for rank, m in enumerate(maps):
        kv = mamba_local(ng, src, rank, 6, ds).repeat(3, 1)
        plan(m, kv).store(kv, blocks, pages, page_ids)
    # the canonical page is what one rank holds: the whole state, unpadded
    assert torch.equal(pages[3], mamba_local(ng, 1, 0, 0, ds))
    for rank, m in enumerate(mamba_group(deriver, ng, dst, ds=ds)):
        kv = torch.zeros(3, m.local_page_size_bytes, dtype=torch.uint8)
        plan(m, kv).load(pages, page_ids, kv, blocks)
        assert torch.equal(kv[1], mamba_local(ng, dst, rank, 0, ds)), (ng, src, dst, rank)


def test_kernel_first_and_dim_first_pages_are_different_formats(deriver):
    sd, ds = mamba_group(deriver, 4, 2), mamba_group(deriver, 4, 2, ds=True)
    assert sd[0].runs != ds[0].runs and sd[0].layout_id != ds[0].layout_id  # a DS page never reads as SD


def test_mamba2_groups_fewer_than_ranks_are_written_once_per_page(deriver):
    maps = mamba_group(deriver, 1, 4)                 # one group on 4 ranks: B and C are copies
    assert all(m.run_writers for m in maps)
    for page_id in range(4):
        writers = [[r for r in m.written_runs(page_id)] for m in maps]
        b_writers = [rank for rank, runs in enumerate(writers) if len(runs) == 4]
        assert b_writers == [page_id % 4]             # one rank stores the shared groups, by page id
        assert all(len(runs) >= 2 for runs in writers)  # every rank stores its own x and SSM heads


def test_mamba2_page_that_does_not_hold_the_state_fails_closed(deriver):
    page = mamba_local(4, 2, 0, 0).numel()
    res = deriver.derive(LayerSpec("mamba2", page - 2, sizes={**M, "n_groups": 4}), None, ParallelConfig(2, 1))
    assert res.result != "certified"
    assert any("negative extent" in r for r in res.reasons), res.reasons


# ---- quantised KV with per-token-head scales -------------------------------------------

Q = dict(total=4, bs=4, D=6, S=4)


def quant_full():
    g = torch.Generator().manual_seed(5)
    data = torch.randint(0, 255, (2, Q["bs"], Q["total"], Q["D"]), generator=g, dtype=torch.uint8)
    scales = torch.randn(2, Q["bs"], Q["total"], generator=g).to(torch.float32)
    return data, scales


def quant_local(form, tp, rank, align=16):
    data, scales = quant_full()
    h = Q["total"] // tp
    d, s = data[:, :, rank * h:(rank + 1) * h], scales[:, :, rank * h:(rank + 1) * h].contiguous()
    s = s.view(torch.uint8).reshape(2, Q["bs"], h, 4)
    if form == "split":
        return torch.cat([d.flatten(), s.flatten()])
    row = -(-(Q["D"] + Q["S"]) // align) * align
    rows = torch.zeros(h, Q["bs"], 2, row, dtype=torch.uint8)  # vLLM's (heads, block_size, 2 * row) bytes
    rows[..., :Q["D"]], rows[..., Q["D"]:Q["D"] + 4] = d.permute(2, 1, 0, 3), s.permute(2, 1, 0, 3)
    return rows.flatten()


@pytest.mark.parametrize("form,src,dst", [("packed", 2, 4), ("packed", 4, 1), ("split", 1, 2), ("split", 4, 2)])
def test_quantised_kv_with_scales_round_trips(deriver, form, src, dst):
    def group(tp):
        sizes = {"kv_scales": 1 if form == "packed" else 2}
        layer = LayerSpec("attention", quant_local(form, tp, 0).numel(), Q["bs"], Q["total"] // tp, Q["D"], 1,
                          per_token_head_quant=True, sizes=sizes)
        res = deriver.derive(layer, None, ParallelConfig(tp, Q["total"]))
        assert res.result == "certified" and res.family == f"quant_{form}", res.reasons
        return res.mappings
    maps = group(src)
    pages = torch.zeros(2, maps[0].canonical_page_size_bytes, dtype=torch.uint8)
    for rank, m in enumerate(maps):
        kv = quant_local(form, src, rank)[None]
        plan(m, kv).store(kv, [0], pages, [1])
    for rank, m in enumerate(group(dst)):
        kv = torch.zeros(1, m.local_page_size_bytes, dtype=torch.uint8)
        plan(m, kv).load(pages, [1], kv, [0])
        want = quant_local(form, dst, rank)
        if form == "packed":  # padding is never copied: compare the data and scale bytes only
            row = m.local_page_size_bytes // (2 * Q["bs"] * (Q["total"] // dst))
            keep = (torch.arange(want.numel()) % row) < Q["D"] + Q["S"]
            assert torch.equal(kv[0][keep], want[keep]) and not kv[0][~keep].any()
        else:
            assert torch.equal(kv[0], want), (form, src, dst, rank)


def test_packed_and_split_quantised_pages_have_different_ids(deriver):
    ids = {deriver.families[n].layout_id for n in ("quant_packed", "quant_split", "split_nhd")}
    assert len(ids) == 3


# ---- the language: what a page of regions must say -------------------------------------

PAGE = """
layout pg(T):
    region a:
        index t < T
        offset t
    region b:
        index t < T
        offset T + t
{extra}
grid g:
    world tp * pcp
    ranks r < tp * pcp

family f serves thing:
    grid g
    local pg(4)
    canonical pg(4)
{shards}
"""


@pytest.mark.parametrize("extra,shards,message", [
    ("", "    shard a (t) -> (t)\n", "no shard map for region 'b'"),
    ("", "    shard a (t) -> (t)\n    shard b (t) -> (t)\n    shard z (t) -> (t)\n", "region 'z' is not a data region"),
    ("", "    shard (t) -> (t)\n", "layout 'pg' is a page of regions"),
    ("", "    shard a (t) -> (t)\n    shard a (t) -> (t)\n    shard b (t) -> (t)\n", "second 'shard a' clause"),
    ("    pad a:\n        index p < 1\n        offset p\n", "    shard a (t) -> (t)\n", "two regions named 'a'"),
])
def test_page_mistakes_are_spec_errors_at_their_line(tmp_path, extra, shards, message):
    spec = tmp_path / "p.lal"
    spec.write_text(PAGE.format(extra=extra, shards=shards))
    with pytest.raises(SpecError, match=message) as e:
        from layoutalg.compile.codegen import compile_named
        lib = load([spec])
        compile_named(lib, "f")
    assert e.value.span is not None and e.value.span.file.endswith("p.lal")


def test_a_page_that_is_all_padding_is_refused(tmp_path):
    spec = tmp_path / "p.lal"
    spec.write_text("layout pg(T):\n    pad a:\n        index t < T\n        offset t\n")
    with pytest.raises(SpecError, match="all padding"):
        load([spec])


@pytest.mark.parametrize("offset,why", [("T - 1 + t", "byte 3 lies in two regions, 'a' and 'b'"),   # b overlaps a
                                        ("T + 1 + t", "bytes \\[4, 5\\) belong to no region \\(after 'a'\\)")])
def test_regions_that_do_not_tile_are_refused_at_run_time_and_by_the_prover(tmp_path, offset, why):
    from layoutalg.compile.codegen import compile_named
    from layoutalg.runtime.lower import TilingError, lower
    from layoutalg.verify.prove.runner import prove_family
    spec = tmp_path / "p.lal"
    spec.write_text(PAGE.format(extra="", shards="    shard a (t) -> (t)\n    shard b (t) -> (t)\n")
                    .replace("offset T + t", f"offset {offset}"))
    lib = load([spec])
    page = compile_named(lib, "f").evaluate({"tp": 1, "pcp": 1, "page_size": 8})
    with pytest.raises(TilingError, match=why):
        lower(page)
    rows = prove_family(lib, "f", quick=True)
    assert any(r.status == "refuted" for r in rows), [(r.family, r.obligation, r.status) for r in rows]
    from layoutalg.verify.prove.structural import page_tiles
    assert page_tiles(lib, "f", "local").status == "unknown"  # the concatenation argument does not hold


PAGES = {"gdn": {"gdn", "gdn.q", "gdn.k", "gdn.v", "gdn.recurrent", "gdn.tail", "gdn.tail'"},
         "quant_split": {"quant_split.data", "quant_split.scale", "quant_split"}}
"""A shipped family of pages and the rows its proof has: one a region, one a canonical pad (a
name with a prime), and the page's own. The suite proves GDN's (data regions and a pad, a
fifth of quant_split's Z3 time); LAYOUTALG_FULL=1 both (`.ci/proofs` proves every one)."""


@pytest.mark.parametrize("name", sorted(PAGES) if FULL else ["gdn"])
def test_a_family_of_pages_is_proved_for_all_sizes(name):
    from layoutalg.verify.prove.runner import prove_family
    rows = prove_family(load([ROOT / "specs" / f"{name}.lal"]), name)
    assert {r.family for r in rows} == PAGES[name]
    assert [r.obligation for r in rows if r.family == name] == ["regions-tile-local", "regions-tile-canonical"]
    assert all(r.status == "proved" for r in rows), [(r.family, r.obligation, r.status, r.detail) for r in rows]


# ---- gated delta net: conv state (K, q | k | v), recurrent state (value heads, v dim, k dim)

G = dict(gdn_k_heads=2, gdn_v_heads=4, gdn_k_dim=2, gdn_v_dim=3, conv_kernel=3, conv_bytes=2, ssm_bytes=4)


def gdn_local(tp, rank, ds=False):
    """Rank `rank`'s page as vLLM lays it out: its share of the q, k and v conv channels, then
    its value heads' recurrent state; with `ds` the conv state is (channels, K) (dim-first)."""
    K, kd, vd = G["conv_kernel"] - 1, G["gdn_k_heads"] * G["gdn_k_dim"], G["gdn_v_heads"] * G["gdn_v_dim"]
    conv = torch.arange(K * (2 * kd + vd), dtype=torch.int16).reshape(K, 2 * kd + vd) + 1
    rec = torch.arange(G["gdn_v_heads"] * G["gdn_v_dim"] * G["gdn_k_dim"], dtype=torch.int32).reshape(
        G["gdn_v_heads"], G["gdn_v_dim"], G["gdn_k_dim"]) + 7000
    q, v, h = kd // tp, vd // tp, G["gdn_v_heads"] // tp
    parts = [conv[:, rank * q:(rank + 1) * q], conv[:, kd + rank * q:kd + (rank + 1) * q],
             conv[:, 2 * kd + rank * v:2 * kd + (rank + 1) * v]]
    here = torch.cat(parts, 1).T if ds else torch.cat(parts, 1)
    return torch.cat([here.contiguous().view(torch.uint8).flatten(),
                      rec[rank * h:(rank + 1) * h].contiguous().view(torch.uint8).flatten()])


@pytest.mark.parametrize("src,dst,ds", [(2, 1, 0), (1, 2, 0), (2, 1, 1), (1, 2, 1), (2, 2, 1)])
def test_gated_delta_net_state_round_trips(deriver, src, dst, ds):
    def group(tp):
        res = deriver.derive(LayerSpec("gdn_attention", gdn_local(tp, 0).numel(), sizes={**G, "conv_dim_first": ds}),
                             None, ParallelConfig(tp, 1))
        assert res.result == "certified" and res.family == ("gdn_ds" if ds else "gdn"), res.reasons
        return res.mappings
    pages = torch.zeros(1, group(1)[0].canonical_page_size_bytes, dtype=torch.uint8)
    for rank, m in enumerate(group(src)):
        kv = gdn_local(src, rank, ds)[None]
        plan(m, kv).store(kv, [0], pages, [0])
    assert torch.equal(pages[0], gdn_local(1, 0, ds))
    for rank, m in enumerate(group(dst)):
        kv = torch.zeros(1, m.local_page_size_bytes, dtype=torch.uint8)
        plan(m, kv).load(pages, [0], kv, [0])
        assert torch.equal(kv[0], gdn_local(dst, rank, ds))


# ---- pages of regions that must not be proved ------------------------------------------

BROKEN = ROOT / "tests" / "data" / "broken"


def test_regions_that_swap_canonical_places_get_different_ids():
    from layoutalg.compile.codegen import compile_named
    lib = load([BROKEN / "swapped_regions.lal"])
    assert compile_named(lib, "kfirst").layout_id != compile_named(lib, "vfirst").layout_id


def test_agnostic_claim_covers_the_canonical_pads():
    from layoutalg.verify.prove.runner import prove_family
    from layoutalg.verify.prove.meaning import agnostic_rows
    lib = load([BROKEN / "agnostic_pad.lal"])
    rows = prove_family(lib, "f")
    pad = [r for r in rows if r.family == "f.z'" and r.obligation == "one-format"]
    assert pad and pad[0].status == "unknown" and "tp" in pad[0].detail
    # the claim's rows alone are the same rows (each part's and each canonical pad's)
    alone = [(r.family, r.status, r.detail) for r in agnostic_rows(lib, "f")]
    assert alone == [(r.family, r.status, r.detail) for r in rows if r.obligation == "one-format"]
    assert len(alone) > 1


@pytest.mark.parametrize("spec", ["replica_twice", "empty_region", "replica_one_box"])
def test_sound_specs_are_proved_and_run(spec):
    """A replica named twice counts once; an empty region copies nothing; a replica on the shard
    map of one box is the family's."""
    from layoutalg.verify.check import check_family
    from layoutalg.compile.codegen import compile_named
    from layoutalg.verify.prove.runner import prove_family
    lib = load([BROKEN / f"{spec}.lal"])
    assert check_family(lib, compile_named(lib, "f")).ok
    rows = prove_family(lib, "f")
    assert not [r for r in rows if r.status == "refuted"], [(r.family, r.obligation, r.detail) for r in rows]


@pytest.mark.parametrize("regions, message, at", [
    ("    region a:\n        index t < T\n        offset t\n        tensor (block, t)\n",
     "name the one that views this region", "tensor (block"),
    ("    region a:\n        index t < T\n        offset t\n        tensor s (block, t)\n"
     "    region b:\n        index t < T\n        offset T + t\n",
     "region 'b' of layout 'pg' has no tensor view, but region 'a' has one", "region b"),
    ("    region a:\n        index t < T\n        offset t\n        tensor s (block, t)\n"
     "    region b:\n        index t < T, u < 2\n        offset T + 2 * t + u\n        tensor s (block, t, u)\n",
     "views tensor 's' with 2 dimension\\(s\\) after the block \\(t, u\\), region 'a' with 1 \\(t\\)", "tensor s"),
    ("    region a:\n        index t < T, u < 2\n        offset 2 * t + u\n        tensor s (block, (t, u))\n"
     "    region b:\n        index t < T, u < 2\n        offset 2 * T + 2 * t + u\n        tensor s (block, t, u)\n",
     "with 2 dimension\\(s\\) after the block \\(t, u\\), region 'a' with 1 \\(\\(t, u\\)\\)", "tensor s"),
    # a pad is never copied: no tensor, named or not, may view it (issue: data declared a pad in a view)
    ("    region a:\n        index t < T\n        offset t\n        tensor s (block, t)\n"
     "    pad p:\n        index t < T\n        offset T + t\n        tensor q (block, t)\n",
     "pad 'p' is padding, never copied, but names a tensor view: every byte a layer's tensor views may hold",
     "tensor q"),
    ("    region a:\n        index t < T\n        offset t\n        tensor s (block, t)\n"
     "    pad p:\n        index t < T\n        offset T + t\n        tensor (block, t)\n",
     "pad 'p' is padding, never copied, but names a tensor view", "tensor (block"),
    ("    region a:\n        index t < T, u < 2\n        offset 2 * t + u\n        tensor s (block, t)\n",
     "the tensor clause of region 'a' names no dimension for index 'u'", "tensor s"),
    ("    region a:\n        index t < T\n        offset t\n        tensor block (block, t)\n",
     "names its tensor 'block', a reserved name", "tensor block"),
    # one dim meaning h in one region and t in the other: joins only where the extents agree
    ("    region a:\n        index h < 4, t < T\n        offset t + T * h\n        tensor s (block, h, t)\n"
     "    region b:\n        index h < 4, t < T\n        offset 4 * T + h + 4 * t\n        tensor s (block, t, h)\n",
     "views tensor 's' as \\(t, h\\) but region 'a' as \\(h, t\\): the regions of one tensor name the same index",
     "tensor s"),
])
def test_a_page_names_the_tensors_of_every_region_or_none(tmp_path, regions, message, at):
    spec = tmp_path / "p.lal"
    spec.write_text("layout pg(T):\n" + regions)
    with pytest.raises(SpecError, match=message) as e:
        load([spec])
    assert e.value.span.text.strip().startswith(at) and "^" in str(e.value)


def test_a_layout_of_one_box_names_no_tensor(tmp_path):
    spec = tmp_path / "p.lal"
    spec.write_text("layout one(T):\n    index t < T\n    offset t\n    tensor kv (block, t)\n")
    with pytest.raises(SpecError, match="only a region of a page names its tensor"):
        load([spec])


def test_a_layout_of_one_box_merges_no_tensor_dims(tmp_path):
    spec = tmp_path / "p.lal"
    spec.write_text("layout one(T):\n    index t < T, u < 2\n    tensor (block, (t, u))\n")
    with pytest.raises(SpecError, match=r"write a tensor dimension that holds two indices as one index .* "
                                        r"rather than \(t, u\)") as e:
        load([spec])
    span = e.value.span
    assert span.text[span.column - 1:].startswith("(t, u)") and "^" in str(e.value)


def test_a_replica_that_is_no_rank_digit_is_named_where_it_is_written(tmp_path):
    from layoutalg.compile.codegen import compile_named
    spec = tmp_path / "p.lal"
    spec.write_text(PAGE.format(extra="", shards="    shard a (t) -> (t)\n    shard b (t) -> (t) replica t\n"))
    with pytest.raises(SpecError, match="replica 't' is not a rank digit") as e:
        compile_named(load([spec]), "f")
    assert e.value.span.text.strip().startswith("shard b")


def test_check_refuses_an_agnostic_claim_whose_canonical_layout_moves_with_tp():
    from layoutalg.verify.check import check_family
    from layoutalg.compile.codegen import compile_named
    lib = load([BROKEN / "false_agnostic.lal"])
    rep = check_family(lib, compile_named(lib, "f"))
    assert not rep.ok and any("canonical layouts of those cases differ" in e for e in rep.errors), rep.errors
    assert not compile_named(lib, "f").claims_agnostic  # the runtime keys each configuration's pages apart


def test_a_family_of_pages_with_a_sequence_naming_no_index_of_its_regions_is_refused(tmp_path):
    for f in ("mamba2.lal", "state.lal"):
        (tmp_path / f).write_text((ROOT / "specs" / f).read_text())
    text = (tmp_path / "mamba2.lal").read_text().replace("    shard x   (k, j)", "    sequence zz\n    shard x   (k, j)", 1)
    (tmp_path / "mamba2.lal").write_text(text)
    with pytest.raises(SpecError, match="'sequence zz' names no index of every data region"):
        load([tmp_path / "mamba2.lal"])


# ---- no data in a pad: a region of real state declared a pad inside a tensor view -------------

@pytest.mark.parametrize("name", ["mamba2", "mamba2_ds", "gdn", "gdn_ds", "quant_packed"])
def test_state_declared_a_pad_inside_a_tensor_is_a_spec_error(tmp_path, name):
    """A fresh mutant of each shipped page with named tensors (seeded): one data region turned
    into a pad, its shard line dropped. Its tensor would still match the engine's and the pad is
    never copied (vLLM's B|x|C conv rows lost a third of a rank's bytes this way); the spec is
    refused where the pad names its view, with the file, line and a caret."""
    import random
    import re
    text = (ROOT / "specs" / f"{name}.lal").read_text()
    viewed = re.findall(r"^    region (\w+):\n(?:        .*\n)*?        tensor ", text, re.M)
    victim = random.Random(f"pad-{name}").choice(viewed)
    text = text.replace(f"    region {victim}:\n", f"    pad {victim}:\n")
    text = re.sub(rf"^    shard {victim} .*\n", "", text, flags=re.M)
    for f in (ROOT / "specs").glob("*.lal"):
        (tmp_path / f.name).write_text(f.read_text())
    (tmp_path / f"{name}.lal").write_text(text)
    with pytest.raises(SpecError, match=f"pad '{victim}' is padding, never copied, but names a tensor view") as e:
        load([tmp_path / f"{name}.lal"])
    assert e.value.span.file.endswith(f"{name}.lal") and e.value.span.text.strip().startswith("tensor ")
    assert "^" in str(e.value)
