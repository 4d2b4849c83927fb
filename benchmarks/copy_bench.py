"""Copy plans against a plain copy of the same bytes, on the CPU (one thread).

    python benchmarks/copy_bench.py

For each layout (rank 1 of its group): store (this rank's runs into canonical pages at
scattered page ids, where it is the writer) and load (those blocks back), in GB/s of
this rank's bytes, against a whole-page `index_select` + `index_copy_` of the same bytes
in the same run (moved as 8-byte words, as the plan moves its fragments): the ratio is the
median over seven rounds of the three back to back (the slower of store and load against
the plain copy); and the descriptors a batched memcpy would need against one per fragment.
"""
from __future__ import annotations

import statistics
import time

import torch

from layoutalg.copy import plan
from layoutalg.runtime import Deriver, LayerSpec, ParallelConfig, TensorLayout

BLOCKS = 512


def best(fn, repeat: int = 7) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def row(name: str, layer: LayerSpec, par: ParallelConfig, kv: torch.Tensor, seed: int) -> None:
    tensor = TensorLayout(kv.shape, kv.stride(), kv.element_size()) if layer.kind == "attention" else None
    m = Deriver().derive(layer, tensor, par, BLOCKS).mappings[1]
    p = plan(m, kv)
    pages = torch.zeros(2 * BLOCKS, m.canonical_page_size_bytes, dtype=torch.uint8)
    ids = torch.randperm(2 * BLOCKS, generator=torch.Generator().manual_seed(seed))
    ids = ids[(ids % m.num_writers) == m.writer_index][:BLOCKS]           # pages this rank writes
    blocks = torch.randperm(BLOCKS, generator=torch.Generator().manual_seed(seed + 1))[: ids.numel()]
    nbytes = ids.numel() * m.local_page_size_bytes
    flat = torch.empty(BLOCKS, m.local_page_size_bytes // 8, dtype=torch.int64)  # whole pages, 8-byte words
    other = torch.empty_like(flat)
    ops = (lambda: p.store(kv, blocks, pages, ids), lambda: p.load(pages, ids, kv, blocks),
           lambda: other.index_copy_(0, blocks, flat.index_select(0, blocks)))
    # rounds of all three back to back: the machine's speed drifts between rounds (by up to 2x
    # here), so each round's ratio compares like with like, and the median of them is reported
    rounds = [[best(op, 3) for op in ops] for _ in range(7)]
    store, load, plain = (min(r[k] for r in rounds) for k in range(3))
    ratio = statistics.median(r[2] / max(r[0], r[1]) for r in rounds)
    frags = sum(r.num_fragments for r in m.runs) * ids.numel()
    gb = lambda s: f"{nbytes / s / 1e9:.2f}"  # noqa: E731
    print(f"| {name} | {min(r.fragment_size for r in m.runs)} B | {gb(store)} | {gb(load)} | {gb(plain)} | "
          f"{100 * ratio:.0f}% | {p.descriptors(blocks, ids).shape[0]} / {frags} |")


def main() -> None:
    torch.set_num_threads(1)
    print(f"{BLOCKS} blocks a batch, one thread; GB/s of this rank's bytes\n")
    print("| layout (rank 1) | fragment | store GB/s | load GB/s | plain copy GB/s | slower of the two vs plain | "
          "descriptors / fragments |")
    print("|---|---|---|---|---|---|---|")
    bs, d = 16, 128
    split = LayerSpec("attention", 2 * bs * 2 * d * 2, bs, 2, d, 2)
    row("split NHD tp=4, 8 heads, bs=16, D=128, bf16", split, ParallelConfig(4, 8),
        torch.randn(BLOCKS, 2, bs, 2, d).to(torch.bfloat16), 1)
    row("split HND tp=4, 8 heads, bs=16, D=128, bf16", split, ParallelConfig(4, 8),
        torch.randn(BLOCKS, 2, 2, bs, d).to(torch.bfloat16).transpose(2, 3), 3)  # heads outside tokens in memory
    flash = LayerSpec("attention", 2 * bs * 2 * d * 2, bs, 2, d, 2, sizes={"kv_blocks_second": 1})
    row("FlashAttention NHD (2, N, ...) tp=4, 8 heads, bs=16, D=128, bf16", flash, ParallelConfig(4, 8),
        torch.randn(2, BLOCKS, bs, 2, d).to(torch.bfloat16), 7)   # K of every block, then V
    row("FlashAttention HND (2, N, ...) tp=4, 8 heads, bs=16, D=128, bf16", flash, ParallelConfig(4, 8),
        torch.randn(2, BLOCKS, 2, bs, d).to(torch.bfloat16).transpose(2, 3), 9)
    row("MLA 576 bf16, tp=4 dcp=2", LayerSpec("mla", bs * 1152, bs, 1, 576, 2), ParallelConfig(4, 1, dcp=2),
        torch.randn(BLOCKS, bs, 576).to(torch.bfloat16), 5)


if __name__ == "__main__":
    main()
