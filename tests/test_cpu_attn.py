"""vLLM's CPU attention backend (`specs/cpu_attn.lal`): packed HND's tensor, (blocks, heads,
block_size, 2 * head_size), but per head its K dim-major and then its V token-major, as its
`_C` cache write puts them (tests/engine/test_conform_vllm.py runs that op). Only the backend's
name tells the two apart (`cpu_attn_layout`), which the vLLM adapter reads off the layer."""
import enum
import types

import pytest
import torch

from conftest import ROOT
from layoutalg.copy.executor import plan
from layoutalg.dsl.library import load
from layoutalg.runtime import vllm as adapter
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout
from layoutalg.verify.prove.structural import page_tiles

TOTAL, BS, D, N = 4, 8, 4, 5


def _derive(deriver, tp, said=1, flat=True):
    h = max(1, TOTAL // tp)
    kv = torch.zeros(N, h, BS, 2 * D, dtype=torch.float32)
    tensor = TensorLayout.of(kv.view(N, -1) if flat else kv)
    sizes = {"cpu_attn_layout": said} if said is not None else {}
    return deriver.derive(LayerSpec("attention", kv[0].numel() * 4, BS, h, D, 4, sizes=sizes), tensor,
                          ParallelConfig(tp, TOTAL), N), kv


def test_the_backends_name_settles_what_the_tensor_cannot(deriver):
    said, _ = _derive(deriver, 2)
    unsaid, _ = _derive(deriver, 2, said=None, flat=False)
    tiled, _ = _derive(deriver, 2, said=2, flat=False)
    assert (said.result, said.family) == ("certified", "cpu_attn")
    assert (unsaid.result, unsaid.family) == ("certified", "packed_hnd")
    assert (tiled.result, tiled.family) == ("opaque", "opaque")  # AMX, BFMMLA, fp8: no family reads them
    assert [m.runs for m in said.mappings] != [m.runs for m in unsaid.mappings]


def _coordinates():
    """The whole model's K and V: each element a code of (block, kv, token, head, dim)."""
    b, kv, t, h, d = torch.meshgrid(*(torch.arange(n) for n in (N, 2, BS, TOTAL, D)), indexing="ij")
    return (1 + (((b * 2 + kv) * BS + t) * TOTAL + h) * D + d).to(torch.int32)


def _write(full, tp, rank):
    """A rank's tensor as the backend's op writes it (the layout it was seen to write): per head,
    K[d][t] then V[t][d], the rank's heads cut contiguously (GQA: tp / TOTAL ranks a head)."""
    h = max(1, TOTAL // tp)
    first = rank * h if TOTAL >= tp else rank // (tp // TOTAL)
    part = full[:, :, :, first:first + h, :]                  # (N, 2, BS, h, D)
    k = part[:, 0].permute(0, 2, 3, 1).reshape(N, h, -1)    # (N, h, D, BS): dim-major
    v = part[:, 1].permute(0, 2, 1, 3).reshape(N, h, -1)    # (N, h, BS, D): token-major
    return torch.cat([k, v], dim=2).view(N, h, BS, 2 * D).contiguous()


@pytest.mark.parametrize("src, dst", [(2, 4), (4, 1), (1, 8), (8, 2)])
def test_store_under_one_tp_load_under_another(deriver, src, dst):
    full = _coordinates()
    stored, _ = _derive(deriver, src)
    loaded, _ = _derive(deriver, dst)
    assert stored.family == loaded.family == "cpu_attn"
    pages = torch.zeros(N, stored.mappings[0].canonical_page_size_bytes, dtype=torch.uint8)
    ids = torch.tensor([3, 0, 4, 2, 1])
    for rank, m in enumerate(stored.mappings):
        kv = _write(full, src, rank).view(torch.float32).view(N, -1)
        plan(m, kv).store(kv, torch.arange(N), pages, ids)
    for rank, m in enumerate(loaded.mappings):
        kv = torch.zeros(N, max(1, TOTAL // dst) * BS * 2 * D, dtype=torch.float32)
        plan(m, kv).load(pages, ids, kv, torch.arange(N))
        assert torch.equal(kv.view(torch.int32), _write(full, dst, rank).view(N, -1)), (src, dst, rank)


@pytest.mark.parametrize("role", ["local", "canonical"])
def test_its_two_regions_tile_a_page_for_all_sizes(role):
    """K and V stretches of one head alike inside (each dense): they follow each other under the heads."""
    lib = load([ROOT / "specs" / "cpu_attn.lal"])
    assert page_tiles(lib, "cpu_attn", role).status == "proved"


def _config(backend, isa=None, cache="auto"):
    layer = types.SimpleNamespace(attn_backend=backend, **({} if isa is None else {"isa": isa}))
    return types.SimpleNamespace(compilation_config=types.SimpleNamespace(static_forward_context={"a": layer}),
                                 cache_config=types.SimpleNamespace(cache_dtype=cache))


class CPUAttentionBackend:
    @staticmethod
    def get_name():
        return "CPU_ATTN"


def test_the_adapter_reads_the_backend_by_name():
    spec = types.SimpleNamespace(dtype=torch.float32, block_size=32, head_size=64)
    member = enum.Enum("AttentionBackendEnum", {"CPU_ATTN": "my.own.Backend"}).CPU_ATTN  # a path a deployment set
    assert adapter.cpu_attn_layout(_config(CPUAttentionBackend, "vec"), "a", spec) == (1, None)
    assert adapter.cpu_attn_layout(_config(member, "vec16"), "a", spec) == (1, None)
    assert adapter.cpu_attn_layout(_config(CPUAttentionBackend, "vec"), "b", spec) == (0, None)  # no layer object
    assert adapter.cpu_attn_layout(_config(types.SimpleNamespace(get_name=lambda: "FLASH_ATTN")), "a", spec)[0] == 0
    amx, why = adapter.cpu_attn_layout(_config(CPUAttentionBackend, "amx"), "a", spec)
    assert amx == 2 and "kernel 'amx'" in why and why.check == "kernel"
    assert adapter.cpu_attn_layout(_config(CPUAttentionBackend, "vec", "fp8_e4m3"), "a", spec)[0] == 2


def test_without_layer_isa_the_backends_own_choice_is_asked():
    """Before the metadata builder sets `layer.isa`, the backend module's `_get_attn_isa` decides."""
    import sys
    module = types.ModuleType("fake_cpu_attn")
    module._get_attn_isa = lambda dtype, block_size, head_size, cache: "vec16" if block_size % 32 else "amx"
    backend = type("CPUAttentionBackend", (), {"get_name": staticmethod(lambda: "CPU_ATTN"),
                                               "__module__": "fake_cpu_attn"})
    sys.modules["fake_cpu_attn"] = module
    try:
        for bs, want in ((16, 1), (32, 2)):
            spec = types.SimpleNamespace(dtype=torch.bfloat16, block_size=bs, head_size=64)
            assert adapter.cpu_attn_layout(_config(backend), "a", spec)[0] == want
    finally:
        del sys.modules["fake_cpu_attn"]
