"""The `layoutalg` command line."""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

from ..errors import LayoutalgError

_EPILOG = """\
examples:
  layoutalg check specs/                       parse, derive and check every shipped family
  layoutalg runs specs/split_nhd.lal --tp 4 --heads 8
  layoutalg runs specs/mla.lal --tp 2 --dcp 2 --interleave 2 --page-size 9216
  layoutalg explain specs/split_hnd.lal         the family's digits, strides as formulas
  layoutalg id specs/                           each family's canonical page format identifier
  layoutalg derive-corpus tests/data/vllm_reference.jsonl.gz > out.jsonl
  layoutalg prove specs/                        prove every family with Z3
"""


def _version() -> str:
    from importlib import metadata
    try:
        return metadata.version("layoutalg")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="layoutalg", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EPILOG,
        description="Describe sharded KV-cache page layouts in spec files (.lal), derive the byte "
                    "copy runs between each rank's page and the canonical page, and check or prove "
                    "that the ranks tile the canonical page exactly.")
    p.add_argument("--version", action="version", version=f"layoutalg {_version()}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    c = sub.add_parser("check", help="parse specs, derive runs and verify tiling by enumeration; "
                                     "print each family's runs for an example configuration")
    c.add_argument("specs", nargs="*", help="spec files or folders (default: the shipped specs)")

    r = sub.add_parser("runs", help="print every rank's copy runs for one configuration")
    r.add_argument("spec", help="spec file (or folder) holding the family")
    r.add_argument("--family", help="family name (default: the first one defined in SPEC)")
    _configuration_options(r)

    dr = sub.add_parser("draw", help="picture who writes which bytes: the canonical page coloured by the "
                                     "rank that writes each byte, and each rank's local page")
    dr.add_argument("spec", help="spec file (or folder) holding the family")
    dr.add_argument("--family", help="family name (default: the first one defined in SPEC)")
    dr.add_argument("-o", "--output", required=True, help="the picture: .svg or .png")
    dr.add_argument("--store", metavar="CONFIG", help="with --load: draw the direct reshard from this configuration "
                                                     "(e.g. tp=2): each consumer byte coloured by its producer")
    dr.add_argument("--load", metavar="CONFIG", help="with --store: the consumer configuration (e.g. tp=4)")
    _configuration_options(dr)

    e = sub.add_parser("explain", help="show a family's digit table with symbolic strides")
    e.add_argument("spec", help="spec file (or folder)")
    e.add_argument("--family", help="family name (default: every family defined in SPEC)")

    i = sub.add_parser("id", help="print each family's canonical page format identifier")
    i.add_argument("spec", help="spec file (or folder)")
    i.add_argument("--family", help="family name (default: every family defined in SPEC)")

    d = sub.add_parser("derive-corpus", help="derive the mappings of a conformance corpus (JSON lines)")
    d.add_argument("corpus", help="IN.jsonl or IN.jsonl.gz")
    d.add_argument("--specs", help="spec library folder (default: the shipped specs)")

    rs = sub.add_parser("reshard", help="store KV under one configuration and reload it under another, "
                                         "one process per rank (torch.distributed), checking every byte")
    rs.add_argument("--family", required=True, help="the family of the layer (e.g. split_nhd, split_hnd, mla)")
    rs.add_argument("--specs", metavar="DIR", help="the spec library folder holding the family (default: the shipped "
                                                   "specs)")
    rs.add_argument("--store", metavar="CONFIG",
                    help="the producer configuration, e.g. tp=2,dcp=1,pcp=1 (also interleave, pcp_replicas, "
                         "block_size where it differs from --block-size, and pp=N pipeline stages, each a group "
                         "of its own owning vLLM's share of the layers, or pp=3+5 for each stage's count)")
    rs.add_argument("--load", metavar="CONFIG", help="the consumer configuration, e.g. tp=4")
    rs.add_argument("--pages", metavar="DIR",
                    help="one side's job under torchrun (one process a rank, any nodes): --store writes the "
                         "canonical pages into files under DIR, a path every node shares; a later --load job "
                         "reads them and checks every byte")
    rs.add_argument("--heads", type=_positive, default=8, help="KV heads of the model (default 8)")
    rs.add_argument("--block-size", type=_positive, default=16, help="tokens per block (default 16)")
    rs.add_argument("--head-size", type=_positive, default=128, help="head size (default 128; MLA: 576)")
    rs.add_argument("--dtype", default="bf16", help="bf16, fp16, fp32, fp8 or int8 (default bf16)")
    rs.add_argument("--blocks", type=_positive, default=64, help="blocks per rank and layer (default 64)")
    rs.add_argument("--layers", type=_positive, default=4, help="layers (default 4)")
    rs.add_argument("--size", action="append", default=[], metavar="NAME=VALUE", type=_named_size,
                    help="a runtime name the family's spec declares, e.g. --size ssm_heads=8 for mamba2; repeatable")
    rs.add_argument("--direct", action="store_true",
                    help="both groups at once: consumers receive their bytes from producers by the direct plan, "
                         "proved by Z3 for this pair first")
    rs.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where each rank's KV cache lives (default cpu: gloo); cuda: rank r on GPU r %% count, "
                         "pages in shared host memory, NCCL where every rank has a GPU of its own")

    pr = sub.add_parser("prove", help="prove every family's obligations with Z3")
    pr.add_argument("specs", nargs="*", help="spec files or folders (default: the shipped specs)")
    pr.add_argument("--rlimit", type=_positive, default=None,
                    help="Z3 resource units per symbolic query before falling back to configurations "
                         "(default 120000000; deterministic: the same verdict on every machine)")
    pr.add_argument("--timeout", type=_positive_float, default=None,
                    help="seconds after which one query is abandoned whatever its budget (a last guard, "
                         "default 120; a verdict reached under it is reported but never cached)")
    pr.add_argument("--jobs", type=_positive, default=min(4, os.cpu_count() or 1),
                    help="families proved in parallel (default: up to 4, one per core)")
    pr.add_argument("--no-cache", action="store_true", help="ignore cached proofs")
    pr.add_argument("--reshard", nargs=2, metavar=("STORE", "LOAD"),
                    help="prove the direct reshard plan from configuration STORE to LOAD (as 'tp=2,dcp=1') for "
                         "all model sizes instead: every consumer byte written once, from a producer byte that "
                         "holds the same canonical byte; each side may give its block_size (one a whole multiple "
                         "k of the other: proved for every block size B against k * B)")
    pr.add_argument("--family", help="with --reshard: only this family")
    pr.add_argument("--pipeline", action="store_true",
                    help="prove that vLLM's split of a model's layers over pipeline stages gives each layer one "
                         "stage, for every layer and stage count (the writers of a model page across stages)")
    pr.add_argument("--draw", metavar="DIR", help="draw each refutation's counterexample configuration into DIR "
                                                  "(FAMILY-OBLIGATION.png: the spec's own reading, clashes and gaps "
                                                  "marked; needs matplotlib)")
    return p


def _configuration_options(r) -> None:
    r.add_argument("--tp", type=_positive, default=1, help="tensor-parallel ranks (default 1)")
    r.add_argument("--pcp", type=_positive, default=1, help="prefill context-parallel ranks (default 1)")
    r.add_argument("--dcp", type=_positive, default=1, help="decode context-parallel ranks (default 1)")
    r.add_argument("--interleave", type=_positive, default=1, help="CP token interleave (default 1)")
    r.add_argument("--heads", type=_positive, default=8, help="KV heads of the whole model (default 8)")
    r.add_argument("--local-heads", type=_positive, help="KV heads per rank (default max(1, heads // tp))")
    r.add_argument("--block-size", type=_positive, default=16, help="tokens per block (default 16)")
    r.add_argument("--head-size", type=_positive, default=128, help="elements per head (default 128)")
    r.add_argument("--dtype-bytes", type=_positive, default=2, help="bytes per element (default 2)")
    r.add_argument("--page-size", type=_positive, help="page bytes (default: what the local layout holds; "
                                                 "MLA: block_size * 1152)")
    r.add_argument("--size", action="append", default=[], metavar="NAME=VALUE", type=_named_size,
                   help="a runtime name a spec declares (`param`), e.g. --size pcp_replicas=1; repeatable")
    r.add_argument("--per-token-head-quant", type=int, choices=(0, 1), default=0,
                   help="1 when K/V carry per-token-head scales (default 0)")


def _whole(text: str) -> int:
    """A whole number as a configuration string spells it: ASCII digits, an optional sign
    (int() also takes '1_0' and full-width digits, which a config string refuses)."""
    if not re.fullmatch(r"[+-]?[0-9]+", text.strip()):
        raise ValueError(text)
    return int(text)


def _positive(text: str) -> int:
    try:
        n = _whole(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {n}")
    return n


def _named_size(text: str) -> tuple[str, int]:
    name, eq, value = text.partition("=")
    if not eq or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, _whole(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: expected a whole number, got {value!r}") from None


def _positive_float(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not x > 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive, finite number of seconds, got {text}")
    return x


class _QuietWhenClosed:
    """stdout that stops writing once the reader has gone (`layoutalg prove | head`).

    The command still runs to the end, so its exit status says what it found, not that
    the pipe closed: a refuted row exits 1 even when nobody read it.
    """

    def __init__(self, stream):
        self._stream, self.closed_by_reader, self.failed = stream, False, None

    def write(self, text):
        if not self.closed_by_reader:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self.closed_by_reader = True
            except OSError as e:  # a full disk, a file over its size limit: said once, at the end
                self.closed_by_reader, self.failed = True, e
        return len(text)

    def flush(self):
        if not self.closed_by_reader:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self.closed_by_reader = True
            except OSError as e:
                self.closed_by_reader, self.failed = True, e

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if sys.stdout is None:  # (started with its standard output closed)
        if sys.stderr is not None:
            print("error: there is no standard output to write to", file=sys.stderr)
        return 2
    # progress and errors go to stderr: one that cannot be written loses them, never the verdict
    real_err, sys.stderr = sys.stderr, _QuietWhenClosed(sys.stderr if sys.stderr is not None else open(os.devnull, "w"))
    real, sys.stdout = sys.stdout, _QuietWhenClosed(sys.stdout)
    rc = 2
    try:
        rc = {"check": _check, "runs": _runs, "explain": _explain, "derive-corpus": _corpus,
              "prove": _prove, "id": _id, "reshard": _reshard,
              "draw": _draw}[args.cmd](args)
    except LayoutalgError as e:
        print(f"error: {e}", file=sys.stderr)
    except RecursionError:  # a last net: the parser bounds nesting, but lets can compound it
        print("error: the spec's expressions nest too deeply to evaluate (substituted lets and fns)",
              file=sys.stderr)
    finally:
        sys.stdout.flush()  # (an output that cannot be written says so here, not at exit)
        closed, failed, sys.stdout = sys.stdout.closed_by_reader, sys.stdout.failed, real
        if failed is not None:
            print(f"error: cannot write the output: {failed.strerror or failed}; what was written of it is "
                  f"incomplete", file=sys.stderr)
            rc = 2
        sys.stderr.flush()
        err_closed, sys.stderr = sys.stderr.closed_by_reader, real_err
        if err_closed:  # (nor at exit)
            try:
                sys.stderr = open(os.devnull, "w")
            except OSError:
                pass
        if closed:  # keep Python from reporting the broken pipe (or the full disk) again at exit
            try:
                sys.stdout = open(os.devnull, "w")
            except OSError:
                pass
    return rc


def _sizes_once(command: str, given: list) -> dict:
    """`--size NAME=VALUE` options as a dict; a name given twice is an error, not last-wins."""
    names = dict(given)
    if len(names) != len(given):
        twice = next(n for n, _ in given if [m for m, _ in given].count(n) > 1)
        raise LayoutalgError(f"{command}: --size {twice} is given twice")
    return names


def _reshard(args) -> int:
    from ..tools.distributed import group_of, reshard
    names = _sizes_once("reshard", args.size)
    specs = args.specs
    if args.pages is not None:
        return _reshard_job(args, names)
    if args.store is None or args.load is None:
        raise LayoutalgError("reshard: give both --store and --load (or one of them with --pages, under torchrun)")
    (x, sx), (y, sy) = (_side(text, args.layers) for text in (args.store, args.load))
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
        if any(r.status != "proved" for r in rows):
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
    passed, failed = reshard(store, load, args.layers, args.direct, conversion=conversion, device=args.device,
                             stages=(sx, sy))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


def _reshard_job(args, names: dict) -> int:
    """One side of a reshard as a job of its own under torchrun, its pages in files (`node`)."""
    from ..tools.distributed import group_of
    from ..tools.node import load_job, store_job, under_torchrun
    if (args.store is None) == (args.load is None):
        raise LayoutalgError("reshard --pages: give one of --store and --load: a job is one side, its pages "
                             "stored for a later job (or loaded from an earlier one)")
    if args.direct:
        raise LayoutalgError("reshard --pages: --direct moves bytes between two groups at once; a job of one "
                             "side goes through its pages")
    if not under_torchrun():
        raise LayoutalgError("reshard --pages: run it under torchrun (RANK, WORLD_SIZE, MASTER_ADDR and "
                             "MASTER_PORT unset), e.g. torchrun --nproc-per-node 4 -m layoutalg reshard ...")
    config, stages = _side(args.store if args.store is not None else args.load, args.layers)
    block = config.pop("block_size", args.block_size)
    group = group_of(args.family, config, args.heads, block, args.head_size, args.dtype, args.blocks,
                     names=names, specs=args.specs)
    job = store_job if args.store is not None else load_job
    return job(group, stages, args.layers, args.pages)


def _side(text: str, layers: int) -> tuple[dict, tuple]:
    """A reshard side's configuration ('pp=2,tp=2,block_size=64') and its pipeline stages: `pp=N`
    splits the layers by vLLM's rule, `pp=3+5` gives each stage's layer count."""
    from ..tools.distributed import parse_config
    from ..params import stage_layers
    items = [t.strip() for t in text.split(",")]
    pp = [t for t in items if t.partition("=")[0] == "pp"]
    if len(pp) > 1:
        raise LayoutalgError(f"configuration {text!r}: pp is given twice")
    config = parse_config(",".join(t for t in items if t not in pp), also=("block_size",), shown=text)
    if not pp:
        return config, (range(layers),)
    counts = pp[0].partition("=")[2].split("+")
    if not all(c.isascii() and c.isdigit() and len(c) <= 18 for c in counts):
        raise LayoutalgError(f"configuration {text!r}: pp must be a number of stages (pp=2) or each stage's "
                             f"layer count (pp=3+5), got {pp[0]!r}")
    if len(counts) == 1:
        return config, stage_layers(layers, int(counts[0]))
    return config, stage_layers(layers, split=tuple(map(int, counts)))


def _families_in(spec: str, wanted: str | None):
    from ..dsl.library import load
    lib = load([spec])
    own = [f for f in lib.families if lib.families[f].span.file.endswith(spec.rstrip("/").split("/")[-1])]
    names = [wanted] if wanted else (own or list(lib.families))
    if not names:
        raise LayoutalgError(f"no family in {spec}")
    for n in names:
        if n not in lib.families:
            raise LayoutalgError(f"no family '{n}' in {spec}; families: {', '.join(lib.families)}")
    return lib, names


def _check(args) -> int:
    from .._resources import specs_dir
    from ..verify.check import check_family, sized_cases
    from ..compile.codegen import compile_named
    from ..ir.family import check_layouts
    from ..dsl.library import load
    args.specs = args.specs or [str(specs_dir())]
    lib = load(args.specs)
    check_layouts(lib)  # a broken layout is the finding, even in a file with no family
    if not lib.families:
        raise LayoutalgError(f"nothing to check: no family in {', '.join(args.specs)} ({len(lib.modules)} file(s), "
                             f"{len(lib.grids)} grid(s), {len(lib.layouts)} layout(s))")
    compiled = {name: compile_named(lib, name) for name in lib.families}
    layouts = [n for n in lib.layouts if "." not in n]  # a page's regions are not layouts of their own here
    print(f"{len(layouts)} layout(s), {len(lib.grids)} grid(s), {len(lib.families)} family(ies) "
          f"in {len(lib.modules)} file(s)\n")
    for fam, b in lib.unloaded:  # a misspelt preference would otherwise never apply, silently
        print(f"note: {b.span}: family '{fam}' is preferred before '{b.id}', which is not loaded with it: "
              f"no preference here\n")
    for name in lib.unused_rules:  # rules nothing uses check nothing: say so rather than pass them
        print(f"note: {lib.rules[name].span}: rules '{name}' are used by no grid loaded with them, so nothing "
              f"reads or checks their statements here\n")
    print(f"{'family':<12} {'certified':>9} {'fail-closed':>11} {'oracle':>6}  result")
    bad, examples = 0, {}
    for n, (name, cf) in enumerate(compiled.items(), 1):
        t = time.perf_counter()
        rep = check_family(lib, cf)
        status = "ok" if rep.ok else f"{len(rep.errors)} error(s)"
        note = f", {rep.witnesses} configuration(s) from Z3" if rep.witnesses else ""
        print(f"{name:<12} {rep.certified:>9} {rep.failed_closed:>11} {rep.oracle_checked:>6}  {status} "
              f"({time.perf_counter() - t:.2f} s{note})", flush=True)
        print(f"[{n}/{len(compiled)}] {name}: {status}", file=sys.stderr, flush=True)
        for err in rep.errors[:5]:
            print(f"    {err}")
        for line in sized_cases(lib, name) + rep.notes:
            print(f"    note: {line}")
        bad += not rep.ok
        examples[name] = rep.example
    bad += _recognition(lib, compiled)
    print("\ncertified: the family applies and its runs tile, on the sample configurations of the names it "
          "reads (params.TABLE and each `param`); fail-closed: its guards reject the configuration (the runtime "
          "would try the next family); oracle: also compared byte for byte with a direct reading of the spec")
    for name, example in examples.items():
        if example is None:
            continue
        sizes, maps = example
        read = {b.name for b in compiled[name].bounds} | {"tp", "pcp"}  # what the family reads, and the group
        shown = ", ".join(f"{k}={v}" for k, v in sizes.items() if k in read)
        print(f"\n{name}, example with {shown}: {len(maps)} ranks, runs as (local, canonical, fragment, count, "
              f"local stride, canonical stride)")
        for rank, m in enumerate(maps[:8]):
            print(f"  rank {rank} ({_writer_text(m)}): "
                  + " ".join(str(tuple(r)) for r in m.runs[:8]) + (" ..." if len(m.runs) > 8 else ""))
        if len(maps) > 8:
            print(f"  ... and {len(maps) - 8} more ranks (`layoutalg runs` prints them all)")
    return 1 if bad else 0


def _recognition(lib, compiled: dict) -> int:
    """Two families of one kind that take one tensor must read it alike (`recognition`): printed;
    1 where some pair does not."""
    from ..verify.check import sample_domain, spec_line
    from ..verify.prove.together import pairs
    from ..verify.recognition import confusions
    together = pairs(lib, compiled)
    found, tally = confusions(lib, compiled, sample_domain(lib), together=together)
    if not tally.pairs:
        print("\nrecognition: no two families serve one kind here: no tensor to tell apart")
        return 0
    compared = tally.pairs - tally.apart
    print(f"\nrecognition: {tally.pairs} pair(s) of families of one kind; {tally.apart} never take one layer at "
          f"any size (Z3: no size serves both, or with one tensor); the other {compared}: {tally.offered} layer(s) of "
          f"one offered to the other, at the samples and {tally.found} configuration(s) Z3 found where both apply, "
          f"{tally.taken} taken by both and read byte by byte"
          + ("" if tally.offered or not compared else
             " (nothing compared: no layer of one family was offered to another)"))
    for t in together.values():
        if t.status == "unknown":
            print(f"    families {t.first} and {t.second}: not shown apart for all sizes ({t.why}); compared at the "
                  f"samples only")
    for c in found:
        shapes = ", ".join(str(t.shape) for t in c.tensors)
        shown = ", ".join(f"{k}={v}" for k, v in c.sizes.items() if k in _read_by(compiled, c))
        print(f"    {spec_line(lib, c.first, 'family')}: families {c.first} and {c.second} both take a layer of "
              f"{c.blocks} block(s) with tensor {shapes}, at {shown}, and read it apart: {c.why}; a runtime name "
              f"must tell them apart (a guard one requires and the other refuses), or the first the runtime "
              f"tries reads the other's tensor in its own order")
    return 1 if found else 0


def _read_by(compiled: dict, c) -> set:
    return {b.name for n in (c.first, c.second) for b in (compiled[n].bounds or ())} | {"tp", "pcp"}


def _writer_text(m) -> str:
    """Who stores what: one election for the page, or one per region of a page replicated unevenly."""
    if not m.run_writers:
        return f"writer {m.writer_index} of {m.num_writers}"
    return "writers per run " + " ".join(f"{w}/{n}" for n, w in m.run_writers)


class _Inapplicable(LayoutalgError):
    """The family does not apply at the configuration asked for: said, exit 1. `broken` holds
    (library, family, sizes) where its guards hold but it does not tile (the spec is wrong there)."""

    def __init__(self, message: str, broken: tuple | None = None):
        super().__init__(message)
        self.broken = broken


def _runs(args) -> int:
    try:
        cf, inst, maps, _ = _derived(args)
    except _Inapplicable as e:
        print(e)
        return 1
    first = inst.regions[0][1] if hasattr(inst, "regions") else inst
    regions = f", regions {', '.join(r for r, _ in inst.regions)}" if hasattr(inst, "regions") else ""
    print(f"family {cf.name}: local page {inst.local_page} B, canonical page {inst.canonical_page} B{regions}, "
          f"{len(maps)} rank(s), {maps[0].num_writers if not maps[0].run_writers else 'per-run'} writer(s) "
          f"per block, agnostic={maps[0].parallelism_agnostic}")
    for rank, m in enumerate(maps):
        digits = []
        for (n, rs, _, _), name in zip(first.ranks, first.rank_names):
            digits.append(f"{name}={(rank // rs) % n}")
        print(f"\nrank {rank} ({', '.join(digits)}), {_writer_text(m)}, {len(m.runs)} run(s)")
        print(f"  {'local':>8} {'canonical':>10} {'fragment':>9} {'count':>6} {'l.stride':>9} {'c.stride':>9}")
        for r in m.runs:
            print(f"  {r.local_offset:>8} {r.canonical_offset:>10} {r.fragment_size:>9} {r.num_fragments:>6} "
                  f"{r.local_stride:>9} {r.canonical_stride:>9}")
    return 0


def _draw_reshard(args) -> int:
    import copy
    from ..tools.distributed import parse_config
    from ..tools.draw import draw_reshard
    from ..plans.reshard import direct_plans
    if not (args.store and args.load):
        raise LayoutalgError("draw: --store and --load go together (the producer and the consumer configuration)")
    groups = []
    for text in (args.store, args.load):
        config, a = parse_config(text), copy.copy(args)
        a.tp, a.pcp, a.dcp, a.interleave = config["tp"], config["pcp"], config["dcp"], config["interleave"]
        a.local_heads = None
        if config["pcp_replicas"]:
            a.size = list(a.size) + [("pcp_replicas", config["pcp_replicas"])]
        try:
            groups.append(_derived(a))
        except _Inapplicable as e:
            print(f"{text}: {e}")
            return 1
    (cf, _, producers, big), (_, _, consumers, small) = groups
    model = ", ".join(x for x in _config_line(cf, args).split(", ")
                      if x.split("=")[0] not in ("tp", "pcp", "dcp", "interleave", "pcp_replicas"))
    title = f"direct reshard {args.store} -> {args.load}: {model}"
    a, b = producers[0].canonical_page_size_bytes, consumers[0].canonical_page_size_bytes
    if a == b:
        print(draw_reshard(direct_plans(producers, consumers), len(producers), args.output, title))
        return 0
    from ..verify.conversions import conversion
    from ..plans.reshard import cross_plans
    lib, _ = _families_in(args.spec, cf.name)
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
                       labels=labels, rank_of=lambda v: v % cross.world))
    return 0


def _draw(args) -> int:
    from ..tools.draw import need_matplotlib
    need_matplotlib()
    folder = Path(args.output).parent
    if not folder.is_dir():  # before any work: the picture could not be written
        raise LayoutalgError(f"draw: the folder {folder} of the picture {args.output} does not exist"
                             + (" (it is a file)" if folder.exists() else ""))
    if args.store or args.load:
        return _draw_reshard(args)
    from ..tools.draw import draw, owners_of_reading
    try:
        cf, inst, maps, _ = _derived(args)
        config = _config_line(cf, args)
    except _Inapplicable as e:
        print(e)
        if e.broken is None:
            return 1
        lib, family, sizes = e.broken  # the spec is wrong here: draw what it says, the conflicts marked
        config = ", ".join(f"{n}={v}" for n, v in sizes.items() if n in _read_names(lib, family))
        try:
            print(draw(owners_of_reading(lib, family, sizes), args.output,
                       f"{family}: {config}. Does not tile: drawn from the spec's own reading"))
        except LayoutalgError as why:
            print(f"not drawn: {why}")
        return 1
    print(draw(maps, args.output, f"{cf.name}: {config}"))
    return 0


def _read_names(lib, family: str) -> set:
    from ..compile.codegen import compile_named
    return {b.name for b in compile_named(lib, family).bounds}


def _config_line(cf, args) -> str:
    """The configuration a picture shows, in the names its family reads (heads for attention,
    SSM heads for a Mamba state, ...)."""
    values = {"tp": args.tp, "pcp": args.pcp, "dcp": args.dcp, "interleave": args.interleave,
              "total_heads": args.heads, "block_size": args.block_size, "head_size": args.head_size,
              "dtype_bytes": args.dtype_bytes, **dict(args.size)}
    read = {b.name for b in cf.bounds}
    return ", ".join(f"{n}={v}" for n, v in values.items() if n in read or n == "tp")


def _derived(args):
    """(compiled family, instance, every rank's mapping) at the configuration the options give."""
    from ..compile.codegen import compile_named
    from ..compile.compiled import GuardFailed, misfit
    from ..runtime.lower import TilingError, lower
    from .. import params
    lib, names = _families_in(args.spec, args.family)
    if len(names) > 1:
        raise LayoutalgError(f"{args.spec} holds {len(names)} families; say which with --family: {', '.join(names)}")
    cf = compile_named(lib, names[0])
    sizes = {"tp": args.tp, "pcp": args.pcp, "dcp": args.dcp, "interleave": args.interleave,
             "total_heads": args.heads, "heads": args.local_heads or max(1, args.heads // args.tp),
             "block_size": args.block_size, "head_size": args.head_size, "dtype_bytes": args.dtype_bytes,
             "per_token_head_quant": args.per_token_head_quant, "compress_ratio": 1}
    declared = {n: p for n, p in lib.vocabulary().items() if n not in params.TABLE}
    for name, value in _sizes_once(args.cmd, args.size).items():
        if name in params.TABLE:
            raise LayoutalgError(f"--size {name}: a built-in name; set it with its own option (--help)")
        if name not in declared:
            raise LayoutalgError(f"--size {name}: not a name these specs declare; declared: "
                                 f"{', '.join(declared) or 'none'}")
        sizes[name] = value
    outside = cf.outside_domain(sizes)  # say it plainly before any guard or case speaks
    if outside:
        raise _Inapplicable(f"{cf.name} does not apply (the layer would fail closed): {outside}")
    page = args.page_size
    if page is None:
        page = args.block_size * 1152 if cf.serves == "mla" else 0
        if not page:
            try:
                probe = cf.evaluate({**sizes, "page_size": 0}, bounded=False)
                # a page padded to the runtime's page: by default, exactly its regions
                page = sum(i.local_page for _, i in probe.regions) if hasattr(probe, "regions") else probe.local_page
            except GuardFailed as e:  # the family's own reason, not the empty probe page's
                raise _Inapplicable(f"{cf.name} does not apply (the layer would fail closed): {e}")
    try:
        inst = cf.evaluate({**sizes, "page_size": page})
    except GuardFailed as e:
        raise _Inapplicable(f"{cf.name} does not apply (the layer would fail closed): {e}")
    why = misfit(inst, page, args.tp * args.pcp)
    if why:
        raise _Inapplicable(f"{cf.name} does not apply (the layer would fail closed): {why}")
    outside = params.in_domain({**sizes, "page_size": page})
    if outside:
        print(f"note: {outside}: `layoutalg prove` does not cover these runs")
    try:
        maps = lower(inst)
    except TilingError as e:
        raise _Inapplicable(f"{cf.name} does not apply (the layer would fail closed): {e}",
                            (lib, names[0], {**sizes, "page_size": page}))
    from ..record import replace
    from ..runtime.formats import format_id, names_data  # as the runtime names the page, so plans compare formats as it does
    sizes = {**sizes, "page_size": page}
    fmt = format_id(cf.layout_id, inst, names_data(inst), sizes)
    return cf, inst, [replace(m, format_id=fmt) for m in maps], sizes


def _explain(args) -> int:
    from ..ir.family import resolve, symbolic_copy_map
    lib, names = _families_in(args.spec, args.family)
    for name in [p for n in names for p in lib.parts_of(n)]:
        fam = resolve(lib, name)
        region = lib.family_def(name).shard.region
        part = f", region '{region}' of its pages" if region else ""
        print(f"family {name} (serves {fam.serves}{part}) from {os.path.relpath(fam.path)}")
        defined: set = set()
        for v in fam.variants:
            cases = " and ".join(c.text.removeprefix("case ") for c in v.cases) or "always"
            print(f"\n  when {cases}:")
            for g in v.guards:
                print(f"    {g.text}")
            rows = [("digit", "extent", "local stride", "canonical stride", "rank stride")] + [
                (d.name + (" (replica)" if d.replica else ""), str(d.extent), str(d.local), str(d.canonical),
                 str(d.rank)) for d in v.digits]
            C = symbolic_copy_map(fam, v)
            modes = [(str(n), str(c)) for n, c in C.modes()] if C is not None else []
            _define_placeholders(fam, [x for r in rows[1:] for x in r] + [x for m in modes for x in m], defined)
            widths = [max(len(r[k]) for r in rows) for k in range(5)]  # aligned however long a formula is
            for r in rows:
                print("    " + "  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip())
            if modes:
                print("    copy map, local order (extent : canonical stride):")
                width = max(len(n) for n, _ in modes)
                for n, c in modes:
                    print(f"      {n.ljust(width)} : {c}")
        print()
    return 0


def _define_placeholders(fam, texts: list, defined: set) -> None:
    """Print `where _q7 = tp / shards` for each division placeholder the texts use, the first
    time it appears (a placeholder stands for a division the algebra keeps whole)."""
    used = [a for a in fam.atoms.by_symbol.values() if str(a.symbol) not in defined
            and any(str(a.symbol) in t for t in texts)]
    for a in used:
        defined.add(str(a.symbol))
    if used:
        print("    where " + ", ".join(f"{a.symbol} = {a.text}" for a in used))


def _corpus(args) -> int:
    from ..runtime.corpus import CorpusError, derive_corpus
    if not derive_corpus(args.corpus, sys.stdout, args.specs):  # nothing derived is no corpus, not a success
        raise CorpusError(f"derive-corpus: {args.corpus} holds no layer lines (one JSON object a line)")
    return 0


def _id(args) -> int:
    from ..compile.codegen import compile_named
    lib, names = _families_in(args.spec, args.family)
    for name in names:
        print(f"{compile_named(lib, name).layout_id}  {name}")
    return 0


def _prove(args) -> int:
    from .prove import prove_command
    return prove_command(args)

