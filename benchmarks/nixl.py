"""Direct-plan bandwidth over NIXL against NIXL's raw transfer of the same bytes (docs/benchmarks.md).

Two processes on loopback, a producer rank of tp=2 and a consumer rank of tp=4 of one layer
(`--family`, 8 KV heads of 128 dims, bf16, 16-token blocks, `--blocks` blocks), each with a
NIXL agent (UCX) and its KV registered; the metadata goes through a TCPStore. The consumer
times, median of `--reps`:

- direct: its plan's READ from the producer, one transfer of the descriptor list built from the
  plan's runs (merged where contiguous), blocks in order and shuffled;
- raw: one READ of the same number of bytes as one descriptor, from the producer's KV into a
  registered scratch buffer of the consumer's;

and checks the direct READ's bytes against the torch executors' (gather on the producer's
tensor, scatter), rebuilt in the consumer from the same seed. Run it where only loopback is up
(UCX takes the fastest way it finds: shared memory between two processes of one machine):

    unshare --net --pid --fork --mount-proc bash -c 'ip link set lo up && python benchmarks/nixl.py'
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

HEADS, HEAD, BLOCK = 8, 128, 16


def _groups(family: str, blocks: int):
    from layoutalg.tools.distributed import group_of, parse_config
    return (group_of(family, parse_config("tp=2"), HEADS, BLOCK, HEAD, "bf16", blocks),
            group_of(family, parse_config("tp=4"), HEADS, BLOCK, HEAD, "bf16", blocks))


def _producer_kv(a):
    kv = a.empty()
    raw = kv.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, generator=torch.Generator().manual_seed(7), dtype=torch.uint8))
    return kv


def _orders(blocks: int):
    shuffled = torch.randperm(blocks, generator=torch.Generator().manual_seed(3)).tolist()
    return {"in order": (list(range(blocks)), list(range(blocks))), "shuffled": (shuffled, list(range(blocks)))}


def _ms(times, i: int) -> str:
    return f"{statistics.median(t[i] for t in times) * 1e3:.0f}"


def peer(role: str, port: int, family: str, blocks: int, reps: int) -> None:
    from layoutalg.copy import gather, scatter
    from layoutalg.plans.reshard import direct_plans
    from layoutalg.tools import nixl
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=300))
    a, b = _groups(family, blocks)
    plan = direct_plans(a.mappings, b.mappings)[0]
    (p,) = plan.producers()
    agent = nixl.Agent(f"bench-{role}")
    if role == "producer":
        kv = _producer_kv(a)
        agent.register([kv])
        nixl.publish(store, "producer", agent, {
            name: nixl.producer_side(plan, p, kv, src) for name, (src, _) in _orders(blocks).items()} | {
            "raw": (kv.data_ptr(), kv.numel() * kv.element_size())})
        store.wait(["done"], datetime.timedelta(seconds=600))
    else:
        kv, scratch = b.empty().zero_(), torch.zeros(plan.bytes_from(p) * blocks, dtype=torch.uint8)
        agent.register([kv, scratch])
        name, sides = nixl.fetch(store, "producer", agent)
        out = []
        agent.read({name: np.array([[sides["raw"][0], scratch.data_ptr(), 4096]], dtype=np.int64)})  # (wire-up)
        for order, (src_ids, dst_ids) in _orders(blocks).items():
            src, sb = sides[order]
            nixl.consumer_side(plan, p, kv, dst_ids)  # (warm)
            t0 = time.perf_counter()
            dst, db = nixl.consumer_side(plan, p, kv, dst_ids)
            rows = nixl.descriptors(plan, p, src, dst, sb, db)
            build = time.perf_counter() - t0
            fragments = nixl.descriptors(plan, p, src, dst, sb, db, merge=False).shape[0]
            n = int(rows[:, 2].sum())
            raw = np.array([[sides["raw"][0], scratch.data_ptr(), n]], dtype=np.int64)
            direct_s, raw_s, made = [], [], []
            for _ in range(reps):  # interleaved, so that both see the same machine
                kv.zero_()
                t0 = time.perf_counter()
                agent.read({name: rows})
                direct_s.append(time.perf_counter() - t0)
                made.append(agent.last)
                t0 = time.perf_counter()
                agent.read({name: raw})
                raw_s.append(time.perf_counter() - t0)
            want = b.empty().zero_()
            scatter(plan, p, gather(plan, p, _producer_kv(a), src_ids), want, dst_ids)
            same = torch.equal(kv.view(torch.uint8), want.view(torch.uint8))
            d, r = statistics.median(direct_s), statistics.median(raw_s)
            out.append(f"| {family} | {order} | {n / 2**20:.0f} MiB | {fragments} -> {rows.shape[0]} | "
                       f"{build * 1e3:.1f} ms | {_ms(made, 0)} + {_ms(made, 1)} + {_ms(made, 2)} of {d * 1e3:.0f} ms | {n / d / 1e9:.2f} GB/s | {n / r / 1e9:.2f} GB/s | {r / d:.2f} | "
                       f"{'yes' if same else 'NO'} |")
        print("\n".join(out), flush=True)
        store.set("done", "1")
    agent.close()
    sys.stdout.flush()
    os._exit(0)  # nixl-cu12 1.5.1 crashes at interpreter exit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", action="append", help="split_hnd and split_nhd unless given")
    ap.add_argument("--blocks", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    print("| family | blocks | bytes | fragments -> descriptors | checks and descriptors | READ made + posted + waited | "
          "direct | raw | direct/raw | bytes equal |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for family in args.family or ["split_hnd", "split_nhd"]:
        sock = __import__("socket").socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        store = torch.distributed.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
        argv = [str(port), family, str(args.blocks), str(args.reps)]
        procs = [subprocess.Popen([sys.executable, __file__, "--peer", role, *argv], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True) for role in ("producer", "consumer")]
        outs = [p.communicate(timeout=900)[0] for p in procs]
        print(outs[1].strip(), flush=True)
        del store


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--peer":
        peer(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
