"""Put and get bandwidth of canonical pages in a Mooncake Store on loopback: through layoutalg's
page store (`tools.mooncake.MooncakeStore.put`/`get`: keys, checks, batches of 256 pages) against
the Mooncake client's own batch calls on the same bytes and keys, and its put/get of them as one
object. Starts a master and a client lending 2 GB on 127.0.0.1, and stops them.

    unshare --net --pid --fork --mount-proc bash -c \\
        'ip link set lo up && python benchmarks/stores.py [--pages 1024] [--page-kib 64] [--reps 5]'

(Mooncake's clients listen on every interface: run it where only loopback is up, as above.)
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests" / "stores"))


def best(f, reps: int) -> float:
    times = []
    for r in range(reps):
        t0 = time.perf_counter()
        f(r)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=1024)
    ap.add_argument("--page-kib", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    if [n for _, n in socket.if_nameindex() if n != "lo"]:
        sys.exit("stores.py: run it where only loopback is up (see the module's docstring)")
    from store_servers import Master
    from layoutalg.tools.mooncake import CHUNK, MooncakeStore
    from layoutalg.tools.stores import PageKey
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    m = Master(folder, lend="2GB")
    try:
        s = MooncakeStore(m.address, host="127.0.0.1", buffer=256 << 20)
        raw, n = s.raw(), a.page_kib << 10
        pages = torch.randint(0, 256, (a.pages, n), dtype=torch.uint8)
        out = torch.empty_like(pages)
        total = pages.numel()
        ids = list(range(a.pages))
        key = lambda tag, r: PageKey("bench", "fmt", f"{tag}{r}", 0)  # noqa: E731 - fresh keys each rep
        ptrs = [pages.data_ptr() + i * n for i in ids]
        optrs = [out.data_ptr() + i * n for i in ids]
        raw.register_buffer(pages.data_ptr(), total)
        raw.register_buffer(out.data_ptr(), total)
        s.registered.update({pages.data_ptr(): total, out.data_ptr(): total})
        rows = []

        def clear(tag, r):
            for p in ids:
                raw.remove(key(tag, r).page(p), True)

        put = best(lambda r: s.put(key("l", r), ids, pages), a.reps)
        get = best(lambda r: s.get(key("l", 0), ids, out), a.reps)
        assert torch.equal(out, pages)
        for r in range(1, a.reps):
            clear("l", r)
        rows.append(("layoutalg MooncakeStore.put / get", put, get))
        codes, c = set(), CHUNK  # (one call of thousands of keys fails some of them here: -800)

        def raw_put(r):
            for at in range(0, a.pages, c):
                codes.update(raw.batch_put_from([key("r", r).page(p) for p in ids[at:at + c]], ptrs[at:at + c],
                                                [n] * len(ids[at:at + c])))

        def raw_get(r):
            for at in range(0, a.pages, c):
                codes.update(x - n for x in raw.batch_get_into([key("r", 0).page(p) for p in ids[at:at + c]],
                                                               optrs[at:at + c], [n] * len(ids[at:at + c])))
        put = best(raw_put, a.reps)
        out.zero_()
        got = best(raw_get, a.reps)
        assert codes == {0} and torch.equal(out, pages), f"raw batch calls: codes {sorted(codes)} (get: minus a page)"
        get = got
        for r in range(a.reps):
            clear("r", r)
        rows.append((f"raw batch_put_from / batch_get_into, {c} keys a call", put, get))
        put = best(lambda r: raw.put_from(f"one{r}", pages.data_ptr(), total), a.reps)
        out.zero_()
        get = best(lambda r: raw.get_into("one0", out.data_ptr(), total), a.reps)
        assert torch.equal(out, pages)
        rows.append(("raw put_from / get_into, one object", put, get))
        print(f"{a.pages} pages of {a.page_kib} KiB ({total / 2**20:.0f} MiB), best of {a.reps}, loopback, tcp")
        print(f"{'':<52} {'put GB/s':>9} {'get GB/s':>9}")
        for name, p, g in rows:
            print(f"{name:<52} {total / p / 1e9:>9.2f} {total / g / 1e9:>9.2f}")
        lp, lg = rows[0][1], rows[0][2]
        print(f"layoutalg / raw batch: put {rows[1][1] / lp:.2f}, get {rows[1][2] / lg:.2f}")
        s.close()
    finally:
        m.stop()


if __name__ == "__main__":
    main()
