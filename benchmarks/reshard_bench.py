"""Direct reshard plans against the two other ways to move a layer between configurations.

    python benchmarks/reshard_bench.py

For each configuration pair, in one process (one thread), 256 blocks of one layer:
- bytes: what the consumer ranks receive. `direct` is the plan's reads; `all-gather`
  sends every producer's whole local page to every consumer (what a transfer that does
  not know the layouts must do); `canonical` writes each canonical page once and reads
  the consumers' share back (the offload path, through a host buffer).
- seconds: the direct plan executed (gather on each producer, scatter on each consumer)
  against the canonical path (every producer's store, then every consumer's load).
- plan: the milliseconds to compose and certify the plans of every consumer rank, once per
  pair: in the algebra from the groups' tilings (what `direct_plans` does), and from the
  runs' fragments (what it does for mappings that carry no tiling).
"""
from __future__ import annotations

import dataclasses
import time

import torch

from layoutalg.copy.executor import plan
from layoutalg.tools.distributed import group_of, parse_config
from layoutalg.plans.reshard import direct_plans
from layoutalg.copy.direct import execute

BLOCKS = 256
PAIRS = [("split_hnd", 8, 128, "tp=2", "tp=4"), ("split_hnd", 8, 128, "tp=4", "tp=2"),
         ("split_nhd", 8, 128, "tp=8", "tp=2"), ("split_nhd", 4, 128, "tp=8", "tp=4"),
         ("mla", 1, 576, "tp=4", "tp=2"), ("split_nhd", 32, 256, "tp=8", "tp=2")]


def best(fn, repeat: int = 5) -> float:
    fn()
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def main() -> None:
    torch.set_num_threads(1)
    print(f"{'family':<10} {'pair':<12} {'direct MB':>10} {'all-gather MB':>14} {'canonical MB':>13} "
          f"{'direct s':>9} {'canonical s':>12} {'plan ms':>8} {'by fragments ms':>16}")
    for family, heads, d, a, b in PAIRS:
        x, y = (group_of(family, parse_config(c), heads, 16, d, "bf16", BLOCKS) for c in (a, b))
        plans = direct_plans(x.mappings, y.mappings)
        bare = [[dataclasses.replace(m, tilings=()) for m in g.mappings] for g in (x, y)]
        plan_ms = best(lambda: direct_plans(x.mappings, y.mappings)) * 1e3
        fragments_ms = best(lambda: direct_plans(*bare)) * 1e3
        g = torch.Generator().manual_seed(0)
        kvs = [torch.randint(0, 255, (BLOCKS, m.local_page_size_bytes), generator=g, dtype=torch.uint8)
               for m in x.mappings]
        outs = [torch.zeros(BLOCKS, m.local_page_size_bytes, dtype=torch.uint8) for m in y.mappings]
        ids = torch.randperm(BLOCKS, generator=g)
        cp = x.mappings[0].canonical_page_size_bytes
        pages = torch.zeros(BLOCKS, cp, dtype=torch.uint8)
        stores = [plan(m, kv) for m, kv in zip(x.mappings, kvs)]
        loads = [plan(m, kv) for m, kv in zip(y.mappings, outs)]

        def direct():
            for p, out in zip(plans, outs):
                execute(p, kvs, ids, out, ids)

        def canonical():
            for s, kv in zip(stores, kvs):
                s.store(kv, ids, pages, ids)
            for ld, out in zip(loads, outs):
                ld.load(pages, ids, out, ids)

        moved = BLOCKS * sum(p.bytes_from(q) for p in plans for q in p.producers())
        gathered = BLOCKS * y.world * x.world * x.mappings[0].local_page_size_bytes
        through = BLOCKS * (cp + sum(m.local_page_size_bytes for m in y.mappings))
        print(f"{family:<10} {a + '->' + b:<12} {moved / 1e6:>10.1f} {gathered / 1e6:>14.1f} {through / 1e6:>13.1f} "
              f"{best(direct):>9.3f} {best(canonical):>12.3f} {plan_ms:>8.1f} {fragments_ms:>16.1f}")


if __name__ == "__main__":
    main()
