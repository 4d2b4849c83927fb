"""Copy plans against a plain copy of the same bytes, on the CPU (one thread) or a GPU.

    python benchmarks/copy_bench.py [--device cuda] [--blocks N]

For each layout (rank 1 of its group): store (this rank's runs into canonical pages at
scattered page ids, where it is the writer) and load (those blocks back), in GB/s of
this rank's bytes, against a whole-page `index_select` + `index_copy_` of the same bytes
in the same run (moved as 8-byte words, as the plan moves its fragments): the ratio is the
median over seven rounds of the three back to back (the slower of store and load against
the plain copy); and the descriptors a batched memcpy would need against one per fragment.
With `--device cuda` the tensors and pages live on the GPU (each timing synchronises), and
a first line gives the device's own copy bandwidth (one 1 GiB `copy_`, read + write); a
second table is the offload itself: KV on the GPU, pages in pinned host memory, against
whole pages gathered on the GPU, carried to the host and scattered there.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from layoutalg.copy.executor import plan
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

BLOCKS = 512


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def best(fn, repeat: int = 7, device: str = "cpu") -> float:
    fn()
    times = []
    for _ in range(repeat):
        _sync(device)
        t = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t)
    return min(times)


def row(name: str, layer: LayerSpec, par: ParallelConfig, kv: torch.Tensor, seed: int, device: str = "cpu",
        offload: bool = False) -> None:
    """With `offload`, the pages are in pinned host memory and `kv` on the device, and the
    plain copy moves the same whole pages: gathered on the device, carried to the host, and
    scattered among the pages there."""
    tensor = TensorLayout(kv.shape, kv.stride(), kv.element_size()) if layer.kind == "attention" else None
    m = Deriver().derive(layer, tensor, par, BLOCKS).mappings[1]
    kv = kv.to(device)  # (strides kept: a dense tensor keeps its layout)
    p = plan(m, kv)
    pages = torch.zeros(2 * BLOCKS, m.canonical_page_size_bytes, dtype=torch.uint8,
                        **({"pin_memory": True} if offload else {"device": device}))
    ids = torch.randperm(2 * BLOCKS, generator=torch.Generator().manual_seed(seed))
    ids = ids[(ids % m.num_writers) == m.writer_index][:BLOCKS]           # pages this rank writes
    blocks = torch.randperm(BLOCKS, generator=torch.Generator().manual_seed(seed + 1))[: ids.numel()]
    nbytes = ids.numel() * m.local_page_size_bytes
    flat = torch.empty(BLOCKS, m.local_page_size_bytes // 8, dtype=torch.int64, device=device)  # whole pages,
    other = torch.empty_like(flat, device="cpu", pin_memory=True) if offload else torch.empty_like(flat)  # words
    blocks_on = blocks.to(device)
    if offload:
        def plain():
            other.index_copy_(0, blocks, flat.index_select(0, blocks_on).cpu())
    else:
        def plain():
            other.index_copy_(0, blocks_on, flat.index_select(0, blocks_on))
    ops = (lambda: p.store(kv, blocks, pages, ids), lambda: p.load(pages, ids, kv, blocks), plain)
    # rounds of all three back to back: the machine's speed drifts between rounds (by up to 2x
    # here), so each round's ratio compares like with like, and the median of them is reported
    rounds = [[best(op, 3, device) for op in ops] for _ in range(7)]
    store, load, plain = (min(r[k] for r in rounds) for k in range(3))
    ratio = statistics.median(r[2] / max(r[0], r[1]) for r in rounds)
    frags = sum(r.num_fragments for r in m.runs) * ids.numel()
    gb = lambda s: f"{nbytes / s / 1e9:.2f}"  # noqa: E731
    print(f"| {name} | {min(r.fragment_size for r in m.runs)} B | {gb(store)} | {gb(load)} | {gb(plain)} | "
          f"{100 * ratio:.0f}% | {p.descriptors(blocks, ids).shape[0]} / {frags} |")


def main() -> None:
    global BLOCKS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--blocks", type=int, default=BLOCKS, help=f"blocks a batch (default {BLOCKS})")
    args = ap.parse_args()
    device, BLOCKS = args.device, args.blocks
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("copy_bench: --device cuda, but torch sees no CUDA device here")
    torch.set_num_threads(1)
    if device == "cuda":
        big = torch.empty(1 << 30, dtype=torch.uint8, device=device)
        to = torch.empty_like(big)
        s = best(lambda: to.copy_(big), 5, device)
        print(f"{torch.cuda.get_device_name()}: one 1 GiB copy_ at {2 * big.numel() / s / 1e9:.0f} GB/s "
              f"(read + write)\n")
        del big, to
    print(f"{BLOCKS} blocks a batch, {'one thread' if device == 'cpu' else device}; GB/s of this rank's bytes\n")
    print("| layout (rank 1) | fragment | store GB/s | load GB/s | plain copy GB/s | slower of the two vs plain | "
          "descriptors / fragments |")
    print("|---|---|---|---|---|---|---|")
    bs, d = 16, 128
    split = LayerSpec("attention", 2 * bs * 2 * d * 2, bs, 2, d, 2)
    row("split NHD tp=4, 8 heads, bs=16, D=128, bf16", split, ParallelConfig(4, 8),
        torch.randn(BLOCKS, 2, bs, 2, d).to(torch.bfloat16), 1, device)
    row("split HND tp=4, 8 heads, bs=16, D=128, bf16", split, ParallelConfig(4, 8),
        torch.randn(BLOCKS, 2, 2, bs, d).to(torch.bfloat16).transpose(2, 3), 3, device)  # heads outside tokens
    flash = LayerSpec("attention", 2 * bs * 2 * d * 2, bs, 2, d, 2, sizes={"kv_blocks_second": 1})
    row("FlashAttention NHD (2, N, ...) tp=4, 8 heads, bs=16, D=128, bf16", flash, ParallelConfig(4, 8),
        torch.randn(2, BLOCKS, bs, 2, d).to(torch.bfloat16), 7, device)   # K of every block, then V
    row("FlashAttention HND (2, N, ...) tp=4, 8 heads, bs=16, D=128, bf16", flash, ParallelConfig(4, 8),
        torch.randn(2, BLOCKS, 2, bs, d).to(torch.bfloat16).transpose(2, 3), 9, device)
    row("MLA 576 bf16, tp=4 dcp=2", LayerSpec("mla", bs * 1152, bs, 1, 576, 2), ParallelConfig(4, 1, dcp=2),
        torch.randn(BLOCKS, bs, 576).to(torch.bfloat16), 5, device)
    if device == "cuda":  # the offload itself: the GPU's KV cache to and from pages in pinned host memory
        host = torch.empty(1 << 28, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty_like(host, device=device)
        s = best(lambda: host.copy_(dev), 5, device)
        print(f"\nKV on the GPU, pages in pinned host memory (one 256 MiB device-to-host copy_: "
              f"{host.numel() / s / 1e9:.0f} GB/s); the plain copy: whole pages gathered on the GPU, carried "
              f"to the host and scattered there\n")
        print("| layout (rank 1) | fragment | store GB/s | load GB/s | plain offload GB/s | slower of the two vs "
              "plain | descriptors / fragments |")
        print("|---|---|---|---|---|---|---|")
        del host, dev
        row("split HND tp=4, 8 heads, bs=16, D=128, bf16", split, ParallelConfig(4, 8),
            torch.randn(BLOCKS, 2, 2, bs, d).to(torch.bfloat16).transpose(2, 3), 3, device, offload=True)
        row("FlashAttention NHD (2, N, ...) tp=4, 8 heads, bs=16, D=128, bf16", flash, ParallelConfig(4, 8),
            torch.randn(2, BLOCKS, bs, 2, d).to(torch.bfloat16), 7, device, offload=True)
        row("MLA 576 bf16, tp=4 dcp=2", LayerSpec("mla", bs * 1152, bs, 1, 576, 2), ParallelConfig(4, 1, dcp=2),
            torch.randn(BLOCKS, bs, 576).to(torch.bfloat16), 5, device, offload=True)


if __name__ == "__main__":
    main()
