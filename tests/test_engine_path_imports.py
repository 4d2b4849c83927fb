"""A reshard across cp on the engine's path: pages stored under one cp, converted, loaded under
another, in a fresh process that imports no parser, sympy, Z3 or `layoutalg.verify`. The
conversion's proofs are made offline (`verify.conversions.record`) and read as data
(`plans.conversion.facts`); without them, or after the spec changes, the runtime refuses."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from layoutalg.errors import LayoutalgError
from layoutalg.tools.distributed import group_of, parse_config

from conftest import ROOT

ENGINE = textwrap.dedent("""
    import json, sys
    import torch
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout
    from layoutalg.plans.conversion import conversion
    from layoutalg.copy import plan
    from layoutalg.copy.direct import convert
    a, b, big, small, spec_dir = json.loads(sys.argv[1])

    def side(g):
        res = Deriver(spec_dir).derive(LayerSpec(*g["layer"]), TensorLayout(g["shape"], g["stride"], 2, "torch.bfloat16"),
                                       ParallelConfig(*g["parallel"]), g["blocks"])
        kvs = [torch.empty_strided(g["shape"], g["stride"], dtype=torch.bfloat16) for _ in res.mappings]
        return res.mappings, kvs

    gen = torch.Generator().manual_seed(0)
    (ma, kva), (mb, kvb) = side(a), side(b)
    conv = conversion("split_hnd", big, small, spec_dir)
    for kv in kva:
        kv.view(torch.uint8).copy_(torch.randint(0, 256, kv.view(torch.uint8).shape, generator=gen, dtype=torch.uint8))
    ids_a, ids_b = torch.arange(a["blocks"]), torch.arange(b["blocks"])
    small_pages = torch.zeros(a["blocks"], conv.small_page, dtype=torch.uint8)
    for m, kv in zip(ma, kva):
        plan(m, kv).store(kv, ids_a, small_pages, ids_a)
    big_pages = torch.zeros(b["blocks"], conv.big_page, dtype=torch.uint8)
    convert(conv, big_pages, small_pages, to_small=False)
    for m, kv in zip(mb, kvb):
        kv.zero_()
        plan(m, kv).load(big_pages, ids_b, kv, ids_b)
    again = torch.zeros_like(big_pages)  # every canonical byte back from the loading ranks
    for m, kv in zip(mb, kvb):
        plan(m, kv).store(kv, ids_b, again, ids_b)
    back = torch.zeros_like(small_pages)
    convert(conv, again, back, to_small=True)
    loaded = [n for n in sys.modules if n.split(".")[0] in ("z3", "sympy", "lark") or n.startswith("layoutalg.verify")
              or n.startswith("layoutalg.dsl.") and n != "layoutalg.dsl.sources"]  # (file times: the cache's)
    print(json.dumps({"k": conv.k, "same": bool(torch.equal(again, big_pages) and torch.equal(back, small_pages)),
                      "written": int((small_pages != 0).sum()), "bytes": small_pages.numel(), "loaded": loaded}))
""")


def _group(config: str, blocks: int, specs=None) -> dict:
    g = group_of("split_hnd", parse_config(config), 4, 4, 16, "bf16", blocks, specs=specs)
    s = g.sizes
    return {"layer": ["attention", s["page_size"], s["block_size"], s["heads"], s["head_size"], 2],
            "shape": list(g.shape), "stride": list(g.stride), "blocks": blocks,
            "parallel": [s["tp"], s["total_heads"], s["pcp"], s["dcp"], s["interleave"]], "sizes": s}


def _engine(spec_dir=None):
    a, b = _group("tp=2", 4, spec_dir), _group("tp=8,dcp=2,interleave=2", 2, spec_dir)
    arg = json.dumps([a, b, b["sizes"], a["sizes"], spec_dir])
    return subprocess.run([sys.executable, "-c", ENGINE, arg], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    """A copy of the shipped split HND spec and a proof cache of their own (the records are keyed by spec
    file), shared by this module's tests: split HND's rows are proved once, and each test
    removes or restores what it changes."""
    folder = tmp_path_factory.mktemp("engine_path")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYOUTALG_CACHE", str(folder / "cache"))
        (folder / "specs").mkdir()
        for name in ("grids.lal", "split_hnd.lal"):  # the family and what it imports: one family to compile
            shutil.copy(ROOT / "specs" / name, folder / "specs" / name)
        yield str(folder / "specs")


def _unrecorded(specs) -> None:
    """No record of split HND's conversions (its proved rows stay in the proof cache)."""
    from layoutalg.plans.conversion import record_path
    path = record_path("split_hnd", os.path.join(specs, "split_hnd.lal"))
    if path and os.path.exists(path):
        os.remove(path)


def test_a_reshard_across_cp_imports_no_prover(specs):
    from layoutalg.dsl.library import load_default
    from layoutalg.verify.conversions import record
    _unrecorded(specs)
    proc = _engine(specs)  # nothing on record yet: refused, saying how to prove it
    assert proc.returncode != 0
    assert "layoutalg prove --family split_hnd" in proc.stderr, proc.stderr
    assert record(load_default(specs), "split_hnd") is None
    proc = _engine(specs)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["k"] == 2 and out["same"], out
    assert out["written"] > 0.9 * out["bytes"]  # random bytes stored: the pages are really filled
    assert out["loaded"] == [], out["loaded"]


def test_the_record_is_believed_only_for_the_spec_it_was_proved_of(specs):
    from layoutalg.dsl.library import load_default
    from layoutalg.plans import conversion as data
    from layoutalg.runtime.derive import compiled_library, forget_compiled
    from layoutalg.verify.conversions import record
    assert record(load_default(specs), "split_hnd") is None
    a, b = _group("tp=2", 4, specs), _group("tp=8,dcp=2,interleave=2", 2, specs)
    assert data.conversion("split_hnd", b["sizes"], a["sizes"], specs).k == 2
    path = os.path.join(specs, "split_hnd.lal")
    before = open(path, "rb").read()
    try:
        with open(path, "a") as f:
            f.write("\n# an edit: the record no longer vouches for these bytes\n")
        forget_compiled()
        with pytest.raises(LayoutalgError, match=r"other bytes of .*split_hnd.lal; prove it first: `layoutalg "
                                                 r"prove --family split_hnd`"):
            data.facts(compiled_library(specs)["split_hnd"])
    finally:  # the bytes the record was made of: believed again
        with open(path, "wb") as f:
            f.write(before)
        forget_compiled()
    assert data.facts(compiled_library(specs)["split_hnd"]).token


def test_a_family_whose_sequence_is_refuted_is_not_recorded(tmp_path, monkeypatch):
    """The half-token mutant of test_sequence_bijection: no record, so the runtime refuses it."""
    from test_sequence_bijection import HALF, _library
    from layoutalg.verify.conversions import record
    monkeypatch.setenv("LAYOUTALG_CACHE", str(tmp_path / "cache"))
    why = record(_library(tmp_path, HALF), "halfseq")
    assert "sequence-order" in why and "not proved for all sizes" in why
    assert (why.check, why.family) == ("unproved", "halfseq"), repr(why)  # which test refused, not only its words


def test_a_spec_edited_after_it_was_read_is_not_recorded(tmp_path, monkeypatch):
    """A record vouches for the bytes its proofs read: a file changed on disk since the library
    was parsed (an edit during `layoutalg prove`) gets no record, before any proof is asked."""
    from layoutalg.dsl.library import load
    from layoutalg.plans.conversion import record_path
    from layoutalg.verify.conversions import record
    monkeypatch.setenv("LAYOUTALG_CACHE", str(tmp_path / "cache"))
    for name in ("grids.lal", "split_hnd.lal"):
        shutil.copy(ROOT / "specs" / name, tmp_path / name)
    lib = load([tmp_path / "split_hnd.lal"])
    with open(tmp_path / "grids.lal", "a") as f:
        f.write("\n# edited while the prover ran\n")
    why = record(lib, "split_hnd")
    assert why.startswith("not recorded: ") and "grids.lal changed since the library was read" in why, why
    assert why.check == "stale", repr(why)
    assert not os.path.exists(record_path("split_hnd", str(tmp_path / "split_hnd.lal")))


KEEPER = textwrap.dedent("""
    import io, os, sys
    from layoutalg.cli import prove
    from layoutalg.plans.conversion import record_path
    specs, first, second = sys.argv[1:]
    handed, keep = [], prove._record_conversions
    prove._record_conversions = lambda lib, names, *a: (handed.append(list(names)), keep(lib, names, *a))
    os.environ["LAYOUTALG_CACHE"] = first  # the fork server starts here, under another cache
    prove.prove_paths([specs], out=io.StringIO(), only=["shard-in-range"])
    os.environ["LAYOUTALG_CACHE"] = second
    path = record_path("split_hnd", os.path.join(specs, "split_hnd.lal"))
    prove.prove_paths([specs], use_cache=False, out=io.StringIO())
    kept = os.path.exists(path)
    os.remove(path)
    prove.prove_paths([specs], out=io.StringIO())  # the rows from the cache
    print(kept, os.path.exists(path), handed)  # (a run of `only` rows records nothing)
""")


def test_prove_keeps_the_record_in_the_worker_that_proved_the_rows_and_from_the_cache_after(specs, tmp_path):
    """`layoutalg prove` keeps a family's record where its rows were just proved (the worker), so
    the run ends with the table, in the cache the caller names, whatever the cache was when the
    fork server started; rows read from the cache are recorded by the parent, as before."""
    args = [specs, str(tmp_path / "first"), str(tmp_path / "second")]
    proc = subprocess.run([sys.executable, "-c", KEEPER, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[-2] == "True True [[], ['split_hnd']]", proc.stdout
