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
The record names the pages' format, canonical layout and sizes. The load job reads it first,
gets the pages of its own layers and checks every byte of every layer against the engine
element it holds (`distributed.element_coordinates`), as `layoutalg reshard` does in one
process tree. Pages of another format are refused before any page is read, unless they are
pages of another cp or block size of the same family and canonical layout: then the job's
first process makes the conversion (`PageConversion`: proved at the two sizes, or resting on
the proof record) and each rank converts the stored pages of its layers on the way in. A
rank whose put or get fails fails the job on every rank, naming the page.
"""
from __future__ import annotations

import os

import torch

from ..params import Configuration
from .distributed import Group, fill_layers, verify_layers, layout_of_pages, stage_of
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
    return group.config.text + (f" in {len(stages)} pipeline stages" if len(stages) > 1 else "")


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
        for layer, kv in zip(owned, fill_layers(group, rank, owned, pages, blocks)):
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
                             "page_bytes": page, "format_id": fmt, "model": model, "job": job[0],
                             "layout_id": group.mappings[0].layout_id, "sizes": dict(group.sizes)})
        print(f"stored: {_said(group, stages)}, {layers} layers x {group.blocks} pages of {page} bytes into "
              f"{store.place(fmt)}")
    dist.destroy_process_group()
    return 0


def load_job(group: Group, stages: tuple, layers: int, store: PageStore | str, model: str | None = None,
             regroup=None, prove: bool = False) -> int:
    """Load the pages of `model` (default: the family's name) that a store job put into `store`, under
    `group`, and check every byte; 0 where every layer of every rank passed.

    Where the store holds the model's pages in another format of the same family and canonical
    layout (another cp or block size), they are converted on the way in (`converted`): the
    conversion rests on the proof record (`plans.conversion`, `layoutalg prove --family NAME`),
    or with `prove` is proved at the two sizes (`verify.conversions.conversion`, as `layoutalg
    reshard` does in one process). The stored pages are another number of this job's pages (k
    small pages a big one): `group` holds that many blocks, or `regroup(blocks)` gives the group
    that does (the CLI's way: it builds the group from --blocks as stored)."""
    from ..copy.executor import plan
    store = FileStore(store) if isinstance(store, (str, os.PathLike)) else store
    model, fmt = model or group.family, group.mappings[0].format_id
    stored = store.find(model, fmt)  # another format's record: refused before any page is read, unless it converts
    if stored is None:
        raise ConfigError(f"reshard load job: no pages of format {fmt} (what {_said(group, stages)} reads) "
                          f"{store.missing(fmt)}")
    other = stored["format_id"] != fmt
    if other:
        _may_convert(group, stages, store, model, stored)
    if stored["layers"] != layers or not other and stored["pages"] != group.blocks:
        raise ConfigError(f"reshard load job: {store.place(stored['format_id'])} holds {stored['layers']} layers x "
                          f"{stored['pages']} pages, this job reads {layers} x {group.blocks} (give --layers and "
                          f"--blocks as stored)")
    dist, rank, owned, _, _ = _join(group, stages, "load")
    _one_record(dist, stored, store)
    conv = None
    if other:
        conv, group = _converting(dist, group, stages, store, model, stored, regroup, prove)
    pages, blocks = layout_of_pages(group, group.blocks)
    m, page = group.mappings[rank], group.mappings[0].canonical_page_size_bytes
    ids = torch.arange(stored["pages"], dtype=torch.int64)
    kvs, error = [], None
    try:
        for layer in owned:
            src = torch.empty(stored["pages"], stored["page_bytes"], dtype=torch.uint8)
            store.get(PageKey(model, stored["format_id"], stored.get("job", ""), layer), ids, src)
            src = src if conv is None else converted(conv, src, group.blocks, page)
            kv = group.empty().zero_()
            plan(m, kv).load(src, pages, kv, blocks)
            kvs.append(kv)
    except LayoutalgError as e:
        error = e
    _together(dist, error, "load")
    ok = verify_layers(group, rank, kvs, pages, blocks, owned)
    counts = torch.tensor([sum(ok), len(ok) - sum(ok)], dtype=torch.int64)
    dist.all_reduce(counts)
    passed, failed = counts.tolist()
    if dist.get_rank() == 0:
        print(f"loaded: {_said(group, stages)}, {layers} layers x {group.blocks} pages, from pages stored by "
              f"{_stored_by(stored)}")
        print(f"{passed} passed, {failed} failed")
    dist.destroy_process_group()
    return 1 if failed or not passed else 0


def _one_record(dist, stored: dict, store) -> None:
    """Every rank read the record on its own, before the group joined: where a store job committed
    in between, two ranks would load two jobs' pages. The first rank's record is compared with
    each rank's, and every rank fails together where any differs."""
    first = [stored]
    dist.broadcast_object_list(first, src=0)
    same = torch.tensor([int(first[0] == stored)], dtype=torch.int64)
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    if not same.item():
        dist.destroy_process_group()
        raise ConfigError(f"reshard load job: the record of the pages in {store.where()} changed while the job's "
                          f"ranks read it (a store job committed meanwhile): nothing was loaded; run the load again")


def converted(conv, pages: torch.Tensor, blocks: int, page: int) -> torch.Tensor:
    """`pages` (stored: big or small pages of `conv`) as `blocks` pages of `page` bytes, the other
    format: big page g is small pages k*g .. k*g + k - 1 (`copy.direct.convert`); pads stay 0."""
    from ..copy.direct import convert
    out = torch.zeros(blocks, page, dtype=torch.uint8)
    if pages.shape[1] == conv.big_page:
        convert(conv, pages, out, to_small=True)
    else:
        convert(conv, out, pages, to_small=False)
    return out


def _stored_by(stored: dict) -> str:
    """The configuration a store's record says stored its pages, as the messages print one (a
    damaged one as it is)."""
    try:
        return Configuration(stored.get("config", {})).text
    except (ConfigError, TypeError, ValueError):
        return repr(stored.get("config"))


def _refused(store: PageStore, model: str, stored: dict, group: Group, stages: tuple, why: str) -> ConfigError:
    def block(sizes) -> str:
        return f" in blocks of {sizes['block_size']} tokens" if isinstance(sizes, dict) and "block_size" in sizes \
            else ""
    fid = stored.get("format_id")
    place = store.place(fid) if isinstance(fid, str) and fid else "the store"  # (a damaged record names no folder)
    return ConfigError(f"reshard load job: {place} holds pages of model {model} in format "
                       f"{fid!s} (stored by {_stored_by(stored)}"
                       f"{block(stored.get('sizes'))}), not {group.mappings[0].format_id} (what {_said(group, stages)}{block(group.sizes)} reads), "
                       f"and they do not convert: {why}; nothing was read")


def _may_convert(group: Group, stages: tuple, store: PageStore, model: str, stored: dict) -> None:
    """What a record of another format must say for its pages to convert into `group`'s, checked
    before any process joins (a `ConfigError` naming both formats otherwise); the conversion
    itself is made once the job's processes have joined (`_converting`)."""
    from ..runtime.formats import FormatId, element_part
    m = group.mappings[0]
    try:
        stored_types = FormatId.parse(stored.get("format_id")).types
    except LayoutalgError as e:
        raise _refused(store, model, stored, group, stages, f"the record's format id is damaged ({e})") from None
    why = ""
    if stored.get("family") != group.family:
        why = f"they are pages of family {stored.get('family')}, this job's family is {group.family}"
    elif "layout_id" not in stored or not isinstance(stored.get("sizes"), dict):
        why = "the record names no canonical layout or sizes (an earlier layoutalg stored it): store it again"
    elif stored["layout_id"] != m.layout_id:
        why = f"another canonical layout ({stored['layout_id']}, this job's {m.layout_id})"
    elif stored_types != element_part(m.format_id):
        why = "the pages hold other element types"
    elif stored["page_bytes"] == m.canonical_page_size_bytes:
        why = f"pages of one size ({m.canonical_page_size_bytes} bytes) with bytes in other places are not parts " \
              f"of one another"
    if why:
        raise _refused(store, model, stored, group, stages, why)


def _converting(dist, group: Group, stages: tuple, store: PageStore, model: str, stored: dict, regroup, prove: bool):
    """(the `PageConversion` between the stored pages and `group`'s, the group that holds the stored
    pages converted): made on the job's first process and sent to the others, so that a job of
    many ranks proves (or reads the record of) one conversion; every rank fails if it fails."""
    box, error = [None, 0], None
    if dist.get_rank() == 0:
        try:
            box = list(_conversion(group, stages, store, model, stored, prove, regroup is not None))
        except LayoutalgError as e:
            error = e
        except Exception as e:  # noqa: BLE001 - the other ranks would wait for the conversion forever
            error = _refused(store, model, stored, group, stages,
                             f"the conversion could not be made ({type(e).__name__}: {e})")
    _together(dist, error, "load")
    dist.broadcast_object_list(box, src=0)
    conv, need = box
    if group.blocks != need:
        try:
            group = regroup(need)
        except LayoutalgError as e:
            error = e
    _together(dist, error, "load")
    return conv, group


def _conversion(group: Group, stages: tuple, store: PageStore, model: str, stored: dict, prove: bool,
                regroup: bool = False):
    """(the conversion, the blocks `group` needs to hold the stored pages): refused naming both formats."""
    from ..runtime.formats import form_part, unread
    m = group.mappings[0]
    a, b = stored["page_bytes"], m.canonical_page_size_bytes
    big, small = (stored["sizes"], group.sizes) if a > b else (group.sizes, stored["sizes"])
    try:
        if prove:  # the CLI's way: proved at these sizes, as `layoutalg reshard` converts in one process
            from .distributed import library_of
            from ..verify.conversions import conversion
            conv = conversion(library_of(group.specs), group.family, dict(big), dict(small))
        else:      # the engine's way: resting on the proof record (`layoutalg prove --family NAME`)
            from ..plans.conversion import conversion
            conv = conversion(group.family, dict(big), dict(small), group.specs)
    except LayoutalgError as e:
        raise _refused(store, model, stored, group, stages, str(e)) from None
    formats = (stored["format_id"], m.format_id) if a > b else (m.format_id, stored["format_id"])
    if (conv.big_page, conv.small_page) != (max(a, b), min(a, b)) or any(
            want and not unread(f) and form_part(f) != want for f, want in zip(formats, (conv.big_format,
                                                                                         conv.small_format))):
        raise _refused(store, model, stored, group, stages, f"the conversion made at the recorded sizes is "
                       f"between {conv.big_format} and {conv.small_format} ({conv.big_page} and {conv.small_page} "
                       f"bytes): the record's sizes are not its format's")
    n = stored["pages"]
    if a < b and n % conv.k:
        raise _refused(store, model, stored, group, stages, f"{n} stored pages of {a} bytes do not fill whole "
                       f"pages of {b} bytes ({conv.k} each)")
    need = n // conv.k if a < b else n * conv.k
    if group.blocks != need and (not regroup or group.blocks != n):
        raise ConfigError(f"reshard load job: the {n} stored pages of a layer are {need} pages of this job's format, "
                          f"but its group holds {group.blocks} blocks (give --blocks {n}, as stored, or a group of "
                          f"{need} blocks)")
    print(f"converted: {n} pages of {a} bytes a layer, stored by {_stored_by(stored)} (format "
          f"{stored['format_id']}), into {need} pages of {b} bytes (format {m.format_id}): {conv.k} small pages a big "
          f"one along '{conv.token}', a conversion of {len(conv.mapping.runs)} runs "
          f"({'proved at these sizes' if prove else 'resting on the proof record'})", flush=True)
    return conv, need


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
