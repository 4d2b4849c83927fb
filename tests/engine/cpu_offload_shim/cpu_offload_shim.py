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

And, for Mamba2 with prefix caching (mamba cache mode "align", which the connector needs: the
state is stored at block ends), two pieces of `vllm.model_executor.layers.mamba`:

- `ops.ssd_combined._mamba_chunk_scan_combined_fwd` is, on CPU, `ops.cpu.mamba_ssm.
  _mamba_chunk_scan_combined_fwd_cpu`, which ignores `return_intermediate_states` (it returns
  each sequence's final state only), so `mamba_mixer2.conv_ssm_forward` indexes it with chunk
  indices: "IndexError: index 18 is out of bounds for dimension 0 with size 2". Stand-in: where
  intermediate states are asked for, the same CPU op run chunk by chunk (each chunk from the
  previous chunk's state of its sequence), returning the state at every chunk end.
- `ops.ssd_checkpoint.store_prefill_checkpoint` (imported by name into `mamba_mixer2`) is a
  Triton kernel. Stand-in: the same copies in torch (each row's conv history and its chunk's
  state into the row's block).
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
    _mamba_align()


def _mamba_align() -> None:
    import torch
    from vllm.model_executor.layers.mamba import mamba_mixer2
    from vllm.model_executor.layers.mamba.ops import ssd_combined
    from vllm.model_executor.layers.mamba.ops.cpu import mamba_ssm
    if getattr(ssd_combined, "_cpu_offload_shim", False):
        return
    cpu_fwd = mamba_ssm._mamba_chunk_scan_combined_fwd_cpu
    if ssd_combined._mamba_chunk_scan_combined_fwd is not cpu_fwd or not hasattr(mamba_mixer2,
                                                                                  "store_prefill_checkpoint"):
        raise RuntimeError("cpu_offload_shim: vLLM's CPU Mamba2 chunk scan is not the one read")

    def chunk_scan(x, dt, A, B, C, chunk_size, out, D=None, z=None, dt_bias=None, initial_states=None,
                   return_intermediate_states=False, seq_idx=None, cu_seqlens=None, cu_chunk_seqlens=None,
                   last_chunk_indices=None, dt_softplus=False, dt_limit=(0.0, float("inf")), state_dtype=None,
                   **kw):
        if not return_intermediate_states:
            return cpu_fwd(x, dt, A, B, C, chunk_size, out, D=D, z=z, dt_bias=dt_bias,
                           initial_states=initial_states, seq_idx=seq_idx, cu_seqlens=cu_seqlens,
                           cu_chunk_seqlens=cu_chunk_seqlens, last_chunk_indices=last_chunk_indices,
                           dt_softplus=dt_softplus, dt_limit=dt_limit, state_dtype=state_dtype, **kw)
        bounds, seqs = cu_chunk_seqlens.tolist(), seq_idx.tolist()
        nheads, headdim, dstate = x.shape[1], x.shape[2], B.shape[2]
        carry, states = {}, []
        for c, seq in enumerate(seqs):
            s, e = bounds[c], bounds[c + 1]
            if seq not in carry:
                carry[seq] = (initial_states[seq].float() if initial_states is not None else
                              torch.zeros(nheads, headdim, dstate, dtype=torch.float32))
            st = cpu_fwd(x[s:e], dt[s:e], A, B[s:e], C[s:e], chunk_size, out[s:e], D=D,
                         z=None if z is None else z[s:e], dt_bias=dt_bias, initial_states=carry[seq][None],
                         cu_seqlens=torch.tensor([0, e - s], dtype=torch.int32), dt_softplus=dt_softplus,
                         dt_limit=dt_limit, state_dtype=torch.float32)[0]
            carry[seq] = st
            states.append(st)
        out_dtype = state_dtype if state_dtype is not None else x.dtype
        return torch.stack(states).to(out_dtype)

    def store_prefill_checkpoint(checkpoint, chunk_idx, x, conv_state, chunk_states, ssm_state, query_start_loc,
                                 *, state_len):
        offsets, dsts = checkpoint.checkpoint_offsets.tolist(), checkpoint.state_indices.tolist()
        starts, srcs = query_start_loc.tolist(), chunk_idx.tolist()
        for row, off in enumerate(offsets[:len(srcs)]):
            if off <= 0:
                continue
            dst, t = int(dsts[row]), starts[row] + off - state_len
            conv_state[dst, :, :state_len] = x[:, t:t + state_len]
            n = chunk_states[0].numel()
            ssm_state[dst].reshape(-1)[:n] = chunk_states[srcs[row]].reshape(-1).to(ssm_state.dtype)

    ssd_combined._mamba_chunk_scan_combined_fwd = chunk_scan
    mamba_mixer2.store_prefill_checkpoint = store_prefill_checkpoint
    ssd_combined._cpu_offload_shim = True
