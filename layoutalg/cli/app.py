"""The `layoutalg` command line."""
from __future__ import annotations

import argparse
import os
import re
import sys

from ..errors import LayoutalgError
from .check import check_command
from .derive import corpus_command, explain_command, id_command, runs_command
from .draw import draw_command
from .reshard import reshard_command, add_store_arguments
from .conform import conform_command
from .specs import specs_command, spec_path

_EPILOG = """\
examples (a SPEC that is not here is the shipped library's: `layoutalg specs` lists it):
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
    c.add_argument("specs", nargs="*", type=spec_path, help="spec files or folders (default: the shipped specs)")

    r = sub.add_parser("runs", help="print every rank's copy runs for one configuration")
    r.add_argument("spec", type=spec_path, help="spec file (or folder) holding the family")
    r.add_argument("--family", help="family name (default: the first one defined in SPEC)")
    _configuration_options(r)

    dr = sub.add_parser("draw", help="picture who writes which bytes: the canonical page coloured by the "
                                     "rank that writes each byte, and each rank's local page")
    dr.add_argument("spec", type=spec_path, help="spec file (or folder) holding the family")
    dr.add_argument("--family", help="family name (default: the first one defined in SPEC)")
    dr.add_argument("-o", "--output", required=True, help="the picture: .svg or .png")
    dr.add_argument("--store", metavar="CONFIG", help="with --load: draw the direct reshard from this configuration "
                                                     "(e.g. tp=2): each consumer byte coloured by its producer")
    dr.add_argument("--load", metavar="CONFIG", help="with --store: the consumer configuration (e.g. tp=4)")
    _configuration_options(dr)

    e = sub.add_parser("explain", help="show a family's digit table with symbolic strides")
    e.add_argument("spec", type=spec_path, help="spec file (or folder)")
    e.add_argument("--family", help="family name (default: every family defined in SPEC)")

    i = sub.add_parser("id", help="print each family's canonical page format identifier")
    i.add_argument("spec", type=spec_path, help="spec file (or folder)")
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
    add_store_arguments(rs)
    rs.add_argument("--heads", type=_positive, default=8, help="KV heads of the model (default 8)")
    rs.add_argument("--block-size", type=_positive, default=16, help="tokens per block (default 16)")
    rs.add_argument("--head-size", type=_positive, help="head size (default 128; MLA: 576)")
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

    co = sub.add_parser("conform", help="check a family's spec against the engine's own writer, rank by rank: "
                                        "every byte where the writer put it")
    co.add_argument("--family", required=True, help="the family of the layer (e.g. split_nhd, mla, mamba2)")
    co.add_argument("--config", action="append", required=True, metavar="CONFIG",
                    help="a parallel configuration, e.g. tp=2,dcp=2; repeatable")
    co.add_argument("--specs", metavar="DIR", help="the spec library folder holding the family (default: the shipped "
                                                   "specs)")
    co.add_argument("--writer", metavar="MODULE:FUNCTION",
                    help="a function giving the writer, or 'vllm' for vLLM's own cache writers on the CPU "
                         "(default: the engine model of vLLM's writer for a shipped family, "
                         "layoutalg.tools.engine_models)")
    co.add_argument("--heads", type=_positive, default=4, help="KV heads of the model (default 4)")
    co.add_argument("--block-size", type=_positive, default=4, help="tokens per block (default 4)")
    co.add_argument("--head-size", type=_positive, help="head size (default 128; MLA: 576)")
    co.add_argument("--dtype", default="fp32", help="the elements the writer tags (default fp32: 4-byte tags)")
    co.add_argument("--size", action="append", default=[], metavar="NAME=VALUE", type=_named_size,
                    help="a runtime name the family's spec declares, e.g. --size ssm_heads=8 for mamba2; repeatable")

    sp = sub.add_parser("specs", help="print where the shipped spec library is, and its files (what a spec's "
                                      "import finds when its own folder has no such file)")
    sp.add_argument("--where", action="store_true", help="only the folder")

    pr = sub.add_parser("prove", help="prove every family's obligations with Z3")
    pr.add_argument("specs", nargs="*", type=spec_path, help="spec files or folders (default: the shipped specs)")
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
    pr.add_argument("--family", help="only this family (with no SPEC: one of the shipped library's)")
    pr.add_argument("--obligation", action="append", metavar="NAME",
                    help="only this obligation's row (repeatable), with page-size (the case paths every row reads) "
                         "and the rows it rests on; asked afresh, never cached")
    pr.add_argument("--pipeline", action="store_true",
                    help="prove that vLLM's split of a model's layers over pipeline stages gives each layer one "
                         "stage, for every layer and stage count (the writers of a model page across stages)")
    pr.add_argument("--draw", metavar="DIR", help="draw each refutation's counterexample configuration into DIR "
                                                  "(FAMILY-OBLIGATION.png: the spec's own reading, clashes and gaps "
                                                  "marked; needs matplotlib)")
    pr.add_argument("--certificates", metavar="DIR",
                    help="write every row proved for all sizes as SMT-LIB 2 files into DIR (a new folder: "
                         "FAMILY/OBLIGATION.caseK[.partJ].smt2, and index.tsv naming the rows that have none and "
                         "why), for `layoutalg certify DIR` to re-check with cvc5")

    ce = sub.add_parser("certify", help="re-check certificates (`prove --certificates DIR`) with cvc5")
    ce.add_argument("folder", help="the folder `prove --certificates` wrote")
    ce.add_argument("--timeout", type=_positive_float, default=20.0,
                    help="seconds for each cvc5 configuration on a file before it is killed (default 20)")
    ce.add_argument("--jobs", type=_positive, default=os.cpu_count() or 1,
                    help="files checked at once, each in its own process (default: one per core)")
    return p


def _configuration_options(r) -> None:
    r.add_argument("--tp", type=_positive, default=1, help="tensor-parallel ranks (default 1)")
    r.add_argument("--pcp", type=_positive, default=1, help="prefill context-parallel ranks (default 1)")
    r.add_argument("--dcp", type=_positive, default=1, help="decode context-parallel ranks (default 1)")
    r.add_argument("--interleave", type=_positive, default=1, help="CP token interleave (default 1)")
    r.add_argument("--pp", type=_positive, default=1, help="pipeline stages, for a family whose page holds a stage's "
                                                          "layers (a stage grid: specs/stages.lal; default 1)")
    r.add_argument("--heads", type=_positive, default=8, help="KV heads of the whole model (default 8)")
    r.add_argument("--local-heads", type=_positive, help="KV heads per rank (default max(1, heads // tp))")
    r.add_argument("--block-size", type=_positive, default=16, help="tokens per block (default 16)")
    r.add_argument("--head-size", type=_positive, help="elements per head (default 128; MLA: 576, its latent row)")
    r.add_argument("--dtype-bytes", type=_positive, default=2, help="bytes per element (default 2)")
    r.add_argument("--page-size", type=_positive, help="page bytes (default: what the local layout holds; "
                                                 "MLA: a latent row of head_size elements a token)")
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
        rc = {"check": check_command, "runs": runs_command, "explain": explain_command, "derive-corpus": corpus_command,
              "prove": _prove, "certify": _certify, "id": id_command, "reshard": reshard_command,
              "draw": draw_command, "conform": conform_command, "specs": specs_command}[args.cmd](args)
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


def _prove(args) -> int:
    from .prove import prove_command
    return prove_command(args)


def _certify(args) -> int:
    from ..verify.certify import certify
    return certify(args.folder, args.timeout, args.jobs)

