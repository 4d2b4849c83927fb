"""What an obligation is: one `Obligation` record a name, all in one list (`ENTRIES`).

The prover's other tables are views of it: `store.OBLIGATIONS` and `RESHARD_OBLIGATIONS`
(the meanings), `store.RESHARD` and `obligations.SYMBOLIC`, `PER_CONFIGURATION`, `PAGE`
(which rows a mode asks, in this order), `certificates.SMT_ROWS`, `NO_SMT`, `DIVIDED`,
`SHARD_POINTS`, `LAYOUT_POINTS` (what a certificate of the row is made of) and
`runner.LEMMAS`. Two tables hold code and stay beside it, keyed by name and checked against
this list when their module loads (`check_table`): `obligations.QUERIES` (the rows whose
query is `"model"`) and `explain.EXPLAIN` (every row with a Z3 query). Imports no Z3: the
meanings are printed on a cached table's path, where nothing is proved.

    >>> obligation("writers-cover").mode, obligation("writers-cover").query
    ('symbolic', 'model')
    >>> obligation("no-such-row")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    layoutalg.verify.prove.registry.UnknownObligation: 'no-such-row' is no obligation of the prover (known: structure, page-size, ...)
"""
from __future__ import annotations

from dataclasses import dataclass

LIBRARY_MODES = ("structure", "page-size", "symbolic", "sequence", "one-format", "per-configuration", "page")
RESHARD_MODES = ("reshard", "reshard-domain")
MODES = (*LIBRARY_MODES, *RESHARD_MODES, "pipeline")
"""Which step asks a row. `structure` (sympy's stride chains), `page-size` (witnesses),
`symbolic` (every family, Z3 for all sizes first: `obligations.SYMBOLIC`), `sequence` (a
family that says `sequence`), `one-format` (pages another configuration reads),
`per-configuration` (the lowered runs: `obligations.PER_CONFIGURATION`), `page` (a family of
pages: `obligations.PAGE`), `reshard` (`prove --reshard`: `store.RESHARD`) and
`reshard-domain` (a reshard row never proved); `pipeline` (`prove --pipeline`). A library
proof's rows are those of `LIBRARY_MODES`."""

QUERY_KINDS = ("model", "digits", "meaning", "runs")
"""How Z3 is asked a row (`Obligation.query`): `model`, a violation on a `Model`
(`obligations.QUERIES`); `digits`, the family IR's digit table against the spec
(`obligations._digits_query`, which needs the IR); `meaning`, the engine's elements
(`meaning.query`); `runs`, the lowered runs at one configuration (`obligations.runs_query`).
None: no Z3 violation of its own on a `Model` (`structure`: sympy; `page-size`: witnesses; the
reshard rows: `reshard/`; `stages-tile`: `pipeline`)."""

POINTS_AT = ("shard", "local", "canonical", "local layout", "canonical layout")
"""The spec lines a counterexample may name (`Obligation.points_at`, read by `explain.where_in_spec`)."""


@dataclass(frozen=True)
class Obligation:
    """One row of the prover's tables, and everything the prover says of it by its name.

    `smt`: a library row whose proof for all sizes is a Z3 query, so a certificate
    (`certificates.texts`; a reshard plan's and the pipeline's files are `certificate_files`' steps);
    `no_smt`: why a row proved for all sizes outside SMT has no SMT-LIB file (for
    `one-format`, a row with a query: why its agnostic claim, indexed as `one-format/claim`,
    has none); `divided`: its certificate ties every division to the others
    (`lemmas.divisions`); `shard_points`: (part, the witness names of the points where that
    part reads the shard map) pairs; `layout_points`: (the layout, the parts that show it one-to-one
    in its box, the witness names of its two indices), or None; `parts`: the rows whose
    queries are, word for word, the parts of this row's (None: a part of its own), so a part
    already proved on a case path is not asked again; `points_at`: the spec line a
    counterexample names: the shard map's (`shard`), the layout used as the `local` or
    `canonical` page, or that layout's own definition (`local layout`, `canonical layout`);
    `first_try`: False where its queries are of a kind Z3's clock-free first try seldom
    decides within its budget, so they go to the default tactic first (`z3ops.ask`); `blast`:
    False where the default tactic's bit-blasting stage only slows its queries, so it is
    skipped (`z3ops._unblasted`). `how` in `Model.solve` is the obligation, for these two.
    """

    name: str
    meaning: str
    mode: str
    query: str | None = None
    smt: bool = False
    no_smt: str = ""
    divided: bool = False
    shard_points: tuple = ()
    layout_points: tuple | None = None
    parts: tuple = ()
    points_at: str = "shard"
    first_try: bool = True
    blast: bool = True

    def __post_init__(self):
        if self.mode not in MODES or (self.query is not None and self.query not in QUERY_KINDS):
            raise ValueError(f"obligation {self.name}: mode {self.mode!r} or query {self.query!r} is not one of "
                             f"{MODES} and {QUERY_KINDS}")
        if self.points_at not in POINTS_AT:
            raise ValueError(f"obligation {self.name}: points_at {self.points_at!r} is not one of {POINTS_AT}")


ENTRIES = (
    Obligation("structure", "the local, rank and canonical stride chains of the digit table hold for all sizes (sympy)",
               "structure",
               no_smt="the stride chains are equalities of sympy expressions under the guards' rewrites; the Z3 rows "
                      "local-bijective, canonical-bijective and writers-* state the same facts and have certificates"),
    Obligation("page-size", "the family applies only where its local layout is exactly the runtime's page, and applies "
                            "somewhere (a witness configuration)", "page-size", smt=True, points_at="local"),
    Obligation("local-bijective", "the local layout maps its index box one-to-one onto [0, page)", "symbolic", "model",
               smt=True, layout_points=("local", (0, 1), "i", "j"), points_at="local layout"),
    Obligation("canonical-bijective", "the canonical layout maps its index box one-to-one onto [0, page)", "symbolic",
               "model", smt=True, layout_points=("canonical", (0, 1), "i", "j"), points_at="canonical layout"),
    Obligation("shard-in-range", "every rank sends every local index into the canonical box", "symbolic", "model",
               smt=True, shard_points=((0, (("i", "d"),)),)),
    Obligation("shard-injective", "no rank sends two local indices to one canonical index", "symbolic", "model",
               smt=True, shard_points=((0, (("i", "d"), ("j", "d"))),)),
    Obligation("writers-disjoint", "two ranks that store the same block never write the same canonical byte",
               "symbolic", "model", smt=True, shard_points=((0, (("i", "d"), ("j", "e"))),)),
    Obligation("writers-cover", "every canonical byte has a writer in each block: surjectivity by pigeonhole (as many "
                                "writer bytes as canonical bytes, sent injectively into the page; the injectivity and "
                                "range parts are the rows above, asked again where they were not proved for all sizes)",
               "symbolic", "model", smt=True,
               shard_points=((1, (("i", "d"), ("j", "e"))), (2, (("i", "d"), ("j", "d"))), (3, (("i", "d"),))),
               layout_points=("canonical", (4,), "k", "l"),
               parts=(None, "writers-disjoint", "shard-injective", "shard-in-range", "canonical-bijective"),
               points_at="canonical"),
    Obligation("single-rank-identity", "on a single rank the canonical page is the local page, byte for byte",
               "symbolic", "model", smt=True),
    Obligation("sequence-order", "where a family says `sequence t`, t is a bijection between a page's tokens and the "
                                 "places in the sequence it covers: every local token t lands at canonical t = "
                                 "token(t), its place by the grid; local t runs over the block's block_size tokens, "
                                 "canonical t over block_size * cp; token(t) sends no two tokens of a rank to one place "
                                 "(pages of another cp or block size join along t)", "sequence", "model", smt=True),
    Obligation("one-format", "a page read under another configuration than its writer's (another tp, pcp, dcp or "
                             "interleave; pages of another cp joined along `sequence`): each canonical byte holds, at "
                             "every configuration, the engine element it holds on a single rank holding the whole page "
                             "(elements named by the grid's placements, never by the shard map's arithmetic); and where "
                             "a grid says `agnostic when ...`, the canonical page (and each canonical pad) is built from "
                             "no size that moves with the parallel configuration (tp, pcp, dcp, interleave, heads, rank "
                             "digits), each canonical index that depends on the rank placed by a fn of the grid "
                             "(`head(h)`: the grid's word on the engine), one in every case that claims it",
               "one-format", "meaning", smt=True, divided=True,
               no_smt="the agnostic claim (the canonical layout, or a canonical pad, reads no size that moves with the "
                      "configuration) is a syntactic check of its sympy terms"),
    Obligation("digits-match-spec", "the digit table the runtime executes computes the spec's byte offsets", "symbolic",
               "digits", smt=True, divided=True, first_try=False, blast=False),
    Obligation("runs-match-spec", "the emitted runs send each local byte where the spec says", "per-configuration",
               "runs"),
    Obligation("runs-cover-local", "each rank's runs cover its local page exactly once", "per-configuration", "runs"),
    Obligation("regions-tile-local", "a page of regions: no two regions or pads of the local page share a byte, and "
                                     "each pad is one-to-one inside the page (with each region's own rows, and the page "
                                     "as large as its regions together: they tile it exactly)", "page", "model",
               smt=True, no_smt="the concatenation argument (each region one-to-one inside the page, the pads disjoint "
                                "from it, the page exactly their sum) is checked in sympy on the regions' digit tables, "
                                "whose own rows have certificates"),
    Obligation("regions-tile-canonical", "the same for the canonical page", "page", "model", smt=True,
               no_smt="as regions-tile-local, on the canonical page"),
    Obligation("reshard-cover", "each consumer rank's direct plan writes every byte of its local page exactly once, "
                                "from a byte inside one of the producers' pages", "reshard"),
    Obligation("reshard-match", "each byte the plan writes holds the canonical byte (across another cp: the canonical "
                                "index, the small page's token shifted by its part) that the producer byte it reads "
                                "holds", "reshard"),
    Obligation("reshard-domain", "across another cp, the sizes where a plan's pieces do not divide: never proved",
               "reshard-domain"),
    Obligation("stages-tile", "vLLM's split of a model's layers over pipeline stages gives every stage a layer, the "
                              "first starting at layer 0 and the last ending at the last layer, for every "
                              "1 <= pp <= layers (the writers of a model page across stages)", "pipeline"),
)
"""Every obligation, once: a library proof's rows in the order `prove` prints their meanings,
then `prove --reshard`'s and `prove --pipeline`'s. A new obligation is a new entry here (and, where Z3 asks it, its
query and its counterexample in words beside their code: `check_table` names what is missing)."""


class UnknownObligation(KeyError):
    """A name no entry of `ENTRIES` has (a `KeyError`, so a `LookupError`)."""

    def __str__(self) -> str:
        return self.args[0]


REGISTRY = {o.name: o for o in ENTRIES}
"""Obligation name -> its record."""
if len(REGISTRY) != len(ENTRIES):
    raise ValueError(f"obligation names are not unique: {sorted(o.name for o in ENTRIES)}")


def obligation(name: str) -> Obligation:
    """The record of obligation `name`; `UnknownObligation` (with the known names) for any other."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        known = ", ".join(REGISTRY)
        raise UnknownObligation(f"{name!r} is no obligation of the prover (known: {known})") from None


def in_mode(*modes: str) -> tuple[str, ...]:
    """The names of the rows asked in `modes`, in the registry's order."""
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"{mode!r} is not one of {MODES}")
    return tuple(o.name for o in ENTRIES if o.mode in modes)


def check_table(what: str, table, names) -> None:
    """Raise unless `table` (a module's table keyed by obligation name) has exactly `names`: a
    row added to the registry without its code, or code left for a row that is gone."""
    missing, extra = [n for n in names if n not in table], [n for n in table if n not in names]
    if missing or extra:
        raise ValueError(f"{what} disagrees with the obligation registry: missing {missing}, not registered {extra}")
