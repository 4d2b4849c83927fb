"""One rank of a store job or a load job under torchrun: canonical pages in a page store
(`tools.stores`): files on a path every node shares (the default), or a Mooncake Store, so a
page stored by one job is loaded by another, later, elsewhere.

    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr HOST --master-port 29400 \\
        -m layoutalg reshard --family split_nhd --store tp=4 --pages /shared/kv
    # later, another job, any nodes:
    torchrun ... -m layoutalg reshard --family split_nhd --load tp=2 --pages /shared/kv
    # or the pages in a Mooncake Store: --store-backend mooncake --mooncake-master HOST:PORT

A job is one side of `layoutalg reshard`: its ranks join by torchrun's env:// rendezvous
(`RANK`, `WORLD_SIZE`: the configuration's world times its pipeline stages, stage by stage).
A store job assembles whole canonical pages: each rank's plan stores its own bytes of each
page into zeros (each byte has one writer, pads none), the stage's ranks sum them onto the
rank that puts the layer (layer % world), and that rank puts the layer's pages whole. When
every page is in, rank 0 commits the record of the job (the file store's `FORMAT/job.json`).
The load job reads the record first (a record of another format is refused before any page
is read), gets the pages of its own layers and checks every byte of every layer against the
engine element it holds (`distributed.element_coordinates`), as `layoutalg reshard` does in
one process tree. A rank whose put or get fails fails the job on every rank, naming the page.
"""
from __future__ import annotations

import os

import torch

from .distributed import Group, _fill, _shown, _verify, layout_of_pages, stage_of
from .stores import FileStore, PageKey, PageStore
from ..errors import ConfigError, LayoutalgError

BACKENDS = ("file", "mooncake")
ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def under_torchrun() -> bool:
    return all(n in os.environ for n in ENV)


def _join(group: Group, stages: tuple, side: str):
    """(torch.distributed, this process's rank in its stage, the layers it owns, the stage's process
    group, its first process): the job's ranks joined by env://, stage by stage (`distributed.stage_of`)."""
    import torch.distributed as dist
    torch.set_num_threads(1)
    world, size = int(os.environ["WORLD_SIZE"]), group.world * len(stages)
    if world != size:
        raise ConfigError(f"reshard {side} job: torchrun started {world} processes, but {_said(group, stages)} "
                          f"is {size} ranks (the configuration's world times its pipeline stages)")
    dist.init_process_group("gloo", init_method="env://")
    stage, rank, owned = stage_of(stages, group.world, dist.get_rank())
    groups = [dist.new_group(list(range(s * group.world, (s + 1) * group.world))) if len(stages) > 1 else None
              for s in range(len(stages))]  # (every process makes every group, in one order)
    return dist, rank, owned, groups[stage], stage * group.world


def _together(dist, error, side: str) -> None:
    """Every rank of the job agrees whether any failed: each raises, the failing ones their own error."""
    flag = torch.tensor([0 if error is None else 1], dtype=torch.int64)
    dist.all_reduce(flag)
    if int(flag):
        dist.destroy_process_group()
        raise error or ConfigError(f"reshard {side} job: {int(flag)} other rank(s) failed (their error is in "
                                   f"their output); nothing more was done")


def _said(group: Group, stages: tuple) -> str:
    return _shown(group.config) + (f" in {len(stages)} pipeline stages" if len(stages) > 1 else "")


def _key(group: Group, model: str, job: str, layer: int) -> PageKey:
    return PageKey(model, group.mappings[0].format_id, job, layer)


def store_job(group: Group, stages: tuple, layers: int, store: PageStore | str, model: str | None = None) -> int:
    """Store a hash of every byte's coordinate under `group` into `store` (a `PageStore`, or a folder
    for the file store) as pages of `model` (default: the family's name)."""
    from ..copy.executor import plan
    store = FileStore(store) if isinstance(store, (str, os.PathLike)) else store
    model, fmt = model or group.family, group.mappings[0].format_id
    dist, rank, owned, stage_group, first = _join(group, stages, "store")
    page = group.mappings[0].canonical_page_size_bytes
    job, error = [None], None
    if dist.get_rank() == 0:  # (a store of one format never overwrites another's pages)
        try:
            store.begin(model, fmt, "store", layers=layers, pages=group.blocks, page_bytes=page)
            job = [store.new_job()]
        except LayoutalgError as e:
            error = e
    _together(dist, error, "store")
    dist.broadcast_object_list(job, src=0)
    pages, blocks = layout_of_pages(group, group.blocks)
    m = group.mappings[rank]
    try:
        for layer, kv in zip(owned, _fill(group, rank, owned, pages, blocks)):
            buf = torch.zeros(group.blocks, page, dtype=torch.uint8)
            plan(m, kv).store(kv, blocks, buf, pages)  # this rank's bytes; every other byte stays 0
            putter = first + layer % group.world
            dist.reduce(buf, dst=putter, group=stage_group)  # (each byte has one writer: the sum is the page)
            if dist.get_rank() == putter:
                store.put(_key(group, model, job[0], layer), pages, buf)
    except LayoutalgError as e:
        error = e
    _together(dist, error, "store")  # every page is in (or the job fails, committing nothing)
    if dist.get_rank() == 0:
        store.commit(model, {"family": group.family, "config": group.config, "layers": layers, "pages": group.blocks,
                             "page_bytes": page, "format_id": fmt, "model": model, "job": job[0]})
        print(f"stored: {_said(group, stages)}, {layers} layers x {group.blocks} pages of {page} bytes into "
              f"{store.place(fmt)}")
    dist.destroy_process_group()
    return 0


def load_job(group: Group, stages: tuple, layers: int, store: PageStore | str, model: str | None = None) -> int:
    """Load the pages of `model` (default: the family's name) that a store job put into `store`, under
    `group`, and check every byte; 0 where every layer of every rank passed."""
    from ..copy.executor import plan
    store = FileStore(store) if isinstance(store, (str, os.PathLike)) else store
    model, fmt = model or group.family, group.mappings[0].format_id
    stored = store.stored(model, fmt, "load")  # another format's record: refused before any page is read
    if stored is None:
        raise ConfigError(f"reshard load job: no pages of format {fmt} (what {_said(group, stages)} reads) "
                          f"{store.missing(fmt)}")
    if stored["pages"] != group.blocks or stored["layers"] != layers:
        raise ConfigError(f"reshard load job: {store.place(fmt)} holds {stored['layers']} layers x {stored['pages']} "
                          f"pages, this job reads {layers} x {group.blocks} (give --layers and --blocks as stored)")
    dist, rank, owned, _, _ = _join(group, stages, "load")
    pages, blocks = layout_of_pages(group, group.blocks)
    m, page = group.mappings[rank], group.mappings[0].canonical_page_size_bytes
    kvs, error = [], None
    try:
        for layer in owned:
            src = torch.empty(group.blocks, page, dtype=torch.uint8)
            store.get(_key(group, model, stored.get("job", ""), layer), pages, src)
            kv = group.empty().zero_()
            plan(m, kv).load(src, pages, kv, blocks)
            kvs.append(kv)
    except LayoutalgError as e:
        error = e
    _together(dist, error, "load")
    ok = _verify(group, rank, kvs, pages, blocks, owned)
    counts = torch.tensor([sum(ok), len(ok) - sum(ok)], dtype=torch.int64)
    dist.all_reduce(counts)
    passed, failed = counts.tolist()
    if dist.get_rank() == 0:
        print(f"loaded: {_said(group, stages)}, {layers} layers x {group.blocks} pages, from pages stored by "
              f"{_shown(stored['config'])}")
        print(f"{passed} passed, {failed} failed")
    dist.destroy_process_group()
    return 1 if failed or not passed else 0


def open_store(backend: str = "file", pages: str | None = None, master: str | None = None, **options) -> PageStore:
    """A page store: `file` (canonical pages in files under `pages`) or `mooncake` (a Mooncake
    Store master at `master`, 'HOST:PORT'; options go to `tools.mooncake.MooncakeStore`)."""
    if backend == "file":
        if not pages:
            raise ConfigError("page store: the file store needs a folder (--pages DIR)")
        if master:
            raise ConfigError("page store: --mooncake-master is for --store-backend mooncake")
        return FileStore(pages)
    if backend == "mooncake":
        if not master:
            raise ConfigError("page store: --store-backend mooncake needs --mooncake-master HOST:PORT")
        from .mooncake import MooncakeStore
        return MooncakeStore(master, **options)
    raise ConfigError(f"page store: no backend {backend!r}; one of {', '.join(BACKENDS)}")
