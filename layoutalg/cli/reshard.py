"""`layoutalg reshard`: store under one parallel configuration, load under another, across real
processes, with every byte checked by its engine element (`tools.distributed`)."""
from __future__ import annotations

from ..verdicts import Verdict
from ..errors import LayoutalgError
from .common import sizes_once


def reshard_command(args) -> int:
    from ..tools.distributed import group_of, reshard
    names = sizes_once("reshard", args.size)
    specs = args.specs
    if args.transport != "torch" and not args.direct:
        raise LayoutalgError(f"reshard: --transport {args.transport} moves a direct plan's bytes: give --direct")
    if args.transport == "nixl":
        from importlib.util import find_spec
        if find_spec("nixl_cu12") is None:
            raise LayoutalgError("reshard --transport nixl needs NIXL: pip install 'layoutalg[nixl]' (nixl-cu12)")
    if args.pages is not None or args.store_backend != "file" or args.mooncake_master is not None:
        return _reshard_job(args, names)
    if args.store is None or args.load is None:
        raise LayoutalgError("reshard: give both --store and --load (or one of them with --pages, under torchrun)")
    staged = _staged(args.family, specs)
    (x, sx), (y, sy) = (_side(text, args.layers, staged) for text in (args.store, args.load))
    bx, by = x.pop("block_size", args.block_size), y.pop("block_size", args.block_size)  # each side's blocks
    model = (args.heads, bx, args.head_size, args.dtype, args.blocks)
    store = group_of(args.family, x, *model, names=names, specs=specs)
    load = group_of(args.family, y, args.heads, by, *model[2:], names=names, specs=specs)
    conversion = None
    a, b = store.mappings[0].canonical_page_size_bytes, load.mappings[0].canonical_page_size_bytes
    if a != b and store.mappings[0].layout_id == load.mappings[0].layout_id:
        from ..tools.distributed import library_of
        from ..verify.conversions import conversion as converting
        big, small = (store, load) if a > b else (load, store)
        conversion = converting(library_of(specs), args.family, big.sizes, small.sizes)
        blocks = args.blocks * conversion.k if small is load else args.blocks // conversion.k
        if small is store and args.blocks % conversion.k:
            raise LayoutalgError(f"reshard: --blocks {args.blocks} stored pages of {a} bytes do not fill whole "
                                 f"loading pages of {b} bytes ({conversion.k} each)")
        load = group_of(args.family, y, args.heads, by, *model[2:4], blocks, names=names, specs=specs)
        print(f"another {'block size' if bx != by else 'cp'}: {conversion.k} pages of {min(a, b)} bytes are one of {max(a, b)}; "
              f"{'the plans compose' if args.direct else 'the stored pages are converted by'} a conversion of "
              f"{len(conversion.mapping.runs)} runs (by the algebra)")
    if args.direct:
        from ..tools.distributed import library_of
        from ..verify.prove.reshard import prove_cross_plans, prove_plans
        from ..verify.prove.runner import Budgets
        from ..plans.reshard import cross_plans, direct_plans
        if conversion is None:
            plans = direct_plans(store.mappings, load.mappings)
            rows = prove_plans(library_of(specs), args.family, store.sizes, load.sizes, plans, Budgets.of().config)
        else:
            cross = cross_plans(store.mappings, load.mappings, conversion)
            rows = prove_cross_plans(library_of(specs), args.family, store.sizes, load.sizes, cross, conversion.token,
                                     Budgets.of().config)
            plans = [p for part in cross.parts for p in part]
        for r in rows:
            print(f"{r.obligation:<14} {r.status:<8} {r.method}{': ' + r.detail if r.detail else ''}")
        if any(r.status != Verdict.PROVED for r in rows):
            print("0 passed, 0 failed: the direct plan is not proved for this pair; nothing was moved")
            return 1
        reads = ", ".join(f"{p.consumer}<-{'+'.join(map(str, p.producers()))}" for p in plans)
        print(f"direct plan: consumer<-producers {reads}; {sum(len(p.runs) for p in plans)} runs"
              + ("" if conversion is None else f" (producers numbered part * {store.world} + rank where the "
                                               f"producers read the small pages; one plan per part otherwise)"))
    from ..tools.distributed import trusted
    taken = sorted(set(trusted(store)) | set(trusted(load)))
    print("byte check: each byte is named by the engine element it holds (the local layout's indices, each a "
          "global index by the grid's placements: the engine's word), never by the spec's canonical layout"
          + ("; taken from the spec: " + "; ".join(taken) if taken else ""))
    transport = None
    if args.transport == "nixl":
        from ..tools.nixl import spawn
        transport = spawn
    passed, failed = reshard(store, load, args.layers, args.direct, conversion=conversion, device=args.device,
                             stages=(sx, sy), transport=transport)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


def _reshard_job(args, names: dict) -> int:
    """One side of a reshard as a job of its own under torchrun, its pages in a page store
    (`tools.stores`: files under --pages, or a Mooncake Store with --store-backend mooncake)."""
    from ..tools.distributed import group_of
    from ..tools.node import load_job, open_store, store_job, under_torchrun
    how = "--pages" if args.store_backend == "file" else f"--store-backend {args.store_backend}"
    if (args.store is None) == (args.load is None):
        raise LayoutalgError(f"reshard {how}: give one of --store and --load: a job is one side, its pages "
                             "stored for a later job (or loaded from an earlier one)")
    if args.direct:
        raise LayoutalgError(f"reshard {how}: --direct moves bytes between two groups at once; a job of one "
                             "side goes through its pages")
    if args.store_backend == "file" and args.pages is None:
        raise LayoutalgError("reshard: the file store needs --pages DIR (or --store-backend mooncake "
                             "--mooncake-master HOST:PORT)")
    if args.store_backend != "file" and args.pages is not None:
        raise LayoutalgError(f"reshard: --pages is the file store's folder; --store-backend {args.store_backend} "
                             f"keeps the pages in its own store")
    if not under_torchrun():
        raise LayoutalgError(f"reshard {how}: run it under torchrun (RANK, WORLD_SIZE, MASTER_ADDR and "
                             "MASTER_PORT unset), e.g. torchrun --nproc-per-node 4 -m layoutalg reshard ...")
    config, stages = _side(args.store if args.store is not None else args.load, args.layers,
                           _staged(args.family, args.specs))
    block = config.pop("block_size", args.block_size)
    group = group_of(args.family, config, args.heads, block, args.head_size, args.dtype, args.blocks,
                     names=names, specs=args.specs)
    store = open_store(args.store_backend, pages=args.pages, master=args.mooncake_master)
    try:
        if args.store is not None:
            return store_job(group, stages, args.layers, store, args.model)
        # pages of another cp or block size: converted (proved at the two sizes), into this
        # configuration's group of as many blocks as the stored pages make (--blocks: as stored)
        return load_job(group, stages, args.layers, store, args.model, prove=True, regroup=lambda n: group_of(
            args.family, config, args.heads, block, args.head_size, args.dtype, n, names=names, specs=args.specs))
    finally:
        store.close()


def add_store_arguments(rs) -> None:
    """`reshard`'s page store options (the parser is `cli.app`'s)."""
    rs.add_argument("--store-backend", choices=("file", "mooncake"), default="file",
                    help="where a torchrun job's canonical pages go: file (default: files under --pages DIR) or "
                         "mooncake (a Mooncake Store: --mooncake-master)")
    rs.add_argument("--mooncake-master", metavar="HOST:PORT",
                    help="the Mooncake Store master (mooncake_master -rpc_port=PORT); the pages live in the memory "
                         "its long-lived clients lend (docs/moving-bytes.md)")
    rs.add_argument("--transport", choices=("torch", "nixl"), default="torch",
                    help="with --direct, what moves the bytes: torch (default: the process group's sends) or nixl "
                         "(each consumer READs from the producers' registered KV memory; pip install "
                         "'layoutalg[nixl]')")
    rs.add_argument("--model", metavar="NAME", help="the model the pages are stored under (default: the family)")


def _staged(family: str, specs) -> bool:
    """Whether `family` is a stage grid's (its page holds a stage's layers: `pp` is a size of it)."""
    from ..runtime.derive import compiled_library
    from ..compile.compiled import stage_grid
    cf = compiled_library(specs).get(family)
    return cf is not None and stage_grid(cf)


def _side(text: str, layers: int, staged: bool = False) -> tuple:
    """A reshard side's configuration ('pp=2,tp=2,block_size=64', a `params.Configuration`) and its
    pipeline stages: `pp=N` splits the layers by vLLM's rule, `pp=3+5` gives each stage's layer
    count. For a stage grid's family (`staged`: a page holding each stage's layers) `pp=N` is a
    size of the page, and every rank of every stage holds the `layers` tensors."""
    from ..params import Configuration, stage_layers
    config = Configuration.parse(text, also=("block_size", "pp"))
    if "pp" not in config:
        return config, (range(layers),)
    if staged:
        if config.split:
            raise LayoutalgError(f"configuration {text!r}: the family's page holds each stage's layers: pp is its "
                                 f"number of stages (pp=2), got 'pp={'+'.join(map(str, config.split))}'")
        return config, (range(layers),)
    return config.without("pp"), stage_layers(layers, config.pp, config.split)
