"""The whole reshard matrix, in one process (the suite runs a slice: tests/test_reshard.py).

    python tests/reshard_matrix.py [--prove] [--all-sizes] [--only=FAMILY,...]

Every ordered pair of the configurations below that share a canonical page format, for
every family of one layout: the direct plan and the path through canonical pages give
the same consumer bytes, each the hash of its coordinate in the spec; with --prove, Z3
proves each pair's plan against the spec. Pairs of another cp (pages of two formats)
go through canonical pages converted between the formats (`pageformat`) and through
cross-cp direct plans (`reshard.cross_plans`, proved with --prove), each loaded byte
checked against the spec's own coordinates. For every pair of one format the runtime's
direct plan is also shown to be, byte for byte, the plan `prove --reshard` proves for all
sizes (`symplan.triples_at`, every region of a page); with --all-sizes, that proof is run for
each such pair (families in UNDECIDED counted apart), and for each pair of another cp at
every size, by residue cases (no `reshard-domain` row may be left). Last line:
`N passed, M failed`; exits 1 on any failure.
"""
from __future__ import annotations

import itertools
import sys
import time

import torch

from layoutalg.copy.executor import plan
from layoutalg.tools.distributed import global_coordinates, hashed, layout_of_pages
from layoutalg.errors import ConfigError, LayoutalgError
from layoutalg.verify.oracle import spec_coordinates
from layoutalg.copy.direct import convert
from layoutalg.verify.conversions import conversion
from layoutalg.dsl.library import load_default
from layoutalg.copy.views import layer_segments
from layoutalg.params import parse_config
from layoutalg.verify.prove.reshard.all_sizes import prove_all_sizes
from layoutalg.verify.prove.reshard.symplan import triples_at
from layoutalg.verify.prove.reshard import prove_plans
from layoutalg.verify.prove.runner import Budgets
from layoutalg.plans.reshard import ReshardError, direct_plans

import test_reshard as t
from test_replan import _runtime_triples as runtime_triples

CONFIGS = ["tp=1", "tp=2", "tp=4", "tp=8", "tp=16", "tp=8,dcp=2", "tp=16,dcp=2", "tp=8,dcp=2,interleave=2",
           "tp=16,dcp=2,interleave=2", "tp=1,pcp=2", "tp=2,pcp=2", "tp=4,pcp=2", "tp=2,pcp=2,pcp_replicas=1",
           "tp=4,pcp=2,pcp_replicas=1", "tp=2,dcp=2", "tp=4,dcp=2,interleave=2"]
FAMILIES = [("split_nhd", 4), ("split_hnd", 4), ("packed_nhd", 4), ("packed_hnd", 2), ("mla", 1),
            ("flash_nhd", 4), ("flash_hnd", 4)]
QUANTISED = [("quant_split", 4), ("quant_packed", 2)]
"""Pages of regions (int8 KV with its scales): converted across another cp region by region."""
UNDECIDED: dict = {}  # family -> why; none since the two readings' quotients of one size meet (`Z3Ops.shared`)
"""Families whose all-sizes proof is known to end unknown: --all-sizes counts them apart."""


def converted(family: str, heads: int, a: str, b: str, direct: bool = False) -> bool:
    """Store under `a`, convert the pages to `b`'s format, load under `b`: every byte in place.
    With `direct`, no canonical page: the cross-cp direct plans, rank to rank."""
    lib = load_default()

    def group(c, blocks):
        return t._group(family, heads, c, blocks)
    x, y = group(a, 2), group(b, 2)
    big, small = (x, y) if x.mappings[0].canonical_page_size_bytes > y.mappings[0].canonical_page_size_bytes else (y, x)
    conv = conversion(lib, family, big.sizes, small.sizes)
    x_big, G = big is x, 2
    x = group(a, G * (1 if x_big else conv.k))
    y = group(b, G * (conv.k if x_big else 1))
    coords = (conv.k, spec_coordinates(lib, family, big.sizes, small.sizes, conv.k, conv.token))
    pages_x, blocks_x = layout_of_pages(x, x.blocks)
    store = torch.zeros(x.blocks, x.mappings[0].canonical_page_size_bytes, dtype=torch.uint8)
    kvs = []
    for rank, m in enumerate(x.mappings):
        kv = x.empty().zero_()
        where, canon = global_coordinates(x, rank, pages_x, None if x_big else coords)
        h = hashed(0, where, canon)
        for seg in layer_segments(kv, m):  # each stretch of the page where the tensor holds it
            seg.bytes.index_copy_(0, blocks_x, h[:, seg.start:seg.start + seg.bytes.shape[1]].contiguous())
        plan(m, kv).store(kv, blocks_x, store, pages_x)
        kvs.append(kv)
    pages_y, blocks_y = layout_of_pages(y, y.blocks)
    if direct:
        return _direct(x, y, conv, G, kvs, blocks_x, pages_y, blocks_y, coords if x_big else None)
    load = torch.zeros(y.blocks, y.mappings[0].canonical_page_size_bytes, dtype=torch.uint8)
    if x_big:
        convert(conv, store, load, to_small=True)
    else:
        convert(conv, load, store, to_small=False)
    for rank, m in enumerate(y.mappings):
        kv = y.empty().zero_()
        plan(m, kv).load(load, pages_y, kv, blocks_y)
        raw = t._bytes(kv, m)
        where, canon = global_coordinates(y, rank, pages_y, coords if x_big else None)
        if not _same(raw.index_select(0, blocks_y), hashed(0, where, canon), canon):
            return False
    return True


def cross_proved(family: str, x, y) -> bool:
    from layoutalg.verify.prove.reshard import prove_cross_plans
    from layoutalg.plans.reshard import cross_plans
    lib = load_default()
    big, small = (x, y) if x.mappings[0].canonical_page_size_bytes > y.mappings[0].canonical_page_size_bytes else (y, x)
    conv = conversion(lib, family, big.sizes, small.sizes)
    cross = cross_plans(x.mappings, y.mappings, conv)
    rows = prove_cross_plans(lib, family, x.sizes, y.sizes, cross, conv.token, Budgets.of().config)
    return all(r.status == "proved" for r in rows)


def cross_is_the_proved_plan(family: str, x, y) -> bool:
    """The runtime's cross-cp plans (composed from fragments) are, byte for byte, the plans
    `prove --reshard` proves for all sizes (virtual consumer part * world + s is consumer s's
    plan for that part), of the residue case these sizes lie in."""
    from layoutalg.plans.reshard import cross_plans
    lib = load_default()
    big, small = (x, y) if x.mappings[0].canonical_page_size_bytes > y.mappings[0].canonical_page_size_bytes else (y, x)
    cross = cross_plans(x.mappings, y.mappings, conversion(lib, family, big.sizes, small.sizes))
    return triples_at(lib, family, x.sizes, y.sizes) == [runtime_triples(p) for part in cross.parts for p in part]


def _same(have, want, canon) -> bool:
    """The bytes agree wherever the page holds data (-1: a pad byte, never copied)."""
    data = canon >= 0
    return bool(data.any()) and torch.equal(have[..., data] if data.dim() == 1 else have[data],
                                            want[..., data] if data.dim() == 1 else want[data])


def _direct(x, y, conv, G, kvs, blocks_x, pages_y, blocks_y, small) -> bool:
    from layoutalg.plans.reshard import cross_plans
    from layoutalg.copy.direct import gather, scatter
    cross = cross_plans(x.mappings, y.mappings, conv)
    out = [y.empty().zero_() for _ in y.mappings]
    for p, v, rank, src, dst in cross.transfers(G):
        scatter(p, v, gather(p, v, kvs[rank], blocks_x[src]), out[p.consumer], blocks_y[dst])
    for rank, m in enumerate(y.mappings):
        raw = t._bytes(out[rank], m)
        where, canon = global_coordinates(y, rank, pages_y, small)
        if not _same(raw.index_select(0, blocks_y), hashed(0, where, canon), canon):
            return False
    return True


def main(prove: bool, all_sizes: bool = False, only: set | None = None) -> int:
    passed = failed = refused = unserved = undecided = 0
    t0 = time.perf_counter()
    for family, heads in FAMILIES + QUANTISED:
        if only and family not in only:
            continue
        if passed or failed:  # a long run (--all-sizes) shows where it is, line by line
            print(f"... {passed} passed, {failed} failed so far, {time.perf_counter() - t0:.0f} s", flush=True)
        groups = {}
        for c in CONFIGS:
            try:
                groups[c] = t._group(family, heads, c)
            except ConfigError:
                unserved += 1
        for a, b in itertools.permutations(groups, 2):
            x, y = groups[a], groups[b]
            try:
                plans = direct_plans(x.mappings, y.mappings)
            except ReshardError:
                try:
                    ok = converted(family, heads, a, b) and converted(family, heads, a, b, direct=True) \
                        and (not prove or cross_proved(family, x, y))
                    if ok and all_sizes and family not in UNDECIDED:  # across the cp: every size, by residue cases
                        rows = prove_all_sizes(load_default(), family, parse_config(a), parse_config(b),
                                               Budgets.of().full)
                        ok = all(r.status == "proved" for r in rows) and cross_is_the_proved_plan(family, x, y)
                        if not ok:
                            print(f"  {[(r.obligation, r.status, r.detail) for r in rows if r.status != 'proved']}",
                                  flush=True)
                except LayoutalgError as e:
                    refused += 1
                    print(f"refused {family} {a} -> {b}: {e}", flush=True)
                    continue
                passed, failed = passed + ok, failed + (not ok)
                if not ok:
                    print(f"FAILED {family} {a} -> {b} (converted)", flush=True)
                continue
            try:
                t.test_direct_plan_equals_the_path_through_canonical_pages(family, heads, a, b)
                _is_the_proved_plan(family, x, y, plans)
                if all_sizes and family in UNDECIDED:
                    undecided += 1
                elif all_sizes:
                    rows = prove_all_sizes(load_default(), family, parse_config(a), parse_config(b), Budgets.of().full)
                    assert all(r.status == "proved" for r in rows), [(r.obligation, r.status, r.detail) for r in rows]
                if prove:
                    rows = prove_plans(load_default(), family, x.sizes, y.sizes, plans, Budgets.of().config)
                    assert all(r.status == "proved" for r in rows), rows
                passed += 1
            except AssertionError as e:
                failed += 1
                print(f"FAILED {family} {a} -> {b}: {e}", flush=True)
    print(f"{unserved} (family, configuration) not served, {refused} pairs refused, "
          + (f"{undecided} pairs not proved for all sizes ({'; '.join(f'{f}: {w}' for f, w in UNDECIDED.items())}), "
             if undecided else "") + f"{time.perf_counter() - t0:.1f} s")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


def _is_the_proved_plan(family: str, x, y, plans) -> None:
    """The runtime's plan at these sizes is the instance of the plan proved for all sizes
    (of every region of a page together)."""
    runtime = [runtime_triples(p) for p in plans]
    assert triples_at(load_default(), family, x.sizes, y.sizes) == runtime, "the runtime's plan is not the proved one"


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    named = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--only=")]  # --only=flash_nhd,flash_hnd
    sys.exit(main("--prove" in sys.argv, "--all-sizes" in sys.argv, set(",".join(named).split(",")) if named else None))
