"""Compiled families: what the runtime executes (plain Python, no sympy, lark or Z3).

A `CompiledFamily` is the printed Python source of a family's grid cases plus the
texts and spec positions its failure messages need. It can be rebuilt from that data
alone, which is how the precompiled cache (`compile.cache`) skips parsing and compiling.

Source handed in as data is never executed on trust: `whitelist.check_source` admits
exactly the shapes `compile.codegen` prints and nothing else. The one exception is the
precompiled cache, a private folder whose files carry a checksum: the whitelist is checked
where source enters it (`cache.store`), and an entry read back runs the bytecode it holds
(`code`), as Python runs its own `__pycache__`.
"""
from __future__ import annotations

import marshal
from math import prod

from .. import params
from ..errors import ConfigError, LayoutalgError
from .instance import Bound, Instance, LocalDigit, RankDigit  # noqa: F401 - Bound: the families' bounds
from ..record import named_tuple, record
from ..verdicts import Check, Reason


class GuardFailed(LayoutalgError):
    """The family does not apply to this configuration; the layer fails closed. `reason`: why,
    as a `Reason` (a guard's by default, `check` says another test's); `guard`: the (variant,
    index) of the printed guard that failed, where one did (`CompiledFamily.page_free`)."""

    guard: tuple | None = None
    _check = Check.GUARD

    def __init__(self, why: str, check: Check = Check.GUARD):
        super().__init__(why)
        if isinstance(why, Reason):
            self._reason = why
        elif check is not Check.GUARD:
            self._check = Check.of(check)

    @property
    def reason(self) -> Reason:
        """Why, as a `Reason`: made when first read (a sample scan raises thousands, and reads few)."""
        made = self.__dict__.get("_reason")
        if made is None:
            made = self._reason = Reason.shared(self._check, str(self))
        return made


class MissingName(GuardFailed):
    """The family reads a runtime name the layer does not give (`name`)."""

    def __init__(self, message: str, name: str):
        super().__init__(Reason(Check.MISSING, message, name=name))
        self.name = name

    def __reduce__(self):  # (an exception is rebuilt from its args: here the message and the name)
        return type(self), (str(self), self.name), self.__dict__


# A divisor must be positive: what the prover assumes (Z3 reads `a // b` by its definition
# for b > 0), so a configuration that divides by zero or a negative number fails closed.
def _exact(a, b, k):
    if b <= 0 or a % b:
        raise _AtomFailed(k, a, b)
    return a // b


def _floor(a, b, k):
    if b <= 0:
        raise _AtomFailed(k, a, b)
    return a // b


def _mod(a, b, k):
    if b <= 0:
        raise _AtomFailed(k, a, b)
    return a % b


class _AtomFailed(Exception):
    def __init__(self, k, a, b):
        self.k, self.a, self.b = k, a, b


def _reads_page(node, page: set) -> bool:
    """Whether the printed expression `node` reads `P['page_size']`, or a name in `page` (bound from it)."""
    import ast
    return any(isinstance(n, ast.Name) and n.id in page or isinstance(n, ast.Constant) and n.value == "page_size"
               for n in ast.walk(node))


class _Guard(Exception):
    def __init__(self, variant, index):
        self.variant, self.index = variant, index


def misfit(inst: Instance, page: int, group: int) -> Reason | None:
    """Why an instance does not fit the layer the runtime holds (None when it does).

    Every family, the fallback included, applies only where its local layout is exactly
    the page and its grid is the worker group (`group` = tp * pcp ranks): what the runtime
    demands, what `check` samples and what the prover assumes.
    """
    if inst.local_page != page:
        return Reason(Check.PAGE, f"layout holds {inst.local_page} bytes but the page is {page}",
                      expected=page, actual=inst.local_page)
    if inst.world != group:
        return Reason(Check.GROUP, f"the grid has {inst.world} ranks but the worker group has tp * pcp = {group}",
                      expected=group, actual=inst.world)
    return None


def stage_grid(cf) -> bool:
    """Whether `cf` is a stage grid's family: it reads `pp` (its page holds a pipeline stage's
    layers, and its grid spans every stage's group), so pp is a size of its page, not a split of
    the layers into tensors of their own (`params.group`)."""
    return any(b.name == "pp" for b in cf.bounds)


def stage_sizes(cf, pp: int) -> dict:
    """The sizes `pp` pipeline stages give a layer of family `cf`: `{"pp": pp}` for a stage grid's
    family; none for any other (its layers are tensors of their own, which stages split), where
    pp other than 1 is a `ConfigError` naming the family."""
    if stage_grid(cf):
        return {"pp": pp}
    if pp != 1:
        raise ConfigError(f"pp={pp}: {cf.name} holds a layer a tensor (its grid reads no pp): pipeline stages "
                          f"split its layers between groups, each the same tp x pcp grid")
    return {}


def group_of(cf, sizes: dict) -> int:
    """The ranks the runtime runs for a layer of family `cf` at `sizes` (`params.group`): tp * pcp,
    times pp for a stage grid's family (one that reads `pp`)."""
    return params.group(sizes, {b.name for b in cf.bounds})


def at_page(cf, sizes: dict, page: int) -> tuple:
    """(the instance of family `cf` at `sizes` holding a page of `page` bytes, why the runtime
    would not serve a layer so (`misfit`, against the family's group; None where it would)): the
    one way the runtime, `check`'s samples, recognition and the CLI ask whether a family holds a
    page. Raises `GuardFailed` where the family's guards fail there."""
    inst = cf.evaluate({**sizes, "page_size": page})
    return inst, misfit(inst, page, group_of(cf, sizes))


def fitted_page(cf, sizes: dict) -> int:
    """The page a layer of family `cf` holds at `sizes` (page_size aside): exactly its data.

    A page of regions holds its regions and pads (a pad sized by the page itself, a padded
    row, grows it: followed until it holds still); a family whose layout is sized by the
    page (MLA's latent rows) holds one row of `head_size` elements a token; any other
    family holds what its local layout spans. Raises `GuardFailed` where the family does
    not apply at `sizes`.

    Post-conditions: where `cf.evaluate({**sizes, "page_size": p})` holds, its local page
    is `p` for a family whose layout does not read the page.
    """
    probe = cf.evaluate({**sizes, "page_size": 0}, bounded=False)
    if isinstance(probe, Page):
        page = sum(i.local_page for _, i in probe.regions)
        for _ in range(3):
            whole = cf.evaluate({**sizes, "page_size": page}, bounded=False).local_page
            if whole == page:
                break
            page = whole
        return page
    if probe.local_page > 0:
        return probe.local_page
    return sizes["block_size"] * sizes["head_size"] * sizes["dtype_bytes"]


def valid_json(d, check: bool = True) -> bool:
    """True when `d` has the shape of `CompiledFamily.to_json` and its source passes `check_source`
    (without `check`: the shape alone, with the bytecode the private cache holds)."""
    def strings(x, n):
        return isinstance(x, list) and len(x) == n and all(isinstance(s, str) for s in x)

    def items(x, ok):
        return isinstance(x, list) and all(ok(i) for i in x)

    if not (isinstance(d, dict) and all(isinstance(d.get(k), str)
                                        for k in ("name", "serves", "where", "source", "layout_id"))
            and type(d.get("order")) is int and type(d.get("claims_agnostic")) is bool
            and type(d.get("tensor_outer")) is int and isinstance(d.get("tensor"), list)
            and isinstance(d.get("reading"), str)
            and 0 <= d["tensor_outer"] <= len(d["tensor"])
            and items(d.get("guards"), lambda v: items(v, lambda g: strings(g, 2)))
            and items(d.get("atoms"), lambda a: strings(a, 3))
            and items(d.get("tensor"), lambda t: isinstance(t, str))
            and items(d.get("bounds"), lambda b: isinstance(b, list) and len(b) == 3 and isinstance(b[0], str)
                      and all(type(x) is int for x in b[1:]))):
        return False
    if not check:
        return isinstance(d.get("code"), bytes)
    from .whitelist import UnsafeSource, check_source
    try:
        check_source(d["source"], tuple(len(v) for v in d["guards"]), len(d["atoms"]))
    except UnsafeSource:
        return False
    return True


@record
class CompiledFamily:
    """A family ready for the runtime: `evaluate(sizes)` gives its `Instance`.

    `guards[v][k]` is (spec position, text) of guard k of variant v; `atoms[k]` is
    (spec position, operator, text) of division k.
    """

    name: str
    serves: str
    order: int
    where: str  # spec position of the family
    source: str
    guards: tuple
    atoms: tuple
    tensor: tuple = ()  # index of each dim of the tensor the family recognises, after the block dim
    layout_id: str = ""  # the canonical page format's identity (`identity.layout_id`)
    bounds: tuple = ()  # a `Bound` of each runtime name the family reads: where it is proved
    family: object = None  # the family IR, when compiled in this process
    # its grid claims `agnostic` in some case: the canonical indices name the data (a token,
    # a head), not where a rank put it, so the canonical layout's numbers are its format
    claims_agnostic: bool = True
    tensor_outer: int = 0  # dims of `tensor` before the block dim (FlashAttention's (2, blocks, ...))
    # how it reads a tensor it takes, as terms (`codegen.reading_key`): two families of one kind
    # with one non-empty key read every byte of a tensor both take as one engine element; '' none
    reading: str = ""

    code: bytes | None = None  # marshalled bytecode of `source`, from the trusted cache only

    def __post_init__(self):
        if self.code is None:  # source handed in: admitted by the whitelist before anything runs
            self._held = self._run(_checked(self.name, self.source, self.guards, self.atoms))

    @property
    def _variants(self) -> tuple:
        """The functions of the variants, from the trusted cache's bytecode when first called
        (a process runs few of its library's families); bytecode that does not load, run or
        define them is dropped for the source, admitted by the whitelist."""
        held = self.__dict__.get("_held")
        if held is None:
            try:
                held = self._run(marshal.loads(self.code))
            except Exception:  # noqa: BLE001 - whatever damaged bytecode raises, the source is compiled
                held = self._run(_checked(self.name, self.source, self.guards, self.atoms))
            self._held = held
        return held

    def _run(self, code) -> tuple:
        env = {"__builtins__": {}, "bool": bool, "_exact": _exact, "_floor": _floor, "_mod": _mod,
               "_Guard": _Guard, "_Instance": Instance}
        exec(code, env)
        return tuple(env[f"_variant_{k}"] for k in range(len(self.guards)))

    def page_free(self) -> frozenset:
        """The guards, as (variant, index), that fail at every `page_size` where they fail at one.

        The printed code runs its variants in order, each its cases, then its guards, each a test
        of the names it read from `P` (`codegen._variant_source`). A guard's test that reads no
        name bound from `P['page_size']`, reached past cases and guards none of which reads one
        either, runs the same way at every page: it fails at all of them, and first, with one
        message. Read from the source once (the whitelist admits no other shapes).

        Example:
            >>> from layoutalg.dsl.library import load
            >>> from layoutalg.ir.family import resolve
            >>> from layoutalg.compile.codegen import compile_family
            >>> cf = compile_family(resolve(load(["specs/split_nhd.lal"]), "split_nhd"))
            >>> (0, 0) in cf.page_free()  # total_heads % tp == 0 reads no page_size
            True
        """
        held = self.__dict__.get("_page_free")
        if held is None:
            import ast  # (the prover's and `check`'s: the runtime's start-up reads no source)
            found, clear = set(), True
            functions = [f for f in ast.parse(self.source).body if isinstance(f, ast.FunctionDef)]
            for fn in sorted(functions, key=lambda f: int(f.name.rsplit("_", 1)[1])):  # the order `evaluate` runs
                page = set()  # the names this variant bound from P['page_size']
                for st in fn.body:
                    if isinstance(st, ast.Assign) and _reads_page(st.value, page):
                        page |= {t.id for t in st.targets if isinstance(t, ast.Name)}
                    elif isinstance(st, ast.If):
                        reads = _reads_page(st.test, page)
                        raised = st.body[0].exc if st.body and isinstance(st.body[0], ast.Raise) else None
                        if clear and not reads and isinstance(raised, ast.Call):
                            found.add(tuple(a.value for a in raised.args))
                        clear = clear and not reads
            self._page_free = held = frozenset(found)
        return held

    def to_json(self) -> dict:
        """The family as plain data (the private cache adds the bytecode: `admitted`)."""
        return {k: getattr(self, k) for k in ("name", "serves", "order", "where", "source", "guards", "atoms",
                                           "tensor", "layout_id", "bounds", "claims_agnostic", "tensor_outer", "reading")}

    @staticmethod
    def from_json(d: dict, trusted: bool = False) -> "CompiledFamily":
        """The family of `to_json`'s data. Its source passes `check_source` first, unless the data
        is `trusted` (read back from the private cache) and carries its bytecode."""
        code = d["code"] if trusted and isinstance(d.get("code"), bytes) else None
        return CompiledFamily(d["name"], d["serves"], d["order"], d["where"], d["source"],
                              tuple(tuple(tuple(g) for g in v) for v in d["guards"]),
                              tuple(tuple(a) for a in d["atoms"]), tuple(d["tensor"]), d["layout_id"],
                              tuple(Bound(*b) for b in d["bounds"]), claims_agnostic=d["claims_agnostic"],
                              tensor_outer=d["tensor_outer"], reading=d["reading"], code=code)

    @property
    def tensor_dims(self) -> int:
        return len(self.tensor)

    def outside_domain(self, sizes: dict) -> Reason | None:
        """None when every name the family reads lies in its proved bounds, else which one does not:
        past the declared domain nothing is proved, so the family fails closed there."""
        for name, lo, hi in self.bounds:  # (every configuration a layer or a sample reads passes here)
            value = sizes.get(name)
            if value is not None and not lo <= value <= hi:
                return params.outside(name, value, lo, hi)
        return None

    def evaluate(self, sizes: dict, bounded: bool = True) -> Instance:
        """The numeric digit table at `sizes` (a value for each runtime name the family reads).

        Raises `GuardFailed` naming the spec line of the first guard that fails, or the
        runtime name the family reads that `sizes` does not give.
        """
        outside = self.outside_domain(sizes) if bounded else None  # unbounded: tools probing a layout's size
        if outside:
            raise GuardFailed(outside.said(f"{self.where}: "))
        for k, fn in enumerate(self._variants):
            try:
                out = fn(sizes)
            except KeyError as e:
                raise MissingName(f"{self.where}: family '{self.name}' reads the runtime name {e.args[0]!r}, "
                                  f"which this layer does not give", e.args[0]) from None
            except _Guard as g:
                where, text = self.guards[g.variant][g.index]
                failed = GuardFailed(f"{where}: {text} does not hold")
                failed.guard = (g.variant, g.index)
                raise failed from None
            except _AtomFailed as a:
                where, op, text = self.atoms[a.k]
                what = "divides by a number that is not positive" if a.b <= 0 else "is not a whole number"
                raise GuardFailed(f"{where}: {text} = {a.a} {op} {a.b} {what}") from None
            if out is not None:  # the compiled code returns plain tuples: name their fields once, here
                out = out._replace(local=tuple(LocalDigit._make(d) for d in out.local),
                                   ranks=tuple(RankDigit._make(r) for r in out.ranks))
            if out is not None and not bounded:
                return out  # a tool probing a layout's size at a made-up page
            if out is not None:
                bad = next((n for (e, *_), n in zip(out.local, out.local_names) if e < 0), None)
                if bad is None:
                    bad = next((n for (e, *_), n in zip(out.ranks, out.rank_names) if e < 0), None)
                if bad is not None:  # an empty box is a box; a negative extent is no size at all
                    raise GuardFailed(f"{self.where}: family '{self.name}': digit '{bad}' has a negative extent "
                                      f"at these sizes")
                return out
        raise GuardFailed(f"{self.where}: no case of the grid holds for family '{self.name}'")


@named_tuple
class Page:
    """A family of pages at one configuration: each data region's instance, and the pads.

    A region's instance is that of its part family (`Instance.local_base` places it in the
    page); a pad's instance gives its local digits only (it is never copied)."""

    family: str
    regions: tuple        # ((region name, Instance), ...) of the data regions, in page order
    local_pads: tuple     # (Instance, ...) of the local page's pads
    canonical_pads: tuple  # (Instance, ...) of the canonical page's pads (local digits: the pad's box)
    local_page: int
    canonical_page: int
    world: int
    agnostic: bool
    tensor_shape: tuple = ()  # pages are not recognised from one tensor
    names_data: bool = False  # every region's and canonical pad's instance names the engine's elements


@record
class CompiledPage:
    """A family of pages ready for the runtime: one compiled part family per region.

    Every part runs the family's grid and statements, so they take the same case at any
    configuration; `evaluate` fails closed if they do not agree."""

    name: str
    serves: str
    order: int
    where: str
    parts: tuple          # (region name, CompiledFamily) of each data region
    local_pads: tuple     # CompiledFamily of each local pad
    canonical_pads: tuple
    layout_id: str = ""
    family: object = None
    views: tuple = ()  # (tensor name, (region or pad, ...), dims merged) of each layer tensor viewing the page

    tensor = ()
    tensor_dims = 0
    reading = ""  # a family of pages is never shown to read alike with another (`codegen.reading_key`)

    @property
    def claims_agnostic(self) -> bool:
        return any(cf.claims_agnostic for _, cf in self.parts)

    def tensor_views(self, page: Page) -> tuple:
        """Each tensor's `TensorView` at this configuration: its regions (and pads) joined along
        the one dimension they continue each other in, then the dims that hold several indices
        merged. Raises `GuardFailed` where they do not join or do not merge."""
        from ..mapping import TensorView
        insts = {**dict(page.regions), **{region_of(cf.name): inst for cf, inst in zip(self.local_pads, page.local_pads)}}
        out = []
        for name, regions, groups in self.views:
            first = insts[regions[0]]
            shape, base = list(first.tensor_shape), first.local_base
            for prev, r in zip(regions, regions[1:]):
                inst = insts[r]
                d = _joined(shape, base, first, inst)
                if d is None:
                    raise GuardFailed(f"{self.where}: tensor '{name}' of family '{self.name}' does not view its "
                                      f"regions as one tensor: region '{r}' ({inst.tensor_shape} at byte "
                                      f"{inst.local_base}, strides {inst.tensor_strides}) does not continue "
                                      f"'{prev}' along one dimension of shape {tuple(shape)} at byte {base}")
                shape[d] += inst.tensor_shape[d]
            shape, strides = _merged(tuple(shape), first.tensor_strides, groups,
                                     f"{self.where}: tensor '{name}' of family '{self.name}'")
            view = TensorView(name, base, shape, strides, first.element)
            held = sum(insts[r].local_page for r in regions)
            if view.bytes_per_block != held:
                raise GuardFailed(f"{self.where}: tensor '{name}' of family '{self.name}' views "
                                  f"{view.bytes_per_block} bytes of a block but its regions "
                                  f"({', '.join(regions)}) hold {held}")
            out.append(view)
        return tuple(out)

    @property
    def bounds(self) -> tuple:
        return tuple(sorted({b for _, cf in self.parts for b in cf.bounds}
                            | {b for cf in self.local_pads + self.canonical_pads for b in cf.bounds}))

    def outside_domain(self, sizes: dict) -> Reason | None:
        for cf in (*(cf for _, cf in self.parts), *self.local_pads, *self.canonical_pads):
            why = cf.outside_domain(sizes)
            if why:
                return why
        return None

    def evaluate(self, sizes: dict, bounded: bool = True) -> Page:
        """Every region's instance at `sizes`; raises `GuardFailed` as `CompiledFamily.evaluate`."""
        regions = tuple((r, cf.evaluate(sizes, bounded)) for r, cf in self.parts)
        lpads = tuple(cf.evaluate(sizes, bounded) for cf in self.local_pads)
        cpads = tuple(cf.evaluate(sizes, bounded) for cf in self.canonical_pads)
        first = regions[0][1]
        for r, inst in regions[1:]:
            if (inst.world, inst.agnostic) != (first.world, first.agnostic):
                raise GuardFailed(f"{self.where}: regions '{regions[0][0]}' and '{r}' of family '{self.name}' "
                                  f"take different cases of the grid")
        local = sum(i.local_page for _, i in regions) + sum(p.local_page for p in lpads)
        canonical = sum(i.canonical_page for _, i in regions) + sum(p.local_page for p in cpads)
        named = all(i.names_data for _, i in regions) and all(p.names_data for p in cpads)
        return Page(self.name, regions, lpads, cpads, local, canonical, first.world, first.agnostic, (), named)

    def to_json(self) -> dict:
        return {"page": True, "name": self.name, "serves": self.serves, "order": self.order, "where": self.where,
                "layout_id": self.layout_id, "parts": [[r, cf.to_json()] for r, cf in self.parts],
                "local_pads": [cf.to_json() for cf in self.local_pads],
                "canonical_pads": [cf.to_json() for cf in self.canonical_pads],
                "views": [[t, list(regions), list(groups)] for t, regions, groups in self.views]}

    @staticmethod
    def from_json(d: dict, trusted: bool = False) -> "CompiledPage":
        return CompiledPage(d["name"], d["serves"], d["order"], d["where"],
                            tuple((r, CompiledFamily.from_json(p, trusted)) for r, p in d["parts"]),
                            tuple(CompiledFamily.from_json(p, trusted) for p in d["local_pads"]),
                            tuple(CompiledFamily.from_json(p, trusted) for p in d["canonical_pads"]), d["layout_id"],
                            views=tuple((t, tuple(regions), tuple(groups)) for t, regions, groups in d["views"]))


def _merged(shape: tuple, strides: tuple, groups: tuple, what: str) -> tuple[tuple, tuple]:
    """The tensor dims when each holds `groups[k]` consecutive index dims (row-major: each
    index's stride is the next one's extent times its stride). Raises `GuardFailed` where the
    indices of one dim are not contiguous.

    Examples:
        >>> _merged((4, 2, 16), (32, 16, 1), (1, 2), "t")
        ((4, 32), (32, 1))
        >>> _merged((3, 5), (7, 1), (), "t")
        ((3, 5), (7, 1))
    """
    if not groups:
        return shape, strides
    if sum(groups) != len(shape):
        raise GuardFailed(f"{what}: its dims hold {sum(groups)} indices but its regions have {len(shape)}")
    out_shape, out_strides, i = [], [], 0
    for g in groups:
        for k in range(i, i + g - 1):
            if shape[k] != 1 and strides[k] != shape[k + 1] * strides[k + 1]:
                raise GuardFailed(f"{what}: its dimension {len(out_shape) + 1} holds indices of extents "
                                  f"{shape[i:i + g]} and strides {strides[i:i + g]} (elements), which are not "
                                  f"contiguous (stride {strides[k]} is not {shape[k + 1]} * {strides[k + 1]})")
        out_shape.append(prod(shape[i:i + g]))
        out_strides.append(strides[i + g - 1])
        i += g
    return tuple(out_shape), tuple(out_strides)


def _joined(shape: list, base: int, first: Instance, inst: Instance) -> int | None:
    """The dimension along which region `inst` continues a tensor view (`shape` at byte `base`,
    `first`'s strides and element), or None."""
    if (inst.tensor_strides, inst.element, len(inst.tensor_shape)) != (first.tensor_strides, first.element,
                                                                       len(shape)):
        return None
    for d, (extent, stride) in enumerate(zip(shape, first.tensor_strides)):
        same = all(a == b for k, (a, b) in enumerate(zip(shape, inst.tensor_shape)) if k != d)
        if same and inst.local_base == base + extent * stride * first.element:
            return d
    return None


def valid_entry(d, check: bool = True) -> bool:
    """`valid_json` for a compiled family or a compiled family of pages (every part checked)."""
    if isinstance(d, dict) and d.get("page") is True:
        return (all(isinstance(d.get(k), str) for k in ("name", "serves", "where", "layout_id"))
                and type(d.get("order")) is int and isinstance(d.get("parts"), list) and d["parts"]
                and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and valid_json(p[1], check)
                        for p in d["parts"])
                and all(isinstance(d.get(k), list) and all(valid_json(p, check) for p in d[k])
                        for k in ("local_pads", "canonical_pads"))
                and isinstance(d.get("views"), list)
                and all(isinstance(v, list) and len(v) == 3 and isinstance(v[0], str) and isinstance(v[1], list)
                        and v[1] and all(isinstance(r, str) and r in _part_names(d) for r in v[1])
                        and isinstance(v[2], list)
                        and all(type(g) is int and g >= 1 for g in v[2]) for v in d["views"]))
    return valid_json(d, check)


def admitted(d) -> dict | None:
    """An entry of `to_json()` as the private cache may hold it: its source checked
    (`valid_entry`) and its bytecode compiled here from that source, never taken as given;
    None where the source is not admitted."""
    if not valid_entry(d, check=True):
        return None

    def coded(f: dict) -> dict:
        return {**f, "code": marshal.dumps(_checked(f["name"], f["source"], f["guards"], f["atoms"]))}
    if d.get("page") is True:
        return {**d, "parts": [[r, coded(f)] for r, f in d["parts"]],
                "local_pads": [coded(f) for f in d["local_pads"]],
                "canonical_pads": [coded(f) for f in d["canonical_pads"]]}
    return coded(d)


def _checked(name: str, source: str, guards, atoms):
    """The bytecode of a family's `source`, which the whitelist admits first (`whitelist.checked_code`)."""
    from .whitelist import checked_code  # only where source enters: a load from the cache runs bytecode
    return checked_code(name, source, guards, atoms)


def _part_names(d: dict) -> set:
    """The regions and local pads a compiled page's views may name."""
    return {p[0] for p in d["parts"]} | {region_of(p["name"]) for p in d["local_pads"]
                                         if isinstance(p, dict) and isinstance(p.get("name"), str)}


def region_of(part: str) -> str:
    """The region (or pad) a part family is of: `quant_packed.tail` is of `tail`."""
    return part.rsplit(".", 1)[-1]


def from_entry(d: dict, trusted: bool = False):
    cls = CompiledPage if d.get("page") is True else CompiledFamily
    return cls.from_json(d, trusted)
