"""Test-only vLLM plugin: lets vLLM 0.32's CPU offloading worker (the primary tier of
`TieringOffloadingSpec`) run on vLLM's CPU build, where the engine's KV cache is host memory.
Installed only into layoutalg's engine venv (`.ci/engine`, `pip install --no-deps`); acts only
where `LAYOUTALG_CPU_OFFLOAD_SHIM=1` (tests/engine/engine_reuse.py sets it). Never for production.

What it stands in for, and why (all in `vllm.v1.kv_offload`):

- `cpu.spec.CPUOffloadingSpec.get_worker`: raises "CPU Offloading is currently only supported
  on CUDA-alike and XPU GPUs" on the CPU platform. Stand-in: the same call without the platform
  check (`create_worker`, once).
- `cpu.gpu_worker.SingleDirectionOffloadingHandler.__init__` asserts the engine's KV tensors
  are CUDA or XPU tensors. Stand-in: they are handed over as `_EngineKV`, a CPU tensor that says
  `is_cuda` (only that assert reads it; everything else reads pointers, shapes and strides).
- `cpu.gpu_worker._select_swap_blocks_fn` picks `vllm._custom_ops.swap_blocks_batch`, which calls
  `torch.ops._C_cache_ops.swap_blocks_batch`: the CPU build does not compile that op. Stand-in:
  `_swap_blocks_batch`, the same batch of raw (src, dst, size) copies, each a `ctypes.memmove`
  (synchronous, so it is done when the call returns).
- `torch.Event` as `cpu.gpu_worker` uses it (record on the transfer stream, query, synchronize,
  elapsed_time): the CPU backend raises "cpu backend doesn't support events". Stand-in:
  `_HostEvent`, which records a wall-clock time and is always complete (the copies it follows
  are synchronous). `torch.cpu.Stream` (vLLM's `current_platform.Stream` on CPU) is used as is.
"""
from __future__ import annotations

import ctypes
import os
import time
import types

SWITCH = "LAYOUTALG_CPU_OFFLOAD_SHIM"
TESTED = ("0.32.0",)


def register() -> None:
    if os.environ.get(SWITCH) != "1":
        return
    import torch
    import vllm
    from vllm.platforms import current_platform
    if not current_platform.is_cpu():
        return
    if vllm.__version__ not in TESTED:
        raise RuntimeError(f"cpu_offload_shim stands in for pieces of vLLM {', '.join(TESTED)}'s CPU offloading "
                           f"worker, not {vllm.__version__}'s: read vllm/v1/kv_offload/cpu again")
    from vllm.v1.kv_offload.cpu import gpu_worker, spec
    for name in ("SingleDirectionOffloadingHandler", "_select_swap_blocks_fn", "torch"):
        if not hasattr(gpu_worker, name):
            raise RuntimeError(f"cpu_offload_shim: vllm.v1.kv_offload.cpu.gpu_worker has no {name}")
    if getattr(gpu_worker, "_cpu_offload_shim", False):
        return

    class _EngineKV(torch.Tensor):
        """The engine's (host) KV cache, seen by the handler's device-tensor assert."""
        __torch_function__ = torch._C._disabled_torch_function_impl

        @property
        def is_cuda(self):
            return True

    class _HostEvent:
        def __init__(self, enable_timing: bool = False, **_):
            self.t = time.perf_counter()

        def record(self, stream=None):
            self.t = time.perf_counter()

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            pass

        def wait(self, stream=None) -> None:
            pass

        def elapsed_time(self, end) -> float:
            return (end.t - self.t) * 1e3

    def _swap_blocks_batch(src, dst, sizes, is_src_access_order_any: bool = False) -> None:
        for s, d, n in zip(src.tolist(), dst.tolist(), sizes.tolist()):
            ctypes.memmove(d, s, n)

    def get_worker(self, kv_caches):
        if not self._worker:
            self._worker = self.create_worker(kv_caches)
        return self._worker

    handler_init = gpu_worker.SingleDirectionOffloadingHandler.__init__

    def init(self, gpu_tensors, *args, **kwargs):
        handler_init(self, [t.as_subclass(_EngineKV) for t in gpu_tensors], *args, **kwargs)

    host_torch = types.ModuleType("torch")
    host_torch.__dict__.update(torch.__dict__)
    host_torch.Event = _HostEvent
    spec.CPUOffloadingSpec.get_worker = get_worker
    gpu_worker.SingleDirectionOffloadingHandler.__init__ = init
    gpu_worker._select_swap_blocks_fn = lambda *a, **k: _swap_blocks_batch
    gpu_worker.torch = host_torch
    gpu_worker._cpu_offload_shim = True
