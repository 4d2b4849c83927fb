"""Verification by enumeration: what `layoutalg check` runs on small configurations.

Two independent checks per configuration:
- tiling: each rank's runs cover its local page exactly once, and for every block the
  elected writers' runs cover the canonical page exactly once (interval arithmetic on
  the runs, as the reference does at start-up);
- oracle: the runs agree byte for byte with a direct reading of the spec text
  (`interpret.byte_map`), which shares no code with the algebra.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import params
from ..compile.compiled import CompiledFamily, GuardFailed
from ..dsl.interpret import Reading, byte_map, index_box, misplaced_token, off_the_engine
from ..dsl.library import Library
from ..dsl.tree import World
from ..runtime.lower import TilingError, lower, pads, tiling_errors  # noqa: F401 - tiling_errors: re-exported
from .collision import CLAUSE, SEARCHES, spec_line, tiling_counterexample
from .samples import NeverServed, configurations, fitted_instance, sample_domain

def _variety(maps) -> tuple:
    """How much an example shows: distinct rank mappings, then ranks."""
    return len({m.runs for m in maps}), len(maps)


@dataclass
class FamilyReport:
    family: str
    certified: int = 0
    failed_closed: int = 0
    oracle_checked: int = 0
    errors: list = field(default_factory=list)
    example: tuple | None = None  # (sizes, mappings): the configuration whose ranks differ most
    witnesses: int = 0  # configurations found by Z3 from the family's guards (none of the samples applied)
    notes: list = field(default_factory=list)  # what was left unchecked, and why (not errors)
    warnings: list = field(default_factory=list)  # part of the declared domain the runtime never serves
    never_served: int = 0  # sample configurations where the guards hold but the grid is not the worker group

    @property
    def ok(self) -> bool:
        """Checked something and found nothing wrong: certified on no configuration is not a pass."""
        return not self.errors and self.certified > 0


def _single_rank_moves(maps) -> str:
    """On one rank the canonical page is the local page: '' when each byte stays put."""
    if len(maps) != 1:
        return ""
    for r in maps[0].runs:
        for lo, co, _ in r.triples():
            if lo != co:
                return f"on a single rank local byte {lo} goes to canonical byte {co}: the canonical page is " \
                       f"not the local page"
    return ""


def _agnostic_differs(seen: dict, sizes: dict, readings, where: str) -> str:
    """'' unless the canonical layout (every canonical index's byte, from the spec's direct reading)
    differs from the one of another configuration of the same model that also claims agnostic."""
    layout = []
    for r in readings:
        layout.append((r.page("canonical"), tuple(r.offset("canonical", index)
                                                  for index in index_box(r.extents("canonical")))))
    model = tuple(sorted((k, v) for k, v in sizes.items() if k not in params.MOVES_WITH_THE_GROUP + ("page_size",)))
    if model not in seen:
        seen[model] = (where, tuple(layout))
        return ""
    first, before = seen[model]
    if before == tuple(layout):
        return ""
    return (f"agnostic is claimed with {first} and with {where}, but the canonical layouts differ: a page "
            f"stored under one is not the page the other reads")


def _readings(lib: Library, family: str, sizes: dict):
    """The spec's direct reading of each part of `family` at `sizes`, or None where it fails (the
    oracle's comparison says so where it reads it)."""
    try:
        return [Reading(lib, part, sizes) for part in lib.parts_of(family)]
    except (ArithmeticError, LookupError):
        return None


class _Sequence:
    """Where `check` enumerates a family's `sequence` claim: under every (case path, parallel
    configuration) it certifies, at up to `SEQUENCE_PER_PATH` block sizes each, within
    `SEQUENCE_ELEMENTS` elements (a token's place is the rank's: the oracle's first
    configurations, all cp=1, would not show a claim false under cp > 1)."""

    def __init__(self):
        self.read: dict = {}     # (path, configuration) -> block sizes enumerated
        self.unread: set = set()  # (path, configuration) the budget left unread
        self.spent, self.failed = 0, False

    def visit(self, readings, sizes: dict, world: int, cost: int) -> str:
        """Why the claim fails at `sizes` (enumerated there if due; `readings`: the parts' direct
        reading there, None where it fails), or ''."""
        if self.failed or readings is None:
            return ""
        key = (tuple(tuple(r.taken) for r in readings), tuple(sizes.get(n) for n in params.CONFIG_NAMES))
        done = self.read.get(key, set())
        if sizes.get("block_size") in done or len(done) >= SEQUENCE_PER_PATH:
            return ""
        if self.spent + cost > SEQUENCE_ELEMENTS:
            self.unread.add(key)
            return ""
        self.spent += cost
        self.read.setdefault(key, set()).add(sizes.get("block_size"))
        why = _sequence_misplaced(readings, world)
        self.failed = bool(why)  # (one finding says it)
        return f"{why} (block_size={sizes['block_size']})" if why and "block_size" in sizes else why

    def note(self) -> str:
        left = self.unread - set(self.read)
        if not left or self.failed:
            return ""
        return (f"the `sequence` claim was enumerated under {len(self.read)} of {len(self.read) + len(left)} "
                f"(case path, parallel configuration) pairs, the rest past check's budget of {SEQUENCE_ELEMENTS} "
                f"elements: `layoutalg prove` shows it for all")


FORMAT_BYTES = 4096
"""Canonical pages check compares across cp (element by element, at up to `FORMAT_PAIRS` pairs)."""
FORMAT_PAIRS = 3


def _model(sizes: dict) -> tuple:
    """A configuration's model: its sizes but the parallel ones and those they derive."""
    skip = set(params.CONFIG_NAMES) | {"heads", "page_size"}
    return tuple(sorted((k, v) for k, v in sizes.items() if k not in skip))


def _formats_differ(lib: Library, family: str, formats: dict) -> str:
    """(why pages of one model under another cp do not hold the same engine elements at the same
    canonical index, or '', and how many pairs were compared) (`oracle.unkept_between`), at up to
    `FORMAT_PAIRS` pairs the samples give."""
    from .oracle import unkept_between
    pairs = [(by_cp[big], by_cp[small]) for by_cp in formats.values() for small in sorted(by_cp)
             for big in sorted(by_cp) if big > small and big % small == 0][:FORMAT_PAIRS]
    compared = 0
    for big, small in pairs:
        try:
            why = unkept_between(lib, family, big, small)
        except (ArithmeticError, LookupError, ValueError, GuardFailed, TilingError):
            continue  # one of the two is not read so: the other findings say why
        if why:
            return f"pages of another cp: {why}", compared
        compared += 1
    return "", compared


class _Placements:
    """Where `check` holds a family's grid placements (`head(h)`, `token(t)`) to vLLM's rank
    numbering (`interpret.off_the_engine`): once per (case path, parallel configuration)."""

    def __init__(self):
        self.seen: set = set()
        self.failed = False

    def visit(self, readings, sizes: dict, world: int) -> str:
        if self.failed or readings is None:
            return ""
        key = (tuple(tuple(r.taken) for r in readings), tuple(sizes.get(n) for n in params.CONFIG_NAMES),
               sizes.get("total_heads"), sizes.get("heads"), sizes.get("block_size"))
        if key in self.seen:
            return ""
        self.seen.add(key)
        for r in readings[:1]:  # (the parts of a page share the family's grid)
            for rank in range(world):
                try:
                    why = off_the_engine(r, rank)
                except (ArithmeticError, LookupError):
                    return ""
                if why:
                    self.failed = True
                    return (f"grid '{r.fdef.grid.id}' misstates vLLM's ranks: {why} (a grid's `ranks` order and "
                            f"placements are the engine's numbering)")
        return ""


def _sequence_misplaced(readings, world: int) -> str:
    """Why a part's `sequence` claim fails at these sizes (the first token out of place), or ''."""
    for r in readings:
        if r.fdef.sequence is None:
            continue
        try:
            for rank in range(world):
                why = misplaced_token(r, rank)
                if why:
                    return f"`sequence {r.fdef.sequence.id}` does not hold: {why}"
        except LookupError as e:  # no fn token to read the claim by: it says nothing that can be checked
            return f"`sequence {r.fdef.sequence.id}` cannot be checked: {e}"
    return ""


def _checkable(inst) -> str:
    """'' when the pages are small enough to enumerate byte by byte, else why not."""
    big = max(inst.local_page, inst.canonical_page)
    if big > params.CHECK_PAGE_LIMIT:
        return (f"a page of {big} bytes is beyond what check enumerates ({params.CHECK_PAGE_LIMIT} bytes) at "
                f"the sample sizes: an index extent is out of proportion (use `layoutalg prove`)")
    return ""


def _configs(lib: Library, cf: CompiledFamily, domain: dict, rep: FamilyReport):
    """The sample configurations, then (if none applied) Z3's models of the family's guards."""
    yield from configurations(domain)
    if rep.certified or rep.errors:
        return
    from ..dsl.interpret import paths
    from .prove.configurations import witnesses
    from .prove.runner import Budgets
    for path in paths(lib, cf.name):
        found, _ = witnesses(lib, cf.name, path, 4, Budgets.of().config)
        rep.witnesses += len(found)
        yield from found


FEW = 8
"""A family certified on fewer sample configurations than this is said to have been checked on few."""

ORACLE_ELEMENTS = 1 << 17
"""Most elements (over all ranks and configurations) one family's direct reading enumerates,
an interpreter of the spec text that reads each element: past it the oracle stops (its
column says how many configurations it read), and a family whose first configuration alone
is past it is an error, so `check` answers in seconds (the shipped families read at most
a few thousand elements a configuration)."""
SEQUENCE_PER_PATH = 3  # block sizes a (case path, parallel configuration)'s `sequence` claim is enumerated at
SEQUENCE_ELEMENTS = 4 * ORACLE_ELEMENTS


def _unplaced(lib: Library, cf) -> list[str]:
    """Where a case claims agnostic, each canonical index that depends on the rank must be a
    placement of the grid (`family.placed_by`): else one page format could hold an engine
    head in one slot at tp=2 and in another at tp=4, and no enumeration of one configuration
    would see it. The same rule as the prover's `one-format` row applies to a claim."""
    import sympy
    from ..ir.claims import cases_text, claims_differ, unplaced_target
    from ..ir.family import resolve
    out = []
    fams = [(part, resolve(lib, part)) for part in lib.parts_of(cf.name)]
    for part, fam in fams:
        for v in fam.variants:
            hit = unplaced_target(fam, v) if v.agnostic not in (False, sympy.false) else None
            if hit:
                out.append(f"{spec_line(lib, part, 'shard')}: agnostic is claimed (when {cases_text(v)}) but "
                           f"canonical index '{hit[0]}' could hold other engine elements in other configurations: "
                           f"{hit[1]}{hit[2]}")
                return out
    for part, fam in fams:  # each case backs its claim; two cases must also agree (which applies moves with tp)
        differ = claims_differ(fam)
        if differ:
            a, b, what = differ
            out.append(f"{spec_line(lib, part, 'shard')}: agnostic is claimed both when {cases_text(a)} and when "
                       f"{cases_text(b)}, but the {what} of those cases differ: which case applies moves with the "
                       f"configuration, so one page format would hold an element in two places")
            return out
    return out


def _never_served(lib: Library, cf, rep: FamilyReport, sizes: dict, why: str, served: int) -> None:
    """Configurations the guards admit but the runtime never serves (the grid is not the worker
    group of tp * pcp ranks): an error where no sample is served, else a warning naming the part.
    A check or a proof over such configurations is of bytes no engine holds."""
    read = {b.name for b in cf.bounds} | {"tp", "pcp"}
    shown = ", ".join(f"{k}={v}" for k, v in sizes.items() if k in read)
    world = lib.grids[lib.family_def(cf.name).grid.id]
    said = next((f"`{s.span.text.split('#')[0].strip()}`" for s in world.body if isinstance(s, World)),
                "its grid's world")
    what = (f"{rep.never_served} sample configuration(s) where the family's guards hold are never served: "
            f"{said} is not the worker group the runtime runs (tp * pcp ranks, times pp for a stage grid, one that reads pp), "
            f"e.g. with {shown}: {why}")
    line = spec_line(lib, cf.name, "rank")
    if served:
        rep.warnings.append(f"{line}: part of the declared domain is never served: {what}; checks and proofs "
                            f"there are of bytes no engine holds")
    else:
        rep.errors.append(f"{line}: the runtime never serves this family: {what}")


def sized_cases(lib: Library, name: str) -> list[str]:
    """Each case of a family (each part of a family of pages) whose pages are keyed by their
    sizes too (`runtime.formats.names_data`): its canonical indices are not shown to name the
    engine's elements, so its pages reload only under the configuration that stored them.
    Where the `agnostic` claim holds, the claim decides instead."""
    import sympy
    from ..ir.claims import unnamed
    from ..compile.codegen import unbacked
    from ..ir.family import resolve
    out = []
    for part in lib.parts_of(name):
        fam = resolve(lib, part)
        dropped = unbacked(fam)
        for v, why in zip(fam.variants, unnamed(fam)):
            if why or dropped:
                claimed = v.agnostic not in (False, sympy.false) and not dropped
                out.append(f"{spec_line(lib, part, 'shard')}: {part} {_when(v)} keys its pages by their "
                           f"sizes too{' (but where its agnostic claim holds)' if claimed else ''}: "
                           + ("its agnostic claim is dropped" if dropped else why))
    return out


def _when(v) -> str:
    from ..ir.claims import cases_text
    text = cases_text(v)
    return "in every case" if text == "always" else f"when {text}"


def _commonest(refusals: dict, samples: int, own: str) -> str:
    """The commonest reason samples failed closed, preferring one not about an imported file
    (the grid's guards refuse most samples by design: heads that do not fit the tp)."""
    if not refusals:
        return ""
    mine = {k: n for k, n in refusals.items() if k.startswith(own) or ".lal:" not in k.split(": ")[0]}
    # a reading that fails (a negative extent, a division never exact) says more than a guard
    # refusing a selector's other value (`require kv_blocks_second == 0`: another engine's layer)
    broken = {k: n for k, n in mine.items() if "does not hold" not in k}
    why = max(broken or mine or refusals, key=(broken or mine or refusals).get)
    return f" (the commonest refusal{' past the imported guards' if mine else ''}, {refusals[why]} of {samples} samples: {why})"


def check_family(lib: Library, cf: CompiledFamily, domain: dict | None = None,
                 oracle_limit: int = 40) -> FamilyReport:
    """Lower the family on each configuration and check tiling and the direct reading.

    Findings name the spec line they are about. A family certified on no configuration
    (none of the samples satisfies its guards and Z3 finds no other) is reported as an
    error: a check that checks nothing does not pass.
    """
    rep = FamilyReport(cf.name)
    lib.__dict__.setdefault("_oracle_compiled", {}).setdefault(cf.name, cf)  # the oracle's compile is this one
    read = {b.name for b in cf.bounds}  # the names a finding shows: the parallel ones and those the family reads
    agnostic: dict = {}  # the model's sizes -> (configuration, canonical layout) where agnostic is claimed
    refusal, spent, compared, told, unserved, fitted = "", 0, 0, 0, None, 0
    sequenced = _Sequence() if any(lib.family_def(p).sequence is not None for p in lib.parts_of(cf.name)) else None
    placements = _Placements()
    refusals: dict = {}  # why the samples failed closed, and how often: the commonest says what is wrong
    formats: dict = {}  # the model's sizes -> {cp: a configuration}: pages of another cp must mean the same
    for sizes in _configs(lib, cf, domain or sample_domain(lib, cf), rep):
        try:
            inst, sizes = fitted_instance(cf, sizes)
        except (GuardFailed, ArithmeticError) as e:
            rep.failed_closed += 1
            refusals[str(e)] = refusals.get(str(e), 0) + 1
            if isinstance(e, NeverServed):
                rep.never_served += 1
                unserved = unserved or (sizes, str(e))
            if rep.witnesses and not refusal:  # the first of Z3's configurations to come to nothing says why
                refusal = str(e)
            continue
        fitted += 1  # served: the guards hold and the grid is the group (what the lowering makes of it aside)
        where = ", ".join(f"{k}={v}" for k, v in sizes.items() if k in params.PARALLEL + ("heads", "dtype_bytes")
                          or k in read)  # every size the family reads: the configuration whole
        too_big = _checkable(inst)
        if too_big:
            rep.errors.append(f"{spec_line(lib, cf.name, 'local')}: {too_big}, with {where}")
            break
        try:
            maps = lower(inst)
            if hasattr(cf, "tensor_views"):  # the runtime fails closed where a page's tensors do not join
                cf.tensor_views(inst)
        except TilingError as e:
            found = None if told >= SEARCHES else next(
                ((part, x) for part in lib.parts_of(cf.name) for x in [tiling_counterexample(lib, part, sizes)] if x),
                None)
            told = SEARCHES if found is not None else told + 1  # a few searches a family, one told
            if found is not None:  # where, in the spec's words (the other samples say that it breaks)
                part, (clause, why) = found
                region = f"region {part.partition('.')[2]}: " if part != cf.name else ""
                rep.errors.append(f"{spec_line(lib, part, clause)}: {region}{why}, with {where}; look at the "
                                  f"{CLAUSE[clause]} (the digit table: {e})")
            else:
                rep.errors.append(f"{spec_line(lib, cf.name, str(e))}: {e}, with {where}")
            continue
        except GuardFailed as e:
            rep.errors.append(f"{e}, with {where}")
            continue
        rep.certified += 1
        if sequenced is not None and inst.canonical_page <= FORMAT_BYTES:
            cp = sizes.get("dcp", 1) * (1 if sizes.get("pcp_replicas") else sizes.get("pcp", 1))
            formats.setdefault(_model(sizes), {}).setdefault(cp, sizes)
        if rep.example is None or _variety(maps) > _variety(rep.example[1]):
            rep.example = (sizes, maps)
        rep.errors += [f"{spec_line(lib, cf.name, e)}: {e}, with {where}" for e in tiling_errors(maps, *pads(inst))]
        moved = _single_rank_moves(maps)
        if moved:
            rep.errors.append(f"{spec_line(lib, cf.name, 'canonical')}: {moved}, with {where}")
        element = max(1, getattr(inst, "element", 1))
        cost = inst.local_page // element * inst.world  # elements the direct reading enumerates here
        if not rep.oracle_checked and cost > ORACLE_ELEMENTS:
            rep.errors.append(f"{spec_line(lib, cf.name, 'local')}: the spec's direct reading would enumerate {cost} "
                              f"elements at the sample sizes, more than check reads ({ORACLE_ELEMENTS}): an index "
                              f"extent is out of proportion (use `layoutalg prove`), with {where}")
            break
        # the parts' direct reading at these sizes, once for the sequence and placement steps
        readings = _readings(lib, cf.name, sizes) if not placements.failed or \
            (sequenced is not None and not sequenced.failed) else None
        why = sequenced.visit(readings, sizes, len(maps), cost) if sequenced is not None else ""
        if why:  # pages of another cp are joined by this index: a false claim reorders the sequence
            rep.errors.append(f"{spec_line(lib, cf.name, 'sequence')}: {why}, with {where}")
        why = placements.visit(readings, sizes, len(maps))
        if why:  # the engine's rank r holds other heads or tokens than the grid gives it
            rep.errors.append(f"{spec_line(lib, cf.name, 'rank')}: {why}, with {where}")
        oracle = rep.oracle_checked < oracle_limit and spent + cost <= ORACLE_ELEMENTS
        canon = inst.canonical_page // element
        same = maps[0].parallelism_agnostic and compared + canon <= 8 * ORACLE_ELEMENTS  # its reading is lighter
        spent, compared = spent + (cost if oracle else 0), compared + (canon if same else 0)
        if not (oracle or same):
            continue
        try:
            readings = [Reading(lib, part, sizes) for part in lib.parts_of(cf.name)]
            expected = [{k: v for r in readings for k, v in byte_map(r, rank).items()}
                        for rank in range(len(maps))] if oracle else []
        except (ArithmeticError, LookupError) as e:
            rep.errors.append(f"{spec_line(lib, cf.name, 'family')}: the spec's direct reading fails where the "
                              f"compiled family applies ({type(e).__name__}: {e}), with {where}")
            continue
        if oracle:
            rep.oracle_checked += 1
            for rank, m in enumerate(maps):
                got = {lo + b: co + b for r in m.runs for lo, co, n in r.triples() for b in range(n)}
                if got != expected[rank]:
                    rep.errors.append(f"{spec_line(lib, cf.name, 'shard')}: rank {rank}: runs differ from the "
                                      f"spec's direct reading, with {where}")
                    break
        if same:  # on every configuration (within the budget), not only the oracle's first (all tp=1)
            why = _agnostic_differs(agnostic, sizes, readings, where)
            if why:
                rep.errors.append(f"{spec_line(lib, cf.name, 'canonical')}: {why}")
    note = sequenced.note() if sequenced is not None else ""
    if note:
        rep.notes.append(note)
    if sequenced is not None and not sequenced.failed and rep.certified:
        why, compared = _formats_differ(lib, cf.name, formats)
        if why:
            rep.errors.append(f"{spec_line(lib, cf.name, 'shard')}: {why}")
        elif not compared:  # a comparison that compared nothing is no pass: say so
            rep.notes.append(f"pages of another cp were not compared: the samples give no two configurations of "
                             f"one model under two cp with canonical pages of at most {FORMAT_BYTES} bytes that "
                             f"both read (every conversion and `layoutalg reshard` compare them at their sizes)")
    rep.errors += _unplaced(lib, cf)
    if unserved is not None:
        _never_served(lib, cf, rep, *unserved, served=fitted)
    else:  # no sample reached such a configuration: Z3 asks the guards (a grid of `world tp * pcp` asks nothing)
        from .prove.at_sizes import unserved_part
        from .prove.runner import Budgets
        why = unserved_part(lib, lib.parts_of(cf.name)[0], Budgets.of())
        if why:
            line = spec_line(lib, cf.name, "rank")
            (rep.warnings if fitted else rep.errors).append(
                f"{line}: {'part of the declared domain is never served' if fitted else 'the runtime never serves this family'}"
                f" (no sample reached it; found by Z3): {why}")
    if rep.certified and (rep.witnesses or rep.certified < FEW):  # a pass on little: say how little, and why
        rep.notes.append(f"exercised on {rep.certified} configuration(s) only"
                         + (f", all found by Z3 from the family's guards: none of the {rep.failed_closed} sample "
                            f"configuration(s) meets them"
                            + _commonest(refusals, rep.failed_closed, str(lib.family_def(cf.name).span.file))
                            if rep.witnesses else "")
                         + "; a name the family declares takes `samples` that meet its guards (`param NAME in "
                           "LO .. HI samples ...`), and `layoutalg runs` checks any configuration named")
    if not rep.certified and not rep.errors and rep.witnesses:
        rep.errors.append(f"{spec_line(lib, cf.name, 'family')}: certified on no configuration: Z3 found "
                          f"{rep.witnesses} configuration(s) where the spec's direct reading applies, but the compiled "
                          f"family fails closed on each (the two readings disagree; the first: {refusal})")
    elif not rep.certified and not rep.errors:
        rep.errors.append(f"{spec_line(lib, cf.name, 'family')}: certified on no configuration: none of the "
                          f"samples satisfies the family's guards and Z3 found no configuration that does" +
                          _commonest(refusals, rep.failed_closed, str(lib.family_def(cf.name).span.file)))
    return rep
