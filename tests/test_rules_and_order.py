"""The language says things once: `rules` shared by grids (`use`), a dense box's offset from its
index order, `...` in a tensor clause; and the index order of a layout is no part of its format."""
import shutil

import pytest
import sympy

from layoutalg.cli import main
from layoutalg.compile.codegen import compile_named
from layoutalg.ir.family import Atoms, layout_ir, resolve
from layoutalg.ir.identity import layout_id
from layoutalg.dsl.library import load
from layoutalg.verify.prove.store import dependencies
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout
from layoutalg.dsl.syntax import parse

from conftest import ROOT

SPECS = ROOT / "specs"
INLINE_GRIDS = (SPECS / "grids.lal").read_text()


def _inline(text: str) -> str:
    """grids.lal with every `use cp_tokens` replaced by the statements of the rules."""
    start = text.index("rules cp_tokens:")
    body = text[text.index("\n", start) + 1:]
    body = body[:body.index("\n\n")] + "\n"
    return text.replace("    use cp_tokens\n", body)


def _strides(text: str):
    ldef = parse(text).layouts[0]
    ir = layout_ir(ldef, {p: sympy.Symbol(p, integer=True, positive=True) for p in ldef.params}, Atoms())
    return ir.indices, ir.coefficients, ir.base


def test_a_box_without_offset_is_dense_in_index_order():
    A, B, C = sympy.symbols("A B C", integer=True, positive=True)
    dense = _strides("layout l(A, B, C):\n    index a < A, b < B, c < C\n")
    assert dense == _strides("layout l(A, B, C):\n    index a < A, b < B, c < C\n    offset c + C * (b + B * a)\n")
    assert dense == (("a", "b", "c"), (B * C, C, 1), 0)


@pytest.mark.parametrize("clause, dims", [
    ("(block, ...)", ("a", "b", "c")),
    ("(block, c, ...)", ("c", "a", "b")),
    ("(block, ..., a)", ("b", "c", "a")),
    ("(block, b, ..., a)", ("b", "c", "a")),
    ("(block, a, b, c, ...)", ("a", "b", "c")),  # nothing left: '...' stands for no index
])
def test_rest_in_a_tensor_clause_is_the_indices_not_named(clause, dims):
    ldef = parse(f"layout l(A, B, C):\n    index a < A, b < B, c < C\n    tensor {clause}\n").layouts[0]
    assert tuple(n.id for n in ldef.tensor) == dims


def test_a_grid_using_rules_is_the_grid_written_out(tmp_path):
    """The shipped grids with `use cp_tokens` written out: the same formats, runs and proofs' inputs."""
    (tmp_path / "grids.lal").write_text(_inline(INLINE_GRIDS))
    assert "use " not in (tmp_path / "grids.lal").read_text()
    for f in ("split_nhd", "mla"):
        shutil.copy(SPECS / f"{f}.lal", tmp_path / f"{f}.lal")
    used, written = load([SPECS / "split_nhd.lal", SPECS / "mla.lal"]), load([tmp_path])
    for f in ("split_nhd", "mla"):
        a, b = resolve(used, f), resolve(written, f)
        assert layout_id(a) == layout_id(b)
        assert [[g.text for g in v.guards] for v in a.variants] == [[g.text for g in v.guards] for v in b.variants]
        assert compile_named(used, f).source == compile_named(written, f).source
    d_used, d_written = Deriver(SPECS), Deriver(tmp_path)
    for heads, par in ((1, ParallelConfig(tp=4, total_kv_heads=2, dcp=2, interleave=4)),
                       (2, ParallelConfig(tp=2, total_kv_heads=4, pcp=2))):
        layer = LayerSpec("attention", 2 * 16 * heads * 8 * 2, block_size=16, num_kv_heads=heads, head_size=8,
                          dtype_bytes=2)
        tensor = TensorLayout((4, 2, 16, heads, 8), (256 * heads, 128 * heads, 8 * heads, 8, 1), 2, "torch.bfloat16")
        a, b = d_used.derive(layer, tensor, par), d_written.derive(layer, tensor, par)
        assert a.result == b.result == "certified" and a.mappings == b.mappings and len(a.mappings) == 4


def test_rules_change_the_grids_that_use_them(tmp_path):
    """A mutation inside the rules reaches every grid that uses them (it is no dead copy)."""
    bad = INLINE_GRIDS.replace("let cp = dcp * pcp, cp_rank = pcp_rank * dcp + dcp_rank",
                               "let cp = dcp * pcp, cp_rank = pcp_rank")
    assert bad != INLINE_GRIDS
    (tmp_path / "grids.lal").write_text(bad)
    for f in ("split_nhd", "mla"):
        shutil.copy(SPECS / f"{f}.lal", tmp_path / f"{f}.lal")
    lib = load([tmp_path])
    for f in ("split_nhd", "mla"):
        assert layout_id(resolve(lib, f)) != layout_id(resolve(load([SPECS / f"{f}.lal"]), f))


def test_rules_from_a_file_that_is_not_imported_key_the_proof(tmp_path):
    (tmp_path / "rules.lal").write_text("rules whole:\n    ranks tp_rank < tp\n")
    (tmp_path / "f.lal").write_text(
        "grid g:\n    world tp\n    use whole\nlayout a(T):\n    index t < T\n"
        "family f serves fallback:\n    grid g\n    local a(page_size)\n    canonical a(page_size * tp)\n"
        "    shard (t) -> (tp_rank * page_size + t)\n")
    lib = load([tmp_path])
    assert str(tmp_path / "rules.lal") in dependencies(lib, "f")


def test_check_notes_rules_no_grid_uses(tmp_path, capsys):
    (tmp_path / "f.lal").write_text(
        "rules spare:\n    require tp == 1\n"
        "grid g:\n    world tp\n    ranks tp_rank < tp\nlayout a(T):\n    index t < T\n"
        "family f serves fallback:\n    grid g\n    local a(page_size)\n    canonical a(page_size * tp)\n"
        "    shard (t) -> (tp_rank * page_size + t)\n")
    assert main(["check", str(tmp_path / "f.lal")]) == 0
    assert "rules 'spare' are used by no grid loaded with them" in capsys.readouterr().out


def test_the_index_order_of_a_layout_is_not_part_of_its_format(tmp_path):
    """split_hnd as it was written before (index kv, t, h, d and its offset spelt out)."""
    shutil.copy(SPECS / "grids.lal", tmp_path / "grids.lal")
    text = (SPECS / "split_hnd.lal").read_text()
    for old, new in (("index kv < 2, h < H, t < T, d < D", "index kv < 2, t < T, h < H, d < D\n"
                      "    offset d + D * (t + T * (h + H * kv))"),
                     ("shard (kv, h, t, d) -> (kv, head(h), token(t), d)",
                      "shard (kv, t, h, d) -> (kv, token(t), head(h), d)")):
        assert old in text
        text = text.replace(old, new)
    (tmp_path / "old.lal").write_text(text)
    assert layout_id(resolve(load([tmp_path / "old.lal"]), "split_hnd")) == \
        layout_id(resolve(load([SPECS / "split_hnd.lal"]), "split_hnd"))
    # and another memory order is another format, whatever the index clause says
    moved = text.replace("offset d + D * (t + T * (h + H * kv))", "offset d + D * (h + H * (t + T * kv))")
    (tmp_path / "old.lal").write_text(moved)
    assert layout_id(resolve(load([tmp_path / "old.lal"]), "split_hnd")) != \
        layout_id(resolve(load([SPECS / "split_hnd.lal"]), "split_hnd"))
