"""Store under one parallel configuration, reload under another, across real processes.

`reshard(...)` (the `layoutalg reshard` command) starts one process per rank of the store
configuration (torch.distributed: gloo with KV caches in host memory; NCCL with each rank's
KV cache on its own GPU, `device="cuda"`), fills every rank's KV cache, layer by layer,
with a hash of each byte's global coordinate, and stores it through canonical pages in
a shared-memory file as an offload worker would; it tears that group down, starts a
group of the load configuration, loads, and checks every byte of every loading rank
against the hash of its coordinate. With `direct` both groups run at once and each
consumer rank receives its bytes from the producer ranks over the process group, by
the direct plan (`layoutalg.plans.reshard`), with no canonical page in between.

A byte's global coordinate is (layer, page, canonical byte): the canonical layout names
(K/V, token, global head, dim, byte) by its offset, and both configurations read one
canonical page format. The coordinate of a local byte comes from the spec's own
reading (`interpret.byte_map`), not from the runs under test.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass


import torch

from .. import params
from ..params import CONFIG_NAMES, Configuration, parse_config  # noqa: F401 - parse_config: the tests' way in
from ..compile.compiled import CompiledFamily, fitted_page, stage_sizes
from ..errors import ConfigError
from ..runtime.derive import Deriver, compiled_library
from ..runtime.tensors import block_tensor
from ..runtime.records import FALLBACK, LayerSpec, Outcome, ParallelConfig, TensorLayout

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp8": torch.float8_e4m3fn,
          "int8": torch.int8}


@dataclass(frozen=True)
class Group:
    """One configuration of one layer: every rank's mapping and its KV tensor's shape."""

    family: str
    config: Configuration  # (a dict given is made one)
    sizes: dict          # the runtime names of a rank (the spec's reading)
    mappings: tuple
    shape: tuple         # (blocks, ...) of each rank's KV tensor (its dims before the block first, `outer`)
    stride: tuple
    dtype: torch.dtype
    outer: int = 0       # dims before the block dim (FlashAttention's (2, blocks, ...): 1)
    specs: str | None = None  # the spec library folder the family is from (None: the shipped one)

    def __post_init__(self):
        object.__setattr__(self, "config", Configuration(self.config))

    @property
    def world(self) -> int:
        return len(self.mappings)

    @property
    def blocks(self) -> int:
        return self.shape[self.outer]

    def empty(self, device="cpu") -> torch.Tensor:
        return torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=device)


def group_of(family: str, config: dict, heads: int, block_size: int, head_size: int | None, dtype: str,
             blocks: int, names: dict | None = None, specs: str | None = None) -> Group:
    """The layer under `config`, served by `family` or a `ConfigError` saying why not. `names`
    gives the runtime names a spec declares (a Mamba state's heads, groups, ...); `specs` the
    spec library folder (default: the shipped one)."""
    config = Configuration(config)
    configured = sorted(n for n in (names or {}) if n in CONFIG_NAMES)
    if configured:
        raise ConfigError(f"reshard: --size {configured[0]}: '{configured[0]}' is part of the configuration; give it "
                          f"there (--store ...,{configured[0]}=N), once")
    builtin = sorted(n for n in (names or {}) if n in params.TABLE)
    if builtin:
        raise ConfigError(f"reshard: --size {builtin[0]}: '{builtin[0]}' is a built-in runtime name, set from the "
                          f"configuration and the model's options (--heads, --block-size, --head-size, --dtype); "
                          f"--size gives the names a family's spec declares")
    families = compiled_library(specs)
    if family not in families:
        raise ConfigError(f"reshard: no family {family!r}; the {'shipped ones' if specs is None else 'ones in ' + specs}: "
                          f"{', '.join(sorted(families))}")
    if dtype not in DTYPES:
        raise ConfigError(f"reshard: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    cf, torch_dtype = families[family], DTYPES[dtype]
    head_size = head_size or params.default_head_size(cf.serves)  # (None: the command's default)
    if cf.serves == FALLBACK:  # its page is whatever a layer holds: there is no model to fill or reshard
        raise ConfigError(f"reshard: {family} is the library's fallback: it stores a rank's page whole, as it lies, "
                          f"readable only under the same configuration, and has no layer of its own to fill; "
                          f"give a family that certifies a layer")
    if not isinstance(cf, CompiledFamily):
        return _page_group(family, cf, config, (heads, block_size, head_size, torch_dtype), blocks, dict(names or {}),
                           specs)
    e = torch.empty(0, dtype=torch_dtype).element_size()
    tp = config.tp
    mla = cf.serves == "mla"
    total = 1 if mla else heads
    local = 1 if mla else max(1, total // tp)
    declared = _declared(family, cf, dict(names or {}), specs)
    sizes = params.configuration(tp=tp, pcp=config.pcp, dcp=config.dcp, interleave=config.interleave,
                                 total_heads=total, heads=local, block_size=block_size,
                                 head_size=head_size, dtype_bytes=e,
                                 **{**declared, "pcp_replicas": config.pcp_replicas},
                                 **stage_sizes(cf, config.pp))
    try:  # the family's own page at these sizes
        page = fitted_page(cf, sizes)
    except Exception as err:  # noqa: BLE001 - any failure to size the page is the family not serving it
        raise ConfigError(f"reshard: {family} cannot size a page at {config.text}: {err}") from None
    sizes["page_size"] = page
    try:
        inst = cf.evaluate(sizes)
    except Exception as err:  # noqa: BLE001
        raise ConfigError(f"reshard: {family} does not serve {config.text} with {heads} KV heads: {err}") from None
    elem, k = page // e, cf.tensor_outer
    inner, strides = tuple(inst.tensor_shape) or (elem,), tuple(inst.tensor_strides) or (1,)
    kv = block_tensor(inner, strides, e, k, blocks, page)
    shape, stride = kv.shape, kv.stride
    layer = LayerSpec(cf.serves, page, block_size, local, head_size, e,
                      sizes={**declared, **({"pcp_replicas": config.pcp_replicas} if config.pcp_replicas else {})})
    res = Deriver(specs).derive(layer, TensorLayout(shape, stride, e, str(torch_dtype)),
                                ParallelConfig(tp, total, config.pcp, config.dcp, config.interleave,
                                               pp=config.pp), blocks)
    _served(res, family, config)
    return Group(family, config, sizes, res.mappings, shape, stride, torch_dtype, k, specs)


def _page_group(family: str, cf, config: Configuration, model: tuple, blocks: int, names: dict,
                specs: str | None = None) -> Group:
    """A family of pages (Mamba2 or GDN state, quantised KV with its scales) under `config`:
    the names it declares come from `names`; each rank's layer is one uint8 page a block,
    exactly its regions and pads."""
    _declared(family, cf, names, specs)  # every declared name it reads given or defaulted
    vocabulary = _vocabulary(specs)
    heads, block_size, head_size, dtype = model
    e, tp = torch.empty(0, dtype=dtype).element_size(), config.tp
    local = max(1, heads // tp)
    given = {**names, **({"pcp_replicas": config.pcp_replicas} if config.pcp_replicas else {})}
    sizes = params.configuration(tp=tp, pcp=config.pcp, dcp=config.dcp, interleave=config.interleave,
                                 total_heads=heads, heads=local, block_size=block_size, head_size=head_size,
                                 dtype_bytes=e, **given)
    errors = []
    for quant in (0, 1):  # a per-token-head quantised family (KV with its scales) serves quantised layers only
        try:  # its regions and pads at these sizes (the page is exactly them: a pad up to the page is empty)
            page = fitted_page(cf, {**sizes, "per_token_head_quant": quant})
            break
        except Exception as err:  # noqa: BLE001 - any failure to size the page is the family not serving it
            errors.append(f"with per_token_head_quant={quant}: {err}")
    else:
        defaulted = [f"{n}={vocabulary[n].default}" for n, *_ in cf.bounds
                     if n not in params.TABLE and n not in names and n not in config
                     and vocabulary[n].default is not None]
        hint = f" (left at their defaults: {', '.join(defaulted)}; give others with --size NAME=VALUE)" \
            if defaulted else ""
        raise ConfigError(f"reshard: {family} cannot size a page at {config.text}: {'; '.join(errors)}{hint}")
    sizes.update(page_size=page, per_token_head_quant=quant)
    layer = LayerSpec(cf.serves, page, block_size, local, head_size, e, per_token_head_quant=bool(quant),
                      sizes=given)
    res = Deriver(specs).derive(layer, None, ParallelConfig(tp, heads, config.pcp, config.dcp,
                                                            config.interleave), blocks)
    _served(res, family, config)
    return Group(family, config, sizes, res.mappings, (blocks, page), (page, 1), torch.uint8, 0, specs)


def library_of(specs: str | None):
    """The spec library a group's family is from (`load_default`: parsed once per process)."""
    from ..resources import specs_dir
    from ..dsl.library import load_default
    return load_default(specs or specs_dir())


def _vocabulary(specs: str | None = None) -> dict:
    return library_of(specs).vocabulary()


def _declared(family: str, cf, names: dict, specs: str | None = None) -> dict:
    """The names a spec declares that `family` reads, as given (`names`) or at their defaults;
    a `ConfigError` naming those with no default that are not given."""
    vocabulary = _vocabulary(specs)
    reads = [n for n, *_ in cf.bounds if n not in params.TABLE]
    unread = sorted(n for n in names if n not in reads)
    if unread:  # it would change nothing: most likely meant for another family
        raise ConfigError(f"reshard: {family} does not read {', '.join(unread)} (it reads "
                          f"{', '.join(sorted(set(reads) - set(params.CONFIG_NAMES))) or 'no declared name'}): "
                          f"drop the --size")
    missing = sorted(n for n in reads if n not in names and vocabulary[n].default is None)
    if missing:
        raise ConfigError(f"reshard: {family} reads {', '.join(missing)}: give each with --size NAME=VALUE")
    return {**{n: vocabulary[n].default for n in reads if n not in names}, **names}


def _served(res, family: str, config: Configuration) -> None:
    """`ConfigError` unless `family` itself certified the layer (not another family, not the fallback)."""
    if res.result != Outcome.CERTIFIED or res.family != family:
        raise ConfigError(f"reshard: {family} does not serve {config.text} ({res.result}"
                          f"{', by ' + res.family if res.family else ''}): " + "; ".join(res.reasons))


def coordinates(group: Group, rank: int) -> torch.Tensor:
    """Each local byte's canonical byte on `rank`, by the spec's own reading."""
    from ..dsl.interpret import Reading, byte_map
    lib = library_of(group.specs)
    out = torch.full((group.mappings[rank].local_page_size_bytes,), -1, dtype=torch.int64)
    for part in lib.parts_of(group.family):  # every data region of a page (a layout of one box: itself)
        m = byte_map(Reading(lib, part, dict(group.sizes)), rank)
        if m:
            out[torch.tensor(list(m.keys()))] = torch.tensor(list(m.values()))
    if int((out < 0).sum()) and lib.parts_of(group.family) == [group.family]:
        raise ConfigError(f"reshard: rank {rank}'s page has bytes the spec gives no coordinate")
    return out  # -1: a pad byte, never copied


def hashed(layer: int, page_ids: torch.Tensor, canon: torch.Tensor) -> torch.Tensor:
    """(pages, bytes) uint8: a mix of (layer, page id, canonical byte), the same on every rank.
    `canon` is one canonical byte per local byte, or a row of them per page."""
    canon = canon.view(1, -1) if canon.dim() == 1 else canon
    x = ((layer * 1_000_003 + page_ids.view(-1, 1)) << 24) + canon + 0x5bd1e995
    x = x ^ (x >> 15)
    x = x * 0x2C1B3C6D
    x = x ^ (x >> 12)
    x = x * 0x297A2D39
    return (x ^ (x >> 15)).bitwise_and(255).to(torch.uint8)


def layout_of_pages(group: Group, blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(page ids, block ids): page i lives in a shuffled block of each rank (seeded by the configuration)."""
    import hashlib
    seed = int.from_bytes(hashlib.sha256(repr(sorted(group.config.items())).encode()).digest()[:8], "little")
    g = torch.Generator().manual_seed(seed)
    return torch.arange(blocks, dtype=torch.int64), torch.randperm(blocks, generator=g)


# ---- processes -------------------------------------------------------------------------------

DEVICES = ("cpu", "cuda")


def backend_for(device: str, world: int, gpus: int) -> str:
    """The process group's backend for `world` ranks whose KV caches live on `device`: NCCL
    where each rank has a GPU of its own (it refuses two ranks on one device), else gloo (KV
    on a GPU then travels through host memory)."""
    if device not in DEVICES:
        raise ConfigError(f"reshard: device {device!r} is not one of {', '.join(DEVICES)}")
    return "nccl" if device == "cuda" and gpus >= world else "gloo"


def _usable(device: str) -> None:
    backend_for(device, 1, 0)  # (a device it knows)
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("reshard: --device cuda, but torch sees no CUDA device here "
                          f"(torch {torch.__version__}, torch.cuda.is_available() is False); use --device cpu")


def join_group(rank: int, world: int, job: dict, name: str):
    """(torch.distributed, this rank's device, the backend): rank `rank` of `world` joined."""
    import torch.distributed as dist
    torch.set_num_threads(1)
    gpus = torch.cuda.device_count() if job["device"] == "cuda" else 0
    if job["device"] == "cuda" and not gpus:  # (CUDA_VISIBLE_DEVICES set otherwise here): never the CPU instead
        raise ConfigError(f"reshard: rank {rank} of the {name} group sees no CUDA device")
    dev = torch.device("cuda", rank % gpus) if gpus else torch.device("cpu")
    if gpus:
        torch.cuda.set_device(dev)  # before the group: NCCL binds each rank to the current device
    backend = backend_for(job["device"], world, gpus)
    dist.init_process_group(backend, init_method=f"file://{job['folder']}/{name}.init", rank=rank, world_size=world)
    return dist, dev, backend


def global_coordinates(group: Group, rank: int, pages: torch.Tensor, small=None):
    """(page, canonical byte) of each local byte of each page, in one format for both groups:
    the larger canonical page's. `small` is (k, `oracle.spec_coordinates`) where this group
    reads the smaller pages of another cp (its page p is part p % k of big page p // k), else None."""
    canon = coordinates(group, rank)
    if small is None:
        return pages, canon
    k, table = small  # (k, the spec's big page byte of each byte of each part), `oracle.spec_coordinates`
    big = table[pages % k][:, canon.clamp(min=0)]
    return pages // k, big.masked_fill(canon < 0, -1)  # a pad byte stays a pad byte (-1), never a data byte


def element_coordinates(group: Group, rank: int, pages: torch.Tensor):
    """(page ids, coordinates (pages, bytes), data (bytes,)): each local byte of each page named by
    the engine element it holds (`oracle.naming`: the local index names, each a global index by
    the grid's placements, the token counted from the first page), never by the spec's canonical
    layout: a page stored under one configuration must give every element back under another.
    `data` is False on pad bytes, which are never copied."""
    from ..verify.oracle import naming
    n = naming(library_of(group.specs), group.family, dict(group.sizes), rank,
               group.mappings[rank].local_page_size_bytes)
    element, token = torch.tensor(n.element, dtype=torch.int64), torch.tensor(n.token, dtype=torch.int64)
    pages = pages.view(-1, 1)
    absolute = torch.where(token >= 0, pages * max(1, n.tokens) + token, pages)  # one token sequence, any page size
    return torch.zeros_like(pages), element * 1_000_003 + absolute, element >= 0


def trusted(group: Group) -> tuple:
    """What the byte check takes from the spec (`oracle.trusted`), beside the grid's placements."""
    from ..verify import oracle
    return oracle.trusted(library_of(group.specs), group.family, dict(group.sizes))


def fill_layers(group: Group, rank: int, layers, pages: torch.Tensor, blocks: torch.Tensor,
          device=torch.device("cpu")) -> list[torch.Tensor]:
    """Each of `layers` (the layer numbers this rank's stage owns) filled with its bytes' hashes."""
    from ..copy.views import layer_segments
    where, canon, _ = element_coordinates(group, rank, pages)
    out, at = [], blocks.to(device)
    for layer in layers:
        kv, h = group.empty(device), hashed(layer, where, canon).to(device)
        for seg in layer_segments(kv, group.mappings[rank], "kv", "fill"):  # each stretch of the page
            seg.bytes.index_copy_(0, at, h[:, seg.start:seg.start + seg.bytes.shape[1]].contiguous())
        out.append(kv)
    return out


def verify_layers(group: Group, rank: int, kvs, pages, blocks, layers) -> list[bool]:
    from ..copy.views import layer_segments
    where, canon, data = element_coordinates(group, rank, pages)
    m = group.mappings[rank]
    return [torch.equal(torch.cat([seg.bytes.index_select(0, blocks.to(kv.device))
                                   for seg in layer_segments(kv, m, "kv", "check")], 1).cpu()[..., data],
                        hashed(layer, where, canon)[..., data])
            for layer, kv in zip(layers, kvs)]


def stage_of(stages: tuple, world: int, process: int) -> tuple[int, int, range]:
    """(stage, rank within the stage, the layers it owns) of process `process` of a side whose
    pipeline `stages` (the layers each owns) each run `world` ranks, stage by stage."""
    return process // world, process % world, stages[process // world]


def stage_range(job: dict, side: str, process: int) -> tuple[int, int, range]:
    return stage_of(job[side + "_stages"], job[side].world, process)


def _pages(job: dict, key: str, group: Group, layers: int) -> torch.Tensor:
    """The canonical pages in shared host memory, (layers, pages, canonical page bytes)."""
    n = group.mappings[0].canonical_page_size_bytes
    return torch.from_file(job[key], shared=True, size=layers * group.blocks * n,
                           dtype=torch.uint8).view(layers, group.blocks, n)


def _store_worker(process: int, job: dict):
    from ..copy.executor import plan
    group, layers = job["store"], job["layers"]
    stage, rank, owned = stage_range(job, "store", process)
    dist, dev, _ = join_group(rank, group.world, job, f"store.{stage}")  # each pipeline stage a group of its own
    pages, blocks = layout_of_pages(group, group.blocks)
    m = group.mappings[rank]
    buf = _pages(job, "pages", group, layers)
    kvs = fill_layers(group, rank, owned, pages, blocks, dev)
    t0 = time.perf_counter()
    for layer, kv in zip(owned, kvs):  # from the device's KV cache straight into shared host pages
        plan(m, kv).store(kv, blocks, buf[layer], pages)
    _synchronize(dev)
    with open(os.path.join(job["folder"], f"store.{process}.json"), "w") as f:
        json.dump({"copy_s": time.perf_counter() - t0}, f)
    dist.barrier()
    dist.destroy_process_group()


def _load_worker(process: int, job: dict):
    from ..copy.executor import plan
    group, layers, folder = job["load"], job["layers"], job["folder"]
    stage, rank, owned = stage_range(job, "load", process)
    dist, dev, _ = join_group(rank, group.world, job, f"load.{stage}")
    pages, blocks = layout_of_pages(group, group.blocks)
    m = group.mappings[rank]
    buf = _pages(job, "load_pages", group, layers)
    kvs = [group.empty(dev).zero_() for _ in owned]
    t0 = time.perf_counter()
    for layer, kv in zip(owned, kvs):
        plan(m, kv).load(buf[layer], pages, kv, blocks)  # host pages into the device's KV cache
    _synchronize(dev)
    copy_s = time.perf_counter() - t0
    write_report(folder, process, verify_layers(group, rank, kvs, pages, blocks, owned), 0, copy_s)
    dist.barrier()
    dist.destroy_process_group()


def direct_transfers(job: dict) -> list:
    """Every transfer of the direct reshard (`plans.reshard.Transfer`): one format, or across
    another cp (`CrossPlans`)."""
    from ..plans.reshard import Transfer, direct_plans
    store, load = job["store"], job["load"]
    if job.get("cross") is not None:
        return job["cross"].transfers(min(store.blocks, load.blocks))
    pages = list(range(store.blocks))
    return [Transfer(p, v, v, pages, pages) for p in direct_plans(store.mappings, load.mappings) for v in p.producers()]


def owner_stage(job: dict, side: str, layer: int) -> int:
    """The pipeline stage of `side` that owns `layer`."""
    return next(s for s, owned in enumerate(job[side + "_stages"]) if layer in owned)


def _direct_worker(process: int, job: dict):
    """Process `process` of one group holding every stage of both sides: producers first (stage
    by stage, each stage's ranks in order), then consumers. A layer's bytes go from the ranks of
    the store stage that owns it to those of the load stage that owns it."""
    from ..copy.direct import gather, scatter
    store, load, folder = job["store"], job["load"], job["folder"]
    producers = store.world * len(job["store_stages"])
    dist, dev, backend = join_group(process, producers + load.world * len(job["load_stages"]), job, "direct")
    wire = dev if backend == "nccl" else torch.device("cpu")  # gloo sends host tensors only
    transfers = direct_transfers(job)
    tag = len(transfers)
    ops, got = [], {}
    if process < producers:  # a producer: send each consumer what its plan reads from here
        stage, rank, owned = stage_range(job, "store", process)
        pages, blocks = layout_of_pages(store, store.blocks)
        kvs = fill_layers(store, rank, owned, pages, blocks, dev)
        ops = [dist.P2POp(dist.isend, gather(plan, v, kv, blocks[src]).to(wire),
                          producers + owner_stage(job, "load", layer) * load.world + plan.consumer, tag=layer * tag + t)
               for t, (plan, v, p, src, dst) in enumerate(transfers) if p == rank
               for layer, kv in zip(owned, kvs)]
    else:  # a consumer: one receive per (transfer, layer), in the order its producer sends them
        stage, me, owned = stage_range(job, "load", process - producers)
        pages, blocks = layout_of_pages(load, load.blocks)
        kvs = {layer: load.empty(dev).zero_() for layer in owned}
        got = {(t, layer): torch.empty(x[0].bytes_from(x[1]) * len(x[4]), dtype=torch.uint8, device=wire)
               for t, x in enumerate(transfers) if x.plan.consumer == me for layer in owned}
        ops = [dist.P2POp(dist.irecv, got[(t, layer)], owner_stage(job, "store", layer) * store.world + transfers[t].rank,
                          tag=layer * tag + t) for t, layer in got]
    dist.barrier()  # the group's first collective has every rank in it (NCCL's batched point-to-point asks it)
    t0 = time.perf_counter()
    for w in dist.batch_isend_irecv(ops) if ops else ():
        w.wait()
    if process >= producers:
        moved = 0
        for (t, layer), data in got.items():
            plan, v, _, _, dst = transfers[t]
            scatter(plan, v, data, kvs[layer], blocks[dst])
            moved += data.numel()
        _synchronize(dev)
        write_report(folder, process - producers, verify_layers(load, me, list(kvs.values()), pages, blocks, owned), moved,
                time.perf_counter() - t0)
    dist.barrier()
    dist.destroy_process_group()


def write_report(folder: str, rank: int, ok: list[bool], moved: int, copy_s: float) -> None:
    with open(os.path.join(folder, f"result.{rank}.json"), "w") as f:
        json.dump({"ok": ok, "moved": moved, "copy_s": copy_s}, f)


def _synchronize(dev) -> None:
    """Wait for the device's copies, so that a time read after it is theirs."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def reshard(store: Group, load: Group, layers: int, direct: bool = False, log=print,
            conversion=None, device: str = "cpu", stages: tuple = ((), ()), transport=None) -> tuple[int, int]:
    """Run it; returns (passed, failed) counting loading ranks x layers. Where the two groups
    read pages of another cp, `conversion` (`conversions.conversion`, big to small pages)
    converts the stored pages between the two formats in between, or with `direct` is
    composed into the plans (`reshard.cross_plans`). The byte check names each byte by the engine
    element it holds (`element_coordinates`), never by the spec's canonical layout, the
    conversion or the plans under test. With `device`
    "cuda" each rank's KV cache is on a GPU (rank `r` on GPU `r % count`) and the pages move
    between it and shared host memory; the group runs NCCL where every rank has a GPU of its own.
    `stages` gives each side's pipeline stages, the layers each owns (`params.stage_layers`),
    each stage a group of the side's configuration: a layer is stored by the stage that owns
    it and loaded by the other side's stage that owns it (none given: one stage, every layer).
    `transport(job, processes)` runs a direct reshard's processes instead of the process group's
    sends (`tools.nixl.spawn`) and says what moved the bytes."""
    _usable(device)
    stages = tuple(tuple(x) or (range(layers),) for x in stages)
    ps, pl = store.world * len(stages[0]), load.world * len(stages[1])  # processes of each side
    if ps + pl > MAX_PROCESSES:
        raise ConfigError(f"reshard: {ps + pl} processes (a rank a process, each pipeline stage its ranks) are more "
                          f"than the {MAX_PROCESSES} one machine runs here; run each side as a job of its own on "
                          f"many nodes (--pages DIR under torchrun)")
    for side, owned in zip(("store", "load"), stages):
        if sorted(i for r in owned for i in r) != list(range(layers)):
            raise ConfigError(f"reshard: the {side} side's pipeline stages own layers "
                              f"{[list(r) for r in owned]}, not each of the {layers} layers once")
    a, b = store.mappings[0], load.mappings[0]
    small, cross = _formats(store, load, conversion, direct)
    with tempfile.TemporaryDirectory(prefix="layoutalg-reshard-", dir="/dev/shm" if os.path.isdir("/dev/shm")
                                     else None) as folder:
        job = {"store": store, "load": load, "layers": layers, "folder": folder, "conversion": conversion,
               "device": device, "store_stages": stages[0], "load_stages": stages[1],
               "small": small, "cross": cross, "pages": os.path.join(folder, "pages.bin"),
               "load_pages": os.path.join(folder, "pages.bin" if small is None else "converted.bin")}
        gpus = torch.cuda.device_count() if device == "cuda" else 0
        on = f"{device}, " + ("; ".join(f"{n} group: {backend_for(device, w, gpus)}" for n, w in (
            (("direct", ps + pl),) if direct else (("store", store.world), ("load", load.world)))))
        log(f"KV caches on {on}" + (f" ({gpus} GPUs: ranks share them round-robin)" if device == "cuda" else ""))
        t0 = time.perf_counter()
        how = "the process group"
        if direct:
            how = transport(job, ps + pl) if transport is not None else _spawn(_direct_worker, job, ps + pl) or how
        else:
            _spawn(_store_worker, job, ps)
            log(f"stored: {_staged(stages[0], store)} of {store.config.text} into {layers} x {store.blocks} "
                f"canonical pages of {a.canonical_page_size_bytes} bytes (shared memory)")
            if small is not None:  # (a direct reshard needs no conversion: its plans compose it)
                _convert(job)
                log(f"converted: {layers} x {store.blocks} pages of {a.canonical_page_size_bytes} bytes into "
                    f"{layers} x {load.blocks} of {b.canonical_page_size_bytes} (another cp or block size: {conversion.k} "
                    f"small pages a big one, along '{conversion.token}')")
            _spawn(_load_worker, job, pl)
        seconds = time.perf_counter() - t0
        results = [json.load(open(os.path.join(folder, f"result.{r}.json"))) for r in range(pl)]
        stores = [] if direct else [json.load(open(os.path.join(folder, f"store.{r}.json"))) for r in range(ps)]
    ok = [x for r in results for x in r["ok"]]
    moved = sum(r["moved"] for r in results)
    copies = max(r["copy_s"] for r in results) + max((r["copy_s"] for r in stores), default=0.0)
    if direct:
        log(f"direct: {_staged(stages[1], load)} read {moved} bytes from {_staged(stages[0], store)} over "
            f"{how}: the transfers and scatters {copies:.3f} s (the slowest consumer); processes, filling "
            f"and checking the rest of {seconds:.2f} s")
    else:
        log(f"loaded: {_staged(stages[1], load)} of {load.config.text}: the copies {copies:.3f} s (the slowest rank's "
            f"store and load); processes, filling, converting and checking the rest of {seconds:.2f} s")
    return sum(ok), len(ok) - sum(ok)


MAX_PROCESSES = 128
"""The most rank processes one `reshard` starts on this machine (both sides, every stage)."""


def _staged(owned: tuple, group: Group) -> str:
    """'4 ranks', or with pipeline stages '2 stages (layers 0-3, 4-7) of 2 ranks'."""
    if len(owned) == 1:
        return f"{group.world} ranks"
    spans = (f"{r.start}-{r.stop - 1}" if len(r) > 1 else f"{r.start}" for r in owned)
    return f"{len(owned)} stages (layers {', '.join(spans)}) of {group.world} ranks"


def _spawn(worker, job: dict, ranks: int) -> None:
    """One process a rank; a rank that fails is a `ConfigError` saying which and why (its last line)."""
    import torch.multiprocessing as mp
    try:
        mp.spawn(worker, args=(job,), nprocs=ranks, join=True)
    except mp.ProcessRaisedException as e:
        why = [line for line in str(e).strip().splitlines() if line.strip()]
        raise ConfigError(f"reshard: a rank's process failed: {why[-1] if why else e}") from None
    except mp.ProcessExitedException as e:
        raise ConfigError(f"reshard: a rank's process exited: {e}") from None


def _formats(store: Group, load: Group, conversion, direct: bool):
    """(which group reads the small pages, the cross-cp plans): both None where both read one
    page format; a `ConfigError` where they do not convert."""
    a, b = store.mappings[0], load.mappings[0]
    if a.layout_id != b.layout_id or (a.canonical_page_size_bytes != b.canonical_page_size_bytes
                                      and conversion is None):
        raise ConfigError(f"reshard: {store.config.text} and {load.config.text} read different canonical "
                          f"page formats ({a.layout_id}, {a.canonical_page_size_bytes} bytes vs {b.layout_id}, "
                          f"{b.canonical_page_size_bytes} bytes): a page stored under one is not a page of the other")
    if a.canonical_page_size_bytes == b.canonical_page_size_bytes:
        if a.format_id != b.format_id:  # one family, one page size, bytes in other places (the opaque
            raise ConfigError(            # fallback under another tp, a model of other sizes)
                f"reshard: {store.config.text} and {load.config.text} read different canonical page "
                f"formats ({a.format_id} vs {b.format_id}, {a.canonical_page_size_bytes} bytes each): a page "
                f"stored under one is not a page of the other")
        if store.blocks != load.blocks:
            raise ConfigError("reshard: both groups must hold the same number of blocks")
        return None, None
    small = "store" if a.canonical_page_size_bytes < b.canonical_page_size_bytes else "load"
    big_group, small_group = (load, store) if small == "store" else (store, load)
    if (big_group.mappings[0].canonical_page_size_bytes != conversion.big_page or
            small_group.mappings[0].canonical_page_size_bytes != conversion.small_page or
            small_group.blocks != conversion.k * big_group.blocks):
        raise ConfigError(f"reshard: the conversion is for {conversion.big_page}- and {conversion.small_page}-"
                          f"byte pages, {conversion.k} small a big one: it does not fit these groups")
    from ..plans.reshard import cross_plans
    cross = cross_plans(store.mappings, load.mappings, conversion) if direct else None
    return small, cross


def _convert(job: dict) -> None:
    """The stored pages in the other format: big pages to groups of k small ones, or back.
    Sequence pages are consecutive page ids, so a group of k small pages is one row."""
    from ..copy.direct import convert
    conv, layers = job["conversion"], job["layers"]
    store, load = job["store"], job["load"]
    src = torch.from_file(job["pages"], shared=True, size=layers * store.blocks *
                          store.mappings[0].canonical_page_size_bytes, dtype=torch.uint8)
    dst = torch.from_file(job["load_pages"], shared=True, size=layers * load.blocks *
                          load.mappings[0].canonical_page_size_bytes, dtype=torch.uint8)
    big, small = (src, dst) if job["small"] == "load" else (dst, src)
    groups = big.numel() // conv.big_page
    convert(conv, big.view(groups, conv.big_page), small.view(groups * conv.k, conv.small_page),
            to_small=job["small"] == "load")
