"""Direct reshard plans over NIXL: each consumer rank READs its bytes straight out of the producer
ranks' registered KV memory, one NIXL transfer per (consumer, producer) pair, with no canonical
page and no copy on either side beside the transfer itself (`tools.distributed` moves the same
plans with torch.distributed's gather, send and scatter instead).

Three layers, each usable alone:

- `descriptors(plan, producer, src, dst, src_blocks, dst_blocks)`: the plan's runs from one
  producer, over a batch of blocks, as `(src address, dst address, size)` rows, cut where either
  side's page lies in stretches apart and merged where both sides continue (pure numpy: no NIXL);
- `producer_side` and `consumer_side`: the checks every executor of a direct plan makes before
  a byte moves (`plans.reshard.validate`, the tensor against the views its group's mappings were
  derived for, `copy.views.layer_segments`, and the block ids), giving the `Stretches` (addresses)
  that a producer publishes and a consumer's descriptors are built from;
- `Agent`: one process's NIXL agent (UCX), its KV memory registered, its metadata for the
  others, and `read` (one transfer a peer, waited with a deadline).

`publish`/`fetch` carry a producer's metadata and addresses through a torch.distributed store (a
torchrun job's TCPStore); `spawn`/`worker` run `layoutalg reshard --direct --transport nixl`, where
they travel over the reshard job's own process group (all_gather_object).
NIXL is imported only here, and only inside the functions that need it (`pip install
'layoutalg[nixl]'`: nixl-cu12, UCX bundled). Processes that made an agent end with `os._exit`:
nixl-cu12 1.5.1 crashes at interpreter exit (SIGSEGV) whatever was released before.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import NamedTuple

import numpy as np
import torch

from ..errors import ConfigError
from ..plans.reshard import DirectPlan, admit, validate
from ..copy.direct import side_segments
from ..copy.ids import block_ids_of
from ..copy.views import in_segments, stretch_length

DEADLINE_S = float(os.environ.get("LAYOUTALG_NIXL_DEADLINE", "60"))
"""How long `Agent.read` waits for its transfers before it fails (a peer that died mid-way)."""


class Stretches(NamedTuple):
    """Where one rank's page of a layer lies in memory: stretch i of block b starts at
    `addresses[i] + b * block_strides[i]`; `cuts` says where the page is cut into stretches
    (`copy.views.stretch_length`: 0 where a block's page is one stretch)."""

    addresses: tuple
    block_strides: tuple
    cuts: int | tuple = 0


def stretches_of(segs) -> Stretches:
    """A layer's `copy.views.layer_segments` as addresses (each a uint8 `(blocks, bytes)` view)."""
    return Stretches(tuple(s.bytes.data_ptr() for s in segs), tuple(s.bytes.stride(0) for s in segs),
                     stretch_length(segs))


def _pieces(plan: DirectPlan, producer: int, src: Stretches, dst: Stretches):
    """`(src stretch, dst stretch, run)`: the runs from `producer`, cut where a fragment would cross
    from one stretch to the next on either side, each offset counted from its stretch's start."""
    runs = [r for r in plan.runs_from(producer) if r.num_fragments and r.fragment_size]
    for s, r in in_segments(runs, src.cuts, "src"):
        for d, piece in in_segments([r], dst.cuts, "dst"):
            yield s, d, piece


def descriptors(plan: DirectPlan, producer: int, src: Stretches, dst: Stretches, src_blocks, dst_blocks,
                merge: bool = True) -> np.ndarray:
    """`(n, 3)` int64 rows `(src address, dst address, size)`: what consumer `plan.consumer` reads
    from `producer` for the block pairs `(src_blocks[i], dst_blocks[i])`, one row a fragment,
    sorted by destination and, with `merge`, rows whose source and destination both continue
    the previous one's joined into one (`merged`). Checks nothing: `consumer_side` and
    `producer_side` check the plan, the tensors and the block ids first.

    Examples:
        >>> from layoutalg.plans.reshard import DirectPlan, DirectRun
        >>> p = DirectPlan(0, (DirectRun(0, 0, 0, 4, 2, 4, 4),), 8, 8)   # 8 bytes, two fragments of 4
        >>> descriptors(p, 0, Stretches((1000,), (8,)), Stretches((5000,), (8,)), [0, 1], [0, 1]).tolist()
        [[1000, 5000, 16]]
        >>> descriptors(p, 0, Stretches((1000,), (8,)), Stretches((5000,), (8,)), [1, 0], [0, 1]).tolist()
        [[1008, 5000, 8], [1000, 5008, 8]]
    """
    sb = np.asarray(src_blocks, dtype=np.int64).reshape(-1, 1)
    db = np.asarray(dst_blocks, dtype=np.int64).reshape(-1, 1)
    if sb.shape != db.shape:
        raise ConfigError(f"descriptors: {sb.shape[0]} producer blocks for {db.shape[0]} consumer blocks")
    parts = []
    for s, d, r in _pieces(plan, producer, src, dst):
        f = np.arange(r.num_fragments, dtype=np.int64).reshape(1, -1)
        a = src.addresses[s] + sb * src.block_strides[s] + r.src_offset + f * r.src_stride
        b = dst.addresses[d] + db * dst.block_strides[d] + r.dst_offset + f * r.dst_stride
        parts.append(np.stack([a.ravel(), b.ravel(), np.full(a.size, r.fragment_size, dtype=np.int64)], 1))
    rows = np.concatenate(parts) if parts else np.zeros((0, 3), dtype=np.int64)
    rows = rows[np.argsort(rows[:, 1], kind="stable")]
    return merged(rows) if merge else rows


def merged(rows: np.ndarray) -> np.ndarray:
    """`(src, dst, size)` rows with each row whose source and destination both continue the
    previous row's joined to it (a run of such rows becomes one row: one descriptor)."""
    if rows.shape[0] < 2:
        return rows
    cont = (rows[1:, 0] == rows[:-1, 0] + rows[:-1, 2]) & (rows[1:, 1] == rows[:-1, 1] + rows[:-1, 2])
    first = np.flatnonzero(np.concatenate([[True], ~cont]))
    return np.stack([rows[first, 0], rows[first, 1], np.add.reduceat(rows[:, 2], first)], 1)


# ---- the checks every executor of a direct plan makes -----------------------------------------

def _side(plan: DirectPlan, producer: int, kv, block_ids, producer_side: bool, producer_pages=None):
    op = "nixl " + ("producer" if producer_side else "consumer")
    if type(producer) is not int or producer < 0:
        raise ConfigError(f"{op}: producer rank must be a non-negative int, got {producer!r}")
    if producer_pages is None:
        admit(plan)  # (sound where built: validated there)
    else:
        validate(plan, producer_pages)
    segs = side_segments(plan, kv, producer_side, op)
    return stretches_of(segs), block_ids_of(block_ids, segs[0].bytes.shape[0], op).numpy()


def producer_side(plan: DirectPlan, producer: int, kv, block_ids, producer_pages=None) -> tuple:
    """(`Stretches`, block ids) of the producer's `kv` that `plan` reads, checked as `copy.gather` checks them."""
    return _side(plan, producer, kv, block_ids, True, producer_pages)


def consumer_side(plan: DirectPlan, producer: int, kv, block_ids, producer_pages=None) -> tuple:
    """(`Stretches`, block ids) of the consumer's `kv` that `plan` writes, checked as `copy.scatter` checks them."""
    return _side(plan, producer, kv, block_ids, False, producer_pages)


def registered(tensors) -> list:
    """The memory to register for a rank's KV tensors: each distinct storage once, `(address,
    bytes, device)`, so every block and stretch of every layer lies in a registered region."""
    out = {}
    for t in tensors:
        for x in (t if isinstance(t, (list, tuple)) else (t,)):
            s = x.untyped_storage()
            out[(s.data_ptr(), x.device.type)] = (s.data_ptr(), s.nbytes(), x.device.index or 0, x.device.type)
    return list(out.values())


# ---- the agent ---------------------------------------------------------------------------------

class Agent:
    """One process's NIXL agent on UCX, its KV memory registered (`register`), its metadata for
    the others (`metadata`), and `read`: one READ a peer from descriptor rows."""

    def __init__(self, name: str, backends=("UCX",)):
        try:
            from nixl_cu12 import nixl_agent, nixl_agent_config
        except ImportError:
            raise ConfigError("reshard --transport nixl needs NIXL: pip install 'layoutalg[nixl]' (nixl-cu12)") from None
        self.agent = nixl_agent(name, nixl_agent_config(backends=list(backends)))
        self.name, self.regions, self.peers, self.last = name, [], {}, (0.0, 0.0, 0.0)

    def register(self, tensors) -> None:
        for addr, n, dev, kind in registered(tensors):
            mem = "DRAM" if kind == "cpu" else "VRAM"
            self.regions.append(self.agent.register_memory([(addr, n, dev, "")], mem))

    def metadata(self) -> bytes:
        return self.agent.get_agent_metadata()

    def add(self, metadata: bytes):
        """A peer's name, from its `metadata` (once a peer)."""
        name = self.agent.add_remote_agent(metadata)
        self.peers[name] = True
        return name

    def read(self, transfers: dict, device: torch.device = torch.device("cpu"), deadline_s: float = DEADLINE_S):
        """`transfers`: {peer name: (n, 3) rows (peer address, my address, size)}: one READ a peer,
        all posted before any is waited; a transfer in error, or not done by the deadline, fails."""
        mem, dev = ("DRAM", 0) if device.type == "cpu" else ("VRAM", device.index or 0)
        handles, made, posted, t0 = [], 0.0, 0.0, time.perf_counter()
        for peer, rows in transfers.items():
            if not rows.shape[0]:
                continue
            col = np.full((rows.shape[0], 1), dev, dtype=np.uint64)
            local = np.hstack([rows[:, 1:2].astype(np.uint64), rows[:, 2:3].astype(np.uint64), col])
            remote = np.hstack([rows[:, 0:1].astype(np.uint64), rows[:, 2:3].astype(np.uint64), col])
            try:
                h = self.agent.initialize_xfer("READ", self.agent.get_xfer_descs(local, mem),
                                               self.agent.get_xfer_descs(remote, mem), peer)
                made += time.perf_counter() - t0
                t0 = time.perf_counter()
                state = self.agent.transfer(h)
                posted += time.perf_counter() - t0
                t0 = time.perf_counter()
            except Exception as e:  # noqa: BLE001 - NIXL's own errors (a peer gone: NIXL_ERR_REMOTE_DISCONNECT)
                raise ConfigError(f"nixl: {self.name}'s READ from {_shown(peer)} failed: {type(e).__name__}: {e} "
                                  f"(did that process die?)") from None
            if state == "ERR":
                raise ConfigError(f"nixl: {self.name}'s READ from {_shown(peer)} failed to start")
            handles.append((peer, h, state))
        end, t1 = time.monotonic() + deadline_s, time.perf_counter()
        try:
            for peer, h, state in handles:
                while state == "PROC":
                    if time.monotonic() > end:
                        raise ConfigError(f"nixl: {self.name}'s READ from {_shown(peer)} not done in {deadline_s:g} s "
                                          f"(did that process die?)")
                    time.sleep(1e-4)
                    try:
                        state = self.agent.check_xfer_state(h)
                    except Exception as e:  # noqa: BLE001
                        raise ConfigError(f"nixl: {self.name}'s READ from {_shown(peer)} failed: "
                                          f"{type(e).__name__}: {e} (did that process die?)") from None
                if state != "DONE":
                    raise ConfigError(f"nixl: {self.name}'s READ from {_shown(peer)} ended in error "
                                      f"(did that process die?)")
            self.last = (made, posted, time.perf_counter() - t1)  # seconds making the READs, posting them, waiting
        finally:
            for _, h, _ in handles:
                try:
                    self.agent.release_xfer_handle(h)
                except Exception:  # noqa: BLE001 - a handle still in flight: released at exit
                    pass
        return len(handles)

    def close(self) -> None:
        for name in list(self.peers):
            self.agent.remove_remote_agent(name)
        for r in self.regions:
            self.agent.deregister_memory(r)
        self.peers, self.regions = {}, []


def publish(store, key: str, agent: Agent, sides: dict) -> None:
    """Put this producer's agent metadata and its checked sides (`{anything: producer_side(...)}`)
    under `key` of a torch.distributed store (the `TCPStore` of a torchrun job), for consumers."""
    import pickle
    store.set(key, pickle.dumps((agent.metadata(), sides)))


def fetch(store, key: str, agent: Agent, timeout_s: float = 60.0):
    """(the producer's agent name, its sides) published under `key`: waits for it up to `timeout_s`."""
    import datetime
    import pickle
    store.wait([key], datetime.timedelta(seconds=timeout_s))
    metadata, sides = pickle.loads(store.get(key))
    return agent.add(metadata), sides


def _shown(name) -> str:
    return name.decode() if isinstance(name, bytes) else str(name)


# ---- `layoutalg reshard --direct --transport nixl` ----------------------------------------------

def spawn(job: dict, processes: int) -> str:
    """Run the direct reshard's processes (`worker`): a rank that fails is a `ConfigError`
    naming it and why (what it wrote before it ended: each ends with `os._exit`). Returns what
    moved the bytes: the READs, their descriptors and the fragments those were merged from."""
    import torch.multiprocessing as mp
    try:
        mp.spawn(worker, args=(job,), nprocs=processes, join=True)
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        why = []
        for p in range(processes):
            path = os.path.join(job["folder"], f"nixl-error.{p}")
            if os.path.exists(path):
                why.append(f"process {p}: {open(path).read().strip()}")
        raise ConfigError(f"reshard --transport nixl: a rank's process failed: {why[0] if why else e}") from None
    got = [json.load(open(os.path.join(job["folder"], f))) for f in sorted(os.listdir(job["folder"]))
           if f.startswith("nixl.") and f.endswith(".json")]
    total = {k: sum(g[k] for g in got) for k in ("transfers", "descriptors", "fragments")}
    return (f"NIXL ({total['transfers']} READs, one a consumer and producer pair, of {total['descriptors']} "
            f"descriptors merged from {total['fragments']} fragments)")


def worker(process: int, job: dict) -> None:
    """One process of the direct reshard: `_run`, then `os._exit` (0, or 1 with the reason in a file)."""
    code = 0
    try:
        _run(process, job)
    except BaseException as e:  # noqa: BLE001 - every failure is reported, then the process ends
        code = 1
        with open(os.path.join(job["folder"], f"nixl-error.{process}"), "w") as f:
            f.write(f"{type(e).__name__}: {e}")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _everyone(dist, mine, what: str):
    """Every process's `mine` (a `(value, error)`), or a `ConfigError` on every process naming the first error."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, mine)
    bad = [(p, err) for p, (_, err) in enumerate(out) if err]
    if bad:
        raise ConfigError(f"{what}: process {bad[0][0]}: {bad[0][1]}")
    return [v for v, _ in out]


def _run(process: int, job: dict) -> None:
    """As `tools.distributed`'s direct worker (producers first, stage by stage, then consumers),
    the bytes moved by NIXL: each producer registers its KV caches and publishes their addresses
    with its agent's metadata over the group; each consumer checks its side, builds one
    descriptor list a producer process from every (transfer, layer) it reads there, READs them
    all, then scatters nothing: the bytes land in place."""
    from .distributed import (direct_transfers, fill_layers, join_group, layout_of_pages, owner_stage, stage_range,
                              verify_layers, write_report)
    store, load, folder = job["store"], job["load"], job["folder"]
    producers = store.world * len(job["store_stages"])
    dist, dev, _ = join_group(process, producers + load.world * len(job["load_stages"]), job, "direct")
    transfers = direct_transfers(job)
    agent = Agent(f"layoutalg-{os.path.basename(folder)}-{process}")
    try:
        if process < producers:
            stage, rank, owned = stage_range(job, "store", process)
            pages, blocks = layout_of_pages(store, store.blocks)
            kvs = dict(zip(owned, fill_layers(store, rank, owned, pages, blocks, dev)))
        else:
            stage, rank, owned = stage_range(job, "load", process - producers)
            pages, blocks = layout_of_pages(load, load.blocks)
            kvs = {layer: load.empty(dev).zero_() for layer in owned}
        agent.register(list(kvs.values()))
        mine, err = {}, ""
        try:  # a producer's side of every transfer it serves, checked before any byte moves
            if process < producers:
                for t, x in enumerate(transfers):
                    if x.rank == rank:
                        for layer, kv in kvs.items():
                            mine[(t, layer)] = producer_side(x.plan, x.producer, kv, blocks[x.producer_pages])
        except Exception as e:  # noqa: BLE001 - told to every process
            err = f"{type(e).__name__}: {e}"
        published = _everyone(dist, ((agent.metadata(), mine), err), "reshard --transport nixl, producer checks")
        reads, err, moved = {}, "", 0
        if process >= producers:
            try:
                for t, x in enumerate(transfers):
                    if x.plan.consumer != rank:
                        continue
                    for layer, kv in kvs.items():
                        peer = owner_stage(job, "store", layer) * store.world + x.rank
                        src, src_blocks = published[peer][1][(t, layer)]
                        dst, dst_blocks = consumer_side(x.plan, x.producer, kv, blocks[x.consumer_pages])
                        if len(src_blocks) != len(dst_blocks):
                            raise ConfigError(f"{len(src_blocks)} producer blocks for {len(dst_blocks)} consumer blocks")
                        reads.setdefault(peer, []).append(descriptors(x.plan, x.producer, src, dst, src_blocks,
                                                                      dst_blocks, merge=False))
            except Exception as e:  # noqa: BLE001
                err = f"{type(e).__name__}: {e}"
        _everyone(dist, (None, err), "reshard --transport nixl, consumer checks")  # nothing moved yet
        if process >= producers:
            names = {peer: agent.add(published[peer][0]) for peer in reads}
            rows = {names[peer]: merged(np.concatenate(r)[np.argsort(np.concatenate(r)[:, 1], kind="stable")])
                    for peer, r in reads.items()}
            t0 = time.perf_counter()
            count = agent.read(rows, dev)
            copy_s = time.perf_counter() - t0
            moved = int(sum(int(r[:, 2].sum()) for r in rows.values()))
            ok = verify_layers(load, rank, [kvs[layer] for layer in owned], pages, blocks, owned)
            write_report(folder, process - producers, ok, moved, copy_s)
            with open(os.path.join(folder, f"nixl.{process - producers}.json"), "w") as f:
                json.dump({"transfers": count, "descriptors": int(sum(r.shape[0] for r in rows.values())),
                           "fragments": int(sum(sum(x.shape[0] for x in r) for r in reads.values()))}, f)
        dist.barrier()  # a producer's memory stays registered until every consumer has read it
    finally:
        agent.close()
    dist.destroy_process_group()
