"""Where a canonical index depends on the rank, which slot holds which engine head is the
grid's word (`fn head(h)` in specs/grids.lal), said once. An `agnostic` claim is proved,
compiled and passed by `check` only where every such index is written as the grid's
placement: a family that interleaves or reverses heads still tiles at every tp, but puts
one engine head in another canonical slot at tp=2 than at tp=4 under one page format."""
import shutil

import pytest
import torch

from layoutalg.verify.check import check_family
from layoutalg.compile.codegen import compile_family
from layoutalg.ir.family import resolve
from layoutalg.dsl.library import load
from layoutalg.verify.prove.structural import agnostic_family
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

from conftest import ROOT

SPLIT = (ROOT / "specs" / "split_nhd.lal").read_text().replace("family split_nhd", "family f")
MINE = "\nfn mine(h) = head_shard * heads + h\n"


def _lib(tmp_path, target, *edits):
    shutil.copy(ROOT / "specs" / "grids.lal", tmp_path / "grids.lal")
    text = SPLIT.replace("head(h)", target) + (MINE if "mine" in target else "")
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    (tmp_path / "f.lal").write_text(text)
    return load([tmp_path / "f.lal"])


REQUIRE = "    require per_token_head_quant == 0\n"
PAGE = REQUIRE + "    let hh = page_size / (2 * block_size * head_size * dtype_bytes)\n    let q = total_heads / hh\n"


@pytest.mark.parametrize("target, edits, index, why", [
    ("head(h)", (), None, ""),
    ("head_shard * heads + h", (), "h", "reads the rank (head_shard)"),  # the same bytes, but not the grid's word
    ("h * shards + head_shard", (), "h", "reads the rank (head_shard)"),  # interleaved heads: tiles at every tp
    ("head(heads - 1 - h)", (), "h", "an argument of the grid's head(...)"),  # reversed within each shard
    ("mine(h)", (), "h", "reads the rank (head_shard)"),  # a spec file's own fn is not the grid's word
    # no rank digit, yet a tp=2 page holds dims where a tp=1 page holds others
    ("head(h)", ((REQUIRE, REQUIRE + "    require head_size % tp == 0\n"),
                 ("head(h), d)", "head(h), (d % tp) * (head_size / tp) + d // tp)")), "d", "reads tp"),
    ("head((h % q) * (hh / q) + h // q)", ((REQUIRE, PAGE + "    require hh % q == 0\n"),), "h", "page_size"),
    ("head((h // (k * k)) * k * k + (h % k) * k + (h // k) % k)",
     ((REQUIRE, REQUIRE + "    require k == tp and heads % (k * k) == 0\n"),
      ("import", 'param k in 1 .. 1024 samples 1, 2, 4 "the tp again"\nimport')), "h", "reads tp"),
])
def test_agnostic_needs_the_grid_to_place_what_moves_with_the_rank(tmp_path, target, edits, index, why):
    lib = _lib(tmp_path, target, *edits)
    fam = resolve(lib, "f")
    cert = agnostic_family(fam)
    cf = compile_family(fam)  # (one compile: what check reads and what the runtime would hold)
    errors = [e for e in check_family(lib, cf).errors if "could hold other engine elements" in e]
    if index is None:
        assert cert.status == "proved" and not errors, cert.detail
        assert cf.claims_agnostic
    else:
        assert cert.status == "unknown" and f"canonical index '{index}' could hold other engine elements" \
            in cert.detail and why in cert.detail, cert.detail
        assert errors and "f.lal:" in errors[0]
        assert not cf.claims_agnostic  # the runtime drops a claim the grid does not back


def _format_and_slots(deriver, tp, total=4, bs=2, d=2):
    """The format id and, per engine head g (vLLM: TP rank r holds heads r*H .. r*H+H-1), the
    canonical byte of its (kv=0, t=0, d=0) element."""
    h = total // tp
    kv = torch.empty(3, 2, bs, h, d, dtype=torch.uint8)
    res = deriver.derive(LayerSpec("attention", 2 * bs * h * d, bs, h, d, 1), TensorLayout.of(kv),
                         ParallelConfig(tp=tp, total_kv_heads=total), 3)
    assert res.result == "certified" and res.family == "f"
    slots = {}
    for rank, m in enumerate(res.mappings):
        byte = {lo + b: co + b for r in m.runs for lo, co, n in r.triples() for b in range(n)}
        slots.update({rank * h + j: byte[j * d] for j in range(h)})
    return {m.format_id for m in res.mappings}, slots


def test_interleaved_heads_are_never_one_format_across_tp(tmp_path):
    """Heads interleaved over the shards land elsewhere at tp=2 and tp=4; the
    pages now carry other format ids, so a store never hands one to a reader of the other."""
    _lib(tmp_path, "h * shards + head_shard")
    deriver = Deriver(tmp_path)
    (fa, a), (fb, b) = _format_and_slots(deriver, 2), _format_and_slots(deriver, 4)
    assert a != b and fa.isdisjoint(fb)


def test_placed_heads_are_one_format_in_the_same_slots(tmp_path):
    _lib(tmp_path, "head(h)")
    deriver = Deriver(tmp_path)
    (fa, a), (fb, b) = _format_and_slots(deriver, 2), _format_and_slots(deriver, 4)
    assert a == b and fa == fb


def test_every_shipped_claim_is_placed_by_its_grid():
    lib = load([ROOT / "specs"])
    claims = 0
    for name in lib.families:
        for part in lib.parts_of(name):
            cert = agnostic_family(resolve(lib, part))
            if cert is not None:
                claims += 1
                assert cert.status == "proved", (part, cert.detail)
    assert claims >= 20
