"""Tensor recognition: two families of one kind that take one tensor must read it alike.

FlashAttention's `(2, blocks, ...)` and split NHD's `(blocks, 2, ...)` are one shape at two
blocks, AITER's tensor is packed HND's at two heads: only a runtime name tells them apart. A
family that loses that word reads the other engine's tensor in its own order. `layoutalg check`
finds such a pair on the samples (`recognition.confusions`), and the runtime refuses a layer two
families take and copy differently.
"""
from __future__ import annotations

import random
import re
import subprocess
import sys

import pytest
import torch

from conftest import FULL, ROOT
from layoutalg.verify.check import sample_domain
from layoutalg.compile.codegen import compile_named
from layoutalg.dsl.library import load
from layoutalg.verify.prove.together import pairs, together
from layoutalg.verify.recognition import confusions
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

WORDS = {"flash_nhd": "kv_blocks_second == 1", "flash_hnd": "kv_blocks_second == 1", "aiter": "aiter_kv == 1",
         "split_nhd": "kv_blocks_second == 0", "packed_hnd": "aiter_kv == 0"}
"""The word each family's guard says its engine with, and that tells it from a look-alike."""
LOOK_ALIKE = {"flash_nhd": "split_nhd", "flash_hnd": "split_hnd", "aiter": "packed_hnd", "split_nhd": "flash_nhd",
              "packed_hnd": "aiter"}
"""The family each one's word tells it from: one tensor of the same shape and strides."""


def _files(drop: str) -> set[str]:
    """The spec files of the family `drop`, of its look-alike, and what they import."""
    out, todo = set(), [f"{drop}.lal", f"{LOOK_ALIKE[drop]}.lal"]
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo += re.findall(r'^import "(.+)"', (ROOT / "specs" / name).read_text(), re.M)
    return out


def _write(tmp_path, drop: str | None = None, only=None):
    """The shipped spec files (or those named in `only`) in `tmp_path`, `drop`'s word dropped."""
    for f in (ROOT / "specs").glob("*.lal"):
        if only is not None and f.name not in only:
            continue
        text = f.read_text()
        if drop is not None and f.stem == drop:
            text, n = re.subn(rf" and {WORDS[drop]}\b|\b{WORDS[drop]} and |^    require {WORDS[drop]} .*\n", "",
                              text, flags=re.M)
            assert n == 1, (drop, n)
        (tmp_path / f.name).write_text(text)
    return tmp_path


def _library(tmp_path, drop: str | None = None, only=None):
    lib = load([_write(tmp_path, drop, only)])
    return lib, {n: compile_named(lib, n) for n in lib.families}


@pytest.fixture(scope="module")
def shipped():
    """The shipped library and its families as the runtime holds them (from the on-disk cache;
    compiled and stored there where it is cold)."""
    from layoutalg.runtime.derive import compiled_library
    lib = load([ROOT / "specs"])
    families = dict(compiled_library(str(ROOT / "specs")))
    assert sorted(families) == sorted(lib.families)
    return lib, families


def test_the_shipped_library_has_no_two_families_that_read_one_tensor_apart(shipped):
    lib, families = shipped
    together = pairs(lib, families)
    found, tally = confusions(lib, families, sample_domain(lib), together=together)
    assert found == [] and tally.pairs >= 30 and tally.offered > 1000, (found, tally)
    # a word one requires and the other refuses tells most pairs apart at every size
    for a, b in LOOK_ALIKE.items():
        assert together[tuple(sorted((a, b)))].status == "apart", (a, b)
    assert tally.apart >= 40 and tally.found > 0, tally
    assert together[("split_hnd", "split_nhd")].status == "together"  # told apart by the tensor alone


def _split_pair(tmp_path, hnd_guard: str, declare: str = ""):
    for f in ("grids.lal", "split_nhd.lal"):
        (tmp_path / f).write_text((ROOT / "specs" / f).read_text())
    hnd = (ROOT / "specs" / "split_hnd.lal").read_text()
    edited = hnd.replace("family split_hnd serves attention:", declare + "family split_hnd serves attention:").replace(
        "    require kv_blocks_second == 0", "    require kv_blocks_second == 0" + hnd_guard)
    assert edited.count(hnd_guard) == 1 if hnd_guard else True
    (tmp_path / "split_hnd.lal").write_text(edited)
    return load([tmp_path])


def test_a_runtime_name_called_blocks_is_not_the_tensors_block_count(tmp_path):
    """A declared word named `blocks` is the layer's, not the tensor's block count: split HND
    and NHD still take one tensor at one head and one token a block."""
    lib = _split_pair(tmp_path, " and blocks == 0", 'param blocks in 0 .. 1 default 0 "a word"\n\n')
    assert together(lib, "split_hnd", "split_nhd").status == "together"


def test_a_pair_that_meets_only_past_what_is_compared_says_so(tmp_path):
    """Split HND only at head sizes over 2048: the two meet only on pages the comparison does
    not read, which is said (and compared at the samples), never taken for apart."""
    found = together(_split_pair(tmp_path, " and head_size >= 2049"), "split_hnd", "split_nhd")
    assert found.status == "unknown" and "page is over 4096 bytes" in found.why, found


def test_a_look_alike_beyond_the_samples_is_found_where_z3_says_both_apply(tmp_path):
    """A twin of split NHD on a grid that deals the heads round-robin (one tensor, two
    readings) that applies only at a head size no sample has: the samples never offer it a
    layer; Z3 finds the sizes where both apply, and there the two read one tensor apart."""
    grids = (ROOT / "specs" / "grids.lal").read_text()
    text = (ROOT / "specs" / "split_nhd.lal").read_text()
    (tmp_path / "grids.lal").write_text(grids)
    (tmp_path / "split_nhd.lal").write_text(text)
    grid = grids[grids.index("grid heads:"):grids.index("grid latent:")]
    dealt = grid.replace("grid heads:", "grid dealt:").replace("fn head(h) = head_shard * heads + h",
                                                              "fn head(h) = h * shards + head_shard")
    twin = text.replace("layout split_nhd(", "layout twin(").replace(
        "family split_nhd serves attention, before split_hnd:", "family twin serves attention:").replace(
        "split_nhd(heads", "twin(heads").replace("split_nhd(total_heads", "twin(total_heads").replace(
        "grid heads", "grid dealt").replace("    require per_token_head_quant == 0\n",
                                            "    require per_token_head_quant == 0\n"
                                            "    require head_size == 8 and total_heads == 4 and tp == 2\n")
    assert twin.count("require head_size == 8") == 1
    (tmp_path / "twin.lal").write_text(twin + "\n" + dealt)
    lib = load([tmp_path])
    families = {n: compile_named(lib, n) for n in lib.families}
    assert 8 not in sample_domain(lib)["head_size"]
    found, tally = confusions(lib, families, sample_domain(lib))
    assert found == [] and tally.taken == 0, (found, tally)  # the samples never reach it
    together = pairs(lib, families)
    assert together[("split_nhd", "twin")].status == "together", together
    found, tally = confusions(lib, families, sample_domain(lib), together=together)
    assert found and found[0].sizes["head_size"] == 8, (found, tally)
    assert re.search(r"reads byte \d+ of a block's page as", found[0].why), found[0].why


@pytest.mark.parametrize("drop", sorted(WORDS) if FULL else random.Random(35).sample(sorted(WORDS), 1))
def test_a_family_that_loses_the_word_that_tells_it_apart_is_found(tmp_path, capsys, drop):
    """A fresh mutant (seeded; every family's with LAYOUTALG_FULL=1): one family's distinguishing
    guard dropped. `check`'s recognition pass, on that family, its look-alike and what they import
    (the shipped library's pairs are the test above's), names the pair, the tensor and the byte
    they read apart, and fails."""
    from layoutalg.cli.check import _recognition
    lib, families = _library(tmp_path, drop, _files(drop))
    assert _recognition(lib, families) == 1
    found = together(lib, *sorted((drop, LOOK_ALIKE[drop])))  # apart for all sizes only with the word
    assert found.status == "together" and found.found, found
    out = capsys.readouterr().out
    assert re.search(rf"families (\w+ and {drop}|{drop} and \w+) both take a layer of \d block\(s\) with tensor",
                     out), out
    assert "place the tensor's bytes" in out or re.search(r"reads byte \d+ of a block's page as", out), out


def test_check_fails_on_a_pair_that_reads_one_tensor_apart(tmp_path):
    """End to end: `layoutalg check` of FlashAttention's NHD family without its word, beside split NHD."""
    small = _write(tmp_path, "flash_nhd", {"grids.lal", "split_nhd.lal", "flash_nhd.lal"})
    out = subprocess.run([sys.executable, "-m", "layoutalg", "check", str(small)], capture_output=True, text=True)
    assert out.returncode == 1 and "families flash_nhd and split_nhd both take a layer of 2 block(s)" in out.stdout, \
        out.stdout[-2000:]


def test_the_runtime_refuses_a_layer_two_families_take_and_copy_differently(tmp_path):
    """Flash NHD without its word takes split NHD's two-block tensor too: the layer is not
    certified by either (it falls to the opaque fallback, whose page is its writer's only): a library
    of the two, the fallback and the grids they import."""
    D, BS, H = 8, 4, 2
    kv = torch.zeros(2, 2, BS, H, D, dtype=torch.bfloat16)
    layer = LayerSpec("attention", 2 * BS * H * D * 2, block_size=BS, num_kv_heads=H, head_size=D, dtype_bytes=2)
    shipped = Deriver(ROOT / "specs").derive(layer, TensorLayout.of(kv), ParallelConfig(1, H), 2)
    assert (shipped.result, shipped.family) == ("certified", "split_nhd")
    _write(tmp_path, "flash_nhd", {"grids.lal", "split_nhd.lal", "flash_nhd.lal", "opaque.lal"})
    res = Deriver(tmp_path).derive(layer, TensorLayout.of(kv), ParallelConfig(1, H), 2)
    assert res.result != "certified" and any("both take this tensor and place its bytes" in r
                                             for r in res.reasons), res


def test_two_families_that_read_alike_are_no_confusion(tmp_path):
    """A copy of split NHD under another name takes every tensor split NHD takes and reads it
    byte for byte the same: compared, and no finding."""
    text = (ROOT / "specs" / "split_nhd.lal").read_text()
    (tmp_path / "grids.lal").write_text((ROOT / "specs" / "grids.lal").read_text())
    (tmp_path / "split_nhd.lal").write_text(text)
    (tmp_path / "twin.lal").write_text(text.replace("layout split_nhd(", "layout twin(").replace(
        "family split_nhd serves attention, before split_hnd:", "family twin serves attention:").replace(
        "split_nhd(heads", "twin(heads").replace("split_nhd(total_heads", "twin(total_heads"))
    lib = load([tmp_path])
    found, tally = confusions(lib, {n: compile_named(lib, n) for n in lib.families}, sample_domain(lib))
    assert found == [] and tally.taken > 0, (found, tally)
    # the same on a grid whose heads are dealt round-robin over the ranks: one tensor, two readings
    grids = (ROOT / "specs" / "grids.lal").read_text()
    grid = grids[grids.index("grid heads:"):grids.index("grid latent:")]
    assert "fn head(h) = head_shard * heads + h" in grid
    dealt = grid.replace("grid heads:", "grid dealt:").replace("fn head(h) = head_shard * heads + h",
                                                              "fn head(h) = h * shards + head_shard")
    (tmp_path / "twin.lal").write_text((tmp_path / "twin.lal").read_text().replace("grid heads", "grid dealt")
                                       + "\n" + dealt)
    lib = load([tmp_path])
    found, _ = confusions(lib, {n: compile_named(lib, n) for n in lib.families}, sample_domain(lib))
    assert found and re.search(r"reads byte \d+ of a block's page as .* by \w+ and .* by \w+", found[0].why), found
