"""derive_canonical_mappings with duck-typed vLLM objects, as vLLM's own tests build them."""
import subprocess
import sys
from types import SimpleNamespace

import torch

import layoutalg
from layoutalg import derive_canonical_mappings


class AttentionSpec:
    def __init__(self, block_size, num_kv_heads, head_size, dtype):
        self.block_size, self.num_kv_heads, self.head_size, self.dtype = block_size, num_kv_heads, head_size, dtype
        self.kv_quant_mode = SimpleNamespace(is_per_token_head=False)

    @property
    def real_page_size_bytes(self):
        return 2 * self.block_size * self.num_kv_heads * self.head_size * self.dtype.itemsize


class MLAAttentionSpec(AttentionSpec):
    compress_ratio = 1

    @property
    def real_page_size_bytes(self):
        return self.block_size * self.head_size * self.dtype.itemsize


class MambaSpec:
    page_size_bytes = 4096


def config(tp=2, rank=0, total=4, pcp=1, dcp=1, world=None):
    parallel = SimpleNamespace(tensor_parallel_size=tp, prefill_context_parallel_size=pcp,
                               decode_context_parallel_size=dcp, cp_kv_cache_interleave_size=1,
                               world_size=world if world is not None else tp * pcp, rank=rank)
    return SimpleNamespace(parallel_config=parallel,
                           model_config=SimpleNamespace(get_total_num_kv_heads=lambda: total))


def cache_config(groups, num_blocks=3):
    return SimpleNamespace(num_blocks=num_blocks, kv_cache_groups=[
        SimpleNamespace(kv_cache_spec=spec, layer_names=names) for spec, names in groups])


def test_whole_model_mixed_layers():
    attn = AttentionSpec(16, 2, 64, torch.bfloat16)
    mla = MLAAttentionSpec(16, 1, 576, torch.bfloat16)
    names = [f"layers.{i}.attn" for i in range(4)]
    caches = {n: torch.zeros(3, 2, 16, 2, 64, dtype=torch.bfloat16) for n in names}
    caches["layers.9.mla"] = torch.zeros(3, 16, 576, dtype=torch.bfloat16)
    kv = cache_config([(attn, names), (mla, ["layers.9.mla"]), (MambaSpec(), ["layers.10.mamba"])])
    out = derive_canonical_mappings(config(tp=2, rank=1), kv, caches)
    assert set(out) == set(names) | {"layers.9.mla", "layers.10.mamba"}
    a = out["layers.0.attn"]
    assert a.canonical_page_size_bytes == 2 * a.local_page_size_bytes and a.parallelism_agnostic
    assert out["layers.9.mla"].num_writers == 2 and out["layers.9.mla"].writer_index == 1
    mamba = out["layers.10.mamba"]
    assert tuple(mamba.runs[0]) == (0, 4096, 4096, 1, 4096, 4096) and not mamba.parallelism_agnostic


def test_world_not_the_grid_gives_nothing():
    kv = cache_config([(AttentionSpec(16, 2, 64, torch.float16), ["l0"])])
    caches = {"l0": torch.zeros(3, 2, 16, 2, 64, dtype=torch.float16)}
    assert derive_canonical_mappings(config(tp=2, world=4), kv, caches) == {}


def test_a_list_of_tensors_fails_closed():
    kv = cache_config([(AttentionSpec(16, 2, 64, torch.float16), ["l0"])])
    caches = {"l0": [torch.zeros(3, 16, 2, 64, dtype=torch.float16)] * 2}
    m = derive_canonical_mappings(config(tp=2), kv, caches)["l0"]
    assert m.num_writers == 1 and not m.parallelism_agnostic and len(m.runs) == 1


def test_identical_layers_are_derived_once():
    deriver = layoutalg.Deriver()
    spec = layoutalg.LayerSpec("attention", 8192, 16, 2, 64, 2)
    tensor = layoutalg.TensorLayout((3, 2, 16, 2, 64), (8192 // 2, 2048, 128, 64, 1), 2)
    par = layoutalg.ParallelConfig(tp=4, total_kv_heads=8)
    first = deriver.derive(spec, tensor, par, 3)
    for _ in range(79):
        assert deriver.derive(spec, tensor, par, 3) is first
    assert deriver.derive.cache_info().misses == 1


def test_runtime_never_imports_z3():
    code = ("import sys, layoutalg, torch\n"
            "d = layoutalg.Deriver()\n"
            "t = torch.zeros(3, 2, 16, 2, 64, dtype=torch.float16)\n"
            "r = d.derive(layoutalg.LayerSpec('attention', 8192, 16, 2, 64, 2), layoutalg.TensorLayout.of(t),\n"
            "             layoutalg.ParallelConfig(tp=2, total_kv_heads=4), 3)\n"
            "assert r.result == 'certified'\n"
            "print('z3' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_specs_are_parsed_once_per_process():
    from layoutalg import syntax
    from layoutalg.runtime import compiled_library
    compiled_library()
    before = syntax._parse_cached.cache_info().misses
    layoutalg.Deriver()
    layoutalg.Deriver()
    assert syntax._parse_cached.cache_info().misses == before


def test_precompiled_library_skips_lark_and_sympy(tmp_path):
    code = ("import sys, layoutalg\n"
            "layoutalg.Deriver()\n"
            "print('lark' in sys.modules, 'sympy' in sys.modules)\n")
    env = {**__import__("os").environ, "LAYOUTALG_CACHE": str(tmp_path)}
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert first.stdout.split() == ["True", "True"]      # compiled: parsed and reasoned about
    assert second.stdout.split() == ["False", "False"]   # loaded from the cache
    assert len(list(tmp_path.glob("library-*.json"))) == 1
