"""`layoutalg draw`: pictures of who writes which bytes, for one family or a reshard."""
from __future__ import annotations

from pathlib import Path

from ..errors import LayoutalgError
from ..mapping import rank_and_part
from .common import families_in
from .derive import config_line, derived_at_options, Inapplicable, read_names


def _draw_reshard(args) -> int:
    import copy
    from ..params import CONFIG_NAMES, Configuration
    from ..tools.draw import draw_reshard
    from ..plans.reshard import direct_plans
    if not (args.store and args.load):
        raise LayoutalgError("draw: --store and --load go together (the producer and the consumer configuration)")
    groups = []
    for text in (args.store, args.load):
        config, a = Configuration.parse(text, also=("pp",)), copy.copy(args)
        if config.split:
            raise LayoutalgError(f"draw: configuration {text!r}: pp is the number of pipeline stages (pp=2), "
                                 f"got 'pp={'+'.join(map(str, config.split))}'")
        a.tp, a.pcp, a.dcp, a.interleave, a.pp = config.tp, config.pcp, config.dcp, config.interleave, config.pp
        a.local_heads = None
        if config.pcp_replicas:
            a.size = list(a.size) + [("pcp_replicas", config.pcp_replicas)]
        try:
            groups.append(derived_at_options(a))
        except Inapplicable as e:
            print(f"{text}: {e}")
            return 1
    (cf, _, producers, big), (_, _, consumers, small) = groups
    model = ", ".join(x for x in config_line(cf, args).split(", ")
                      if x.split("=")[0] not in CONFIG_NAMES)
    title = f"direct reshard {args.store} -> {args.load}: {model}"
    a, b = producers[0].canonical_page_size_bytes, consumers[0].canonical_page_size_bytes
    if a == b:
        from ..tools.draw import canonical_names, owners
        plans = direct_plans(producers, consumers)
        lib, _ = families_in(args.spec, cf.name)
        names = canonical_names(lib, cf.name, small)  # each consumer byte's canonical index: what moves
        held = owners(consumers).local if names is not None else None
        print(draw_reshard(plans, len(producers), args.output, title, names=None if held is None else [
            [names[c] if c >= 0 else None for c in held[p.consumer]] for p in plans]))
        return 0
    from ..verify.conversions import conversion
    from ..plans.reshard import cross_plans
    lib, _ = families_in(args.spec, cf.name)
    big, small = (big, small) if a > b else (small, big)
    conv = conversion(lib, cf.name, big, small)
    cross = cross_plans(producers, consumers, conv)
    if cross.small == "consumer":  # each consumer page is a part of a producer's page
        plans = [p for part in cross.parts for p in part]
        labels = [f"consumer {p.consumer} ({j + 1}/{cross.k})" for j, part in enumerate(cross.parts) for p in part]
    else:  # each consumer page joins parts of the producers' pages (virtual producers part * world + rank)
        plans, labels = list(cross.parts[0]), None
    print(draw_reshard(plans, len(producers), args.output, f"{title}; pages of another cp: {conv.k} small pages "
                                                           f"of {min(a, b)} bytes are one of {max(a, b)}",
                       labels=labels, rank_of=lambda v: rank_and_part(v, cross.world)[0]))
    return 0


def draw_command(args) -> int:
    from ..tools.draw import need_matplotlib
    need_matplotlib()
    folder = Path(args.output).parent
    if not folder.is_dir():  # before any work: the picture could not be written
        raise LayoutalgError(f"draw: the folder {folder} of the picture {args.output} does not exist"
                             + (" (it is a file)" if folder.exists() else ""))
    if args.store or args.load:
        return _draw_reshard(args)
    from ..tools.draw import canonical_names, draw, owners_of_reading
    try:
        cf, inst, maps, sizes = derived_at_options(args)
        config = config_line(cf, args)
    except Inapplicable as e:
        print(e)
        if e.broken is None:
            return 1
        lib, family, sizes = e.broken  # the spec is wrong here: draw what it says, the conflicts marked
        config = ", ".join(f"{n}={v}" for n, v in sizes.items() if n in read_names(lib, family))
        try:
            print(draw(owners_of_reading(lib, family, sizes), args.output,
                       f"{family}: {config}. Does not tile: drawn from the spec's own reading",
                       names=canonical_names(lib, family, sizes)))
        except LayoutalgError as why:
            print(f"not drawn: {why}")
        return 1
    lib, _ = families_in(args.spec, cf.name)
    print(draw(maps, args.output, f"{cf.name}: {config}", names=canonical_names(lib, cf.name, sizes)))
    return 0
