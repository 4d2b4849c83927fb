"""One rank of a store job or a load job under torchrun: canonical pages in files on a path
every node shares, so a page stored by one job is loaded by another, later, elsewhere.

    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr HOST --master-port 29400 \\
        -m layoutalg reshard --family split_nhd --store tp=4 --pages /shared/kv
    # later, another job, any nodes:
    torchrun ... -m layoutalg reshard --family split_nhd --load tp=2 --pages /shared/kv

A job is one side of `layoutalg reshard`: its ranks join by torchrun's env:// rendezvous
(`RANK`, `WORLD_SIZE`: the configuration's world times its pipeline stages, stage by stage).
The pages of a layer are one file, `DIR/FORMAT/layer{L}.pages`
(FORMAT the pages' `format_id`), `pages x page bytes`; each writer writes only the bytes its
plan stores, by byte-range writes (no mapping of the file: writers on other nodes never
share a cached page of it). `DIR/FORMAT/job.json` says what was stored. The load job reads
the pages of its own format and checks every byte of every layer against the engine element
it holds (`distributed.element_coordinates`), as `layoutalg reshard` does in one process tree.
"""
from __future__ import annotations

import json
import os

import torch

from .distributed import Group, _fill, _shown, _verify, layout_of_pages, stage_of
from ..errors import ConfigError

ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def under_torchrun() -> bool:
    return all(n in os.environ for n in ENV)


def _join(group: Group, stages: tuple, side: str):
    """(torch.distributed, this process's rank in its stage, the layers it owns): the job's ranks
    joined by env://, stage by stage (`distributed.stage_of`)."""
    import torch.distributed as dist
    torch.set_num_threads(1)
    world, size = int(os.environ["WORLD_SIZE"]), group.world * len(stages)
    if world != size:
        raise ConfigError(f"reshard {side} job: torchrun started {world} processes, but {_said(group, stages)} "
                          f"is {size} ranks (the configuration's world times its pipeline stages)")
    dist.init_process_group("gloo", init_method="env://")
    _, rank, owned = stage_of(stages, group.world, dist.get_rank())
    return dist, rank, owned


def _said(group: Group, stages: tuple) -> str:
    return _shown(group.config) + (f" in {len(stages)} pipeline stages" if len(stages) > 1 else "")


def _folder(root: str, group: Group) -> str:
    return os.path.join(root, group.mappings[0].format_id)


def _file(folder: str, layer: int) -> str:
    return os.path.join(folder, f"layer{layer}.pages")


def _written(mapping, group: Group, pages, blocks) -> torch.Tensor:
    """(pages, page bytes) bool: the bytes this rank's plan stores (its share of the data, pads
    never): a zero KV stored into pages of ones."""
    from ..copy.executor import plan
    kv = group.empty().zero_()
    out = torch.ones(len(pages), mapping.canonical_page_size_bytes, dtype=torch.uint8)
    plan(mapping, kv).store(kv, blocks, out, pages)
    return out == 0


def _same_format(folder: str, group: Group, side: str) -> dict:
    """What `folder/job.json` says was stored ({} where nothing was), after checking it names
    this group's page format: a store never overwrites pages of another format, and a load
    never reads them."""
    meta = os.path.join(folder, "job.json")
    if not os.path.exists(meta):
        return {}
    try:
        with open(meta) as f:
            stored = json.load(f)
        fmt = stored["format_id"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"reshard {side} job: {meta} is not a record of stored pages ({e})") from None
    if fmt != group.mappings[0].format_id:
        raise ConfigError(f"reshard {side} job: {folder} holds pages of format {fmt}, not "
                          f"{group.mappings[0].format_id} (what {_said(group, (range(1),))} reads)")
    return stored


def store_job(group: Group, stages: tuple, layers: int, root: str) -> int:
    from ..copy.executor import plan
    dist, rank, owned = _join(group, stages, "store")
    folder = _folder(root, group)
    page = group.mappings[0].canonical_page_size_bytes
    if dist.get_rank() == 0:  # the files first, whole size: every writer writes into them in place
        os.makedirs(folder, exist_ok=True)
        _same_format(folder, group, "store")  # (a folder is one format's; never overwrite another's pages)
        for layer in range(layers):
            with open(_file(folder, layer), "wb") as f:
                f.truncate(group.blocks * page)
    dist.barrier()
    pages, blocks = layout_of_pages(group, group.blocks)
    m = group.mappings[rank]
    written = _written(m, group, pages, blocks).view(-1)
    starts = torch.nonzero(written & ~torch.cat([torch.tensor([False]), written[:-1]])).view(-1).tolist()
    ends = torch.nonzero(written & ~torch.cat([written[1:], torch.tensor([False])])).view(-1).tolist()
    buf = torch.zeros(group.blocks, page, dtype=torch.uint8)
    for layer, kv in zip(owned, _fill(group, rank, owned, pages, blocks)):
        plan(m, kv).store(kv, blocks, buf, pages)
        flat = buf.view(-1).numpy()
        fd = os.open(_file(folder, layer), os.O_WRONLY)
        try:
            for s, e in zip(starts, ends):  # byte ranges: no other writer's byte is ever rewritten
                os.pwrite(fd, flat[s:e + 1].tobytes(), s)
            os.fsync(fd)
        finally:
            os.close(fd)
    dist.barrier()
    if dist.get_rank() == 0:
        with open(os.path.join(folder, "job.json"), "w") as f:
            json.dump({"family": group.family, "config": group.config, "layers": layers, "pages": group.blocks,
                       "page_bytes": page, "format_id": group.mappings[0].format_id}, f)
        print(f"stored: {_said(group, stages)}, {layers} layers x {group.blocks} pages of {page} bytes into {folder}")
    dist.destroy_process_group()
    return 0


def load_job(group: Group, stages: tuple, layers: int, root: str) -> int:
    from ..copy.executor import plan
    folder = _folder(root, group)
    meta = os.path.join(folder, "job.json")
    if not os.path.exists(meta):
        there = sorted(os.listdir(root)) if os.path.isdir(root) else []
        raise ConfigError(f"reshard load job: no pages of format {group.mappings[0].format_id} (what "
                          f"{_said(group, stages)} reads) in {root}" + (f"; it holds {', '.join(there)}" if there
                                                                        else "; it holds none"))
    stored = _same_format(folder, group, "load")
    if stored["pages"] != group.blocks or stored["layers"] != layers:
        raise ConfigError(f"reshard load job: {folder} holds {stored['layers']} layers x {stored['pages']} pages, "
                          f"this job reads {layers} x {group.blocks} (give --layers and --blocks as stored)")
    dist, rank, owned = _join(group, stages, "load")
    pages, blocks = layout_of_pages(group, group.blocks)
    m, page = group.mappings[rank], group.mappings[0].canonical_page_size_bytes
    kvs = []
    for layer in owned:
        src = torch.from_file(_file(folder, layer), shared=False, size=group.blocks * page, dtype=torch.uint8)
        kv = group.empty().zero_()
        plan(m, kv).load(src.view(group.blocks, page), pages, kv, blocks)
        kvs.append(kv)
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
