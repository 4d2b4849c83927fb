"""Reasons are records: every refusal a layer's result carries is a `Reason` that says which test
refused (`check`), of which family, and the dimension, name and values it compares, in fields a
program reads without parsing the sentence; the sentence itself reads as it always did."""
import ast
import copy
import json
import pickle
import shutil

import pytest

from layoutalg import params
from layoutalg.algebra.tiling import broken, chains
from layoutalg.compile.compiled import GuardFailed, at_page
from layoutalg.errors import MissingNames
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import LayerResult, LayerSpec, ParallelConfig, TensorLayout
from layoutalg.runtime.tensors import raw_page, view_mismatch
from layoutalg.mapping import TensorView
from layoutalg.verdicts import Check, Reason

from conftest import ROOT

# bf16 NHD attention, tp=2 of 4 KV heads: (blocks, k|v, tokens, heads, head dim), 2 heads a rank
LAYER = LayerSpec("attention", 2 * 16 * 2 * 64 * 2, 16, 2, 64, 2)
NHD = TensorLayout((5, 2, 16, 2, 64), (4096, 2048, 128, 64, 1), 2)
TP2 = ParallelConfig(tp=2, total_kv_heads=4)


def _of(res, family):
    (why,) = [r for r in res.reasons if r.family == family]
    return why


def test_a_tensor_of_other_strides_is_refused_with_the_dimension_and_strides_as_fields(deriver):
    swapped = TensorLayout(NHD.shape, (4096, 2048, 128, 1, 2), 2)  # heads and head dim transposed in memory
    res = deriver.derive(LAYER, swapped, TP2, 5)
    assert res.result == "opaque" and all(isinstance(r, Reason) for r in res.reasons)
    why = _of(res, "split_nhd")
    assert (why.check, why.name, why.dim, why.expected, why.actual) == (Check.TENSOR, "h", 3, 64, 1), repr(why)
    assert why == "split_nhd: KV tensor dimension 3 (h) has stride 1, expected 64 (elements)"  # the sentence
    guard = _of(res, "flash_nhd")
    assert guard.check is Check.GUARD and "kv_blocks_second == 1 does not hold" in guard
    assert deriver.derive(LAYER, NHD, TP2, 5).result == "certified"  # the control: the engine's own strides


def test_each_check_of_a_layer_says_its_word(deriver, tmp_path):
    world = deriver.derive(LAYER, NHD, ParallelConfig(tp=2, total_kv_heads=4, world_size=4), 5)
    assert [(r.check, r.actual) for r in world.reasons] == [(Check.GROUP, 4)]
    unknown = deriver.derive(LayerSpec("attention", None, 16, 2, 64, 2), NHD, TP2, 5)
    assert (unknown.result, [r.check for r in unknown.reasons]) == ("omitted", [Check.PAGE])
    page = deriver.derive(LayerSpec("attention", 999, 16, 2, 64, 2), NHD, TP2, 5)
    assert (_of(page, "split_nhd").expected, _of(page, "split_nhd").actual) == (999, 8192)
    lo, hi = params.DOMAIN["compress_ratio"]
    far = deriver.derive(LayerSpec("mla", 16 * 576 * 2, 16, 1, 576, 2, compress_ratio=hi + 1), None,
                         ParallelConfig(tp=2, total_kv_heads=1), 5)
    assert far.result == "opaque"
    assert [(r.check, r.name, r.actual) for r in far.reasons if r.check is Check.DOMAIN] == [
        (Check.DOMAIN, "compress_ratio", hi + 1)], far.reasons
    alone = deriver.derive(LAYER, None, TP2, 5)  # no tensor, where the tensor decides between NHD and HND
    assert alone.result == "no_mappings" and alone.reasons[-1].check is Check.TENSOR
    for name in ("grids.lal", "split_nhd.lal"):  # a library of one family and no fallback
        shutil.copy(ROOT / "specs" / name, tmp_path / name)
    none = Deriver(tmp_path).derive(LayerSpec("mla", 16 * 576 * 2, 16, 1, 576, 2), None, TP2, 5)
    assert none.result == "no_mappings" and [r.check for r in none.reasons] == [Check.LIBRARY], none.reasons


def test_a_name_the_layer_lacks_is_a_missing_reason_that_names_it(deriver):
    without = ParallelConfig(tp=2)  # no total_kv_heads: attention families read total_heads
    with pytest.raises(MissingNames, match="total_kv_heads"):
        deriver.derive(LAYER, NHD, without, 5)
    res = deriver.derive(LAYER, NHD, without, 5, strict=False)
    assert res.result == "opaque"
    missing = {r.family: r.name for r in res.reasons if r.check is Check.MISSING}
    assert missing.get("split_nhd") == "total_heads", res.reasons
    assert all(r.check is not Check.MISSING for r in deriver.derive(LAYER, NHD, TP2, 5).reasons)


def test_a_layer_result_holds_reasons_not_bare_sentences():
    with pytest.raises(TypeError, match="LayerResult.reasons: each is a Reason"):
        LayerResult("no_mappings", None, (), ("the page size is unknown",))
    ok = LayerResult("omitted", None, (), (Reason(Check.PAGE, "the page size is unknown"),))
    assert ok.reasons == ("the page size is unknown",)  # a Reason compares as its sentence


def test_a_reason_keeps_its_fields_through_pickle_copy_and_wrapping_and_goes_to_json_as_its_sentence():
    why = Reason(Check.TENSOR, "dimension 2 has stride 4, expected 1", dim=2, expected=1, actual=4)
    for again in (pickle.loads(pickle.dumps(why)), copy.deepcopy(why), copy.copy(why)):
        assert type(again) is Reason and again == why and again.fields() == why.fields()
    assert json.loads(json.dumps({"reasons": [why]})) == {"reasons": [str(why)]}
    told = why.said("tensor (key): ", after=" (elements)").by("split_nhd")
    assert told == "split_nhd: tensor (key): dimension 2 has stride 4, expected 1 (elements)"
    assert (told.family, told.check, told.dim, told.expected, told.actual) == ("split_nhd", "tensor", 2, 1, 4)
    with pytest.raises(ValueError, match="'strides' is not a valid Check"):
        Reason("strides", "no such test")
    with pytest.raises(ValueError, match="says why in words"):
        Reason(Check.PAGE, "")
    with pytest.raises(AttributeError, match="read-only"):
        why.check = Check.PAGE
    with pytest.raises(AttributeError, match="read-only"):
        del why.dim


def test_reasons_said_alike_in_every_layer_are_one_object_and_keep_their_own_fields():
    one, other = Reason(Check.PAGE, "x", expected=1), Reason(Check.PAGE, "x", expected=2)  # one sentence
    assert one.by("f") is one.by("f") and (one.by("f").expected, other.by("f").expected) == (1, 2)
    assert other.by("g") == "g: x" and other.by("g").family == "g"
    assert Reason.shared("guard", "g") is Reason.shared(Check.GUARD, "g")
    assert Reason.shared("tensor", "t", expected=4).expected == 4 != Reason.shared("tensor", "t", expected=5).expected
    listed = Reason(Check.PLAN, "p", expected=[0, 1])  # a field no cache can key: made anew, never refused
    assert listed.by("f").expected == [0, 1] and Reason.shared("plan", "p", actual=[1]).actual == [1]


def test_the_errors_that_carry_a_reason_keep_it_through_pickle():
    from layoutalg.compile.compiled import MissingName
    from layoutalg.runtime.lower import TilingError
    for e in (MissingName("reads 'total_heads'", "total_heads"), GuardFailed("no case holds"),
              GuardFailed(Reason(Check.DOMAIN, "tp = 0 is outside", name="tp")), TilingError("gap")):
        again = pickle.loads(pickle.dumps(e))
        assert (type(again), str(again), again.reason.fields()) == (type(e), str(e), e.reason.fields())
    assert pickle.loads(pickle.dumps(MissingName("m", "heads"))).name == "heads"


def test_a_layer_result_keeps_any_sequence_of_reasons_as_a_tuple():
    why = Reason(Check.PAGE, "the page size is unknown")
    assert LayerResult("omitted", None, (), [why]).reasons == (why,)
    with pytest.raises(TypeError, match="a tuple of Reasons, got generator"):
        LayerResult("omitted", None, (), (r for r in [why]))  # (read once, it would be lost)


def test_the_refusing_functions_answer_none_or_a_reason():
    cf = Deriver().families["split_nhd"]
    sizes = params.configuration(tp=2, total_heads=4, heads=2, block_size=16, head_size=64, dtype_bytes=2)
    inst, fits = at_page(cf, sizes, LAYER.page_size_bytes)
    assert fits is None
    _, short = at_page(cf, sizes, LAYER.page_size_bytes // 2)
    # expected: what the test demands of the thing it checks (here the family's layout); actual: what it has
    page = LAYER.page_size_bytes
    assert (short.check, short.expected, short.actual) == (Check.PAGE, page // 2, page)
    with pytest.raises(GuardFailed) as e:
        cf.evaluate({**sizes, "tp": 4096, "page_size": 1})
    assert (e.value.reason.check, e.value.reason.name, e.value.reason.actual) == (Check.DOMAIN, "tp", 4096)
    assert str(e.value) == e.value.reason
    assert raw_page(TensorLayout((3, 96), (96, 1), 1), 3, 96) is None
    assert raw_page(TensorLayout((3, 96), (192, 2), 1), 3, 96).dim == 1
    fp8 = raw_page(TensorLayout((3, 96), (96, 1), 1, "torch.float8_e4m3fn"), 3, 96)  # one byte, but no raw byte
    assert (fp8.expected, fp8.actual) == (("torch.uint8", "torch.int8"), "torch.float8_e4m3fn")
    view = TensorView("kv", 0, (4, 8), (8, 1), 2)
    assert view_mismatch(view, (3, 4, 8), (32, 8, 1), 2) is None
    odd = view_mismatch(view, (3, 4, 8), (32, 1, 4), 2)
    assert (odd.check, odd.name, odd.dim, odd.expected, odd.actual) == (Check.TENSOR, "kv", 1, 8, 1)
    from collections import namedtuple
    L, R = namedtuple("L", "extent local canonical"), namedtuple("R", "extent rank canonical replica")
    local = [L(4, 1, 1), L(2, 4, 8)]
    assert broken(chains(local, [R(2, 1, 4, False)], 8, 2, 16)) is None
    assert broken(chains(local, [R(2, 1, 8, False)], 8, 2, 16)).check is Check.TILING


def _says_why_with_empty_strings(tree) -> list[str]:
    """Public functions (and public methods of public classes) that return '' and say in their
    docstring that they answer why: the string protocol a `Reason` or None replaces."""
    out = []

    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, scope + [child.name])
            elif isinstance(child, ast.FunctionDef):
                public = not child.name.startswith("_") and not any(s.startswith("_") for s in scope)
                empty = any(isinstance(r, ast.Return) and isinstance(r.value, ast.Constant) and r.value.value == ""
                            for r in ast.walk(child))
                if public and empty and "why" in (ast.get_docstring(child) or "").lower():
                    out.append(".".join(scope + [child.name]))
    visit(tree, [])
    return out


def test_no_public_function_says_why_with_an_empty_string():
    found = {str(p.relative_to(ROOT)): names for p in sorted((ROOT / "layoutalg").rglob("*.py"))
             if (names := _says_why_with_empty_strings(ast.parse(p.read_text())))}
    assert found == {}
    told = ast.parse('def refuse(x):\n    """Why x is refused, or \'\'."""\n    return ""\n'
                     'class _Private:\n    def visit(self):\n        """why"""\n        return ""\n')
    assert _says_why_with_empty_strings(told) == ["refuse"]  # it finds one (and leaves private classes alone)
