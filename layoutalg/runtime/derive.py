"""Runtime: derive every rank's canonical page mapping of a layer from a spec library.

    deriver = Deriver()                       # the shipped specs, compiled once per process
    result = deriver.derive(layer, tensor, parallel)

The path is plain Python over compiled families: no parsing after the first use of a
library, no sympy evaluation, never Z3. Results are memoised by (layer sizes, tensor
strides, parallel config), so 80 identical layers cost one derivation.

Inputs are checked where they are built (`LayerSpec`, `ParallelConfig`, `TensorLayout`
raise `ConfigError` for a value that is not an integer, or a parallel size below 1), so
the memoised path never re-checks them. Layer sizes that are integers but make no sense
(a zero block size, a negative page) are not errors: no family applies and the layer
fails closed, as the reference's derivation returns no certified mapping for it.
"""
from __future__ import annotations

import functools
import operator
import os
from math import prod

from .. import params
from ..dsl import sources as files
from ..compile.compiled import CompiledFamily, CompiledPage, GuardFailed, Instance, Page, from_entry, misfit
from ..errors import ConfigError, MissingNames
from .lower import TilingError, lower
from ..mapping import MAX_STRETCHES, CanonicalPageMapping, TensorView
from ..record import named_tuple, record, replace

CERTIFIED, OPAQUE, NO_MAPPINGS, OMITTED = "certified", "opaque", "no_mappings", "omitted"
FALLBACK = "fallback"
"""The layer kind of the family tried when none of a layer's own kind applies (declared in specs)."""


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def as_int(value, field: str, minimum: int | None = None) -> int:
    """`value` as a plain int, or `ConfigError` naming `field` and the value received.

    Integer scalars of numpy and torch are integers (`operator.index`); bools, floats
    and strings are not, whatever they would round to.

    Examples:
        >>> as_int(3, "tp", minimum=1)
        3
        >>> as_int(0, "tp", minimum=1)
        Traceback (most recent call last):
        ...
        layoutalg.errors.ConfigError: tp must be an integer >= 1, got 0
    """
    if isinstance(value, bool):
        raise ConfigError(f"{field} must be an integer, got {value!r} (bool)")
    try:
        out = operator.index(value)
    except TypeError:
        raise ConfigError(f"{field} must be an integer, got {_shown(value)} ({type(value).__name__})") from None
    if minimum is not None and out < minimum:
        raise ConfigError(f"{field} must be an integer >= {minimum}, got {out}")
    return out


def _as_flag(value, field: str) -> bool:
    if isinstance(value, bool):
        return value
    if as_int(value, field) not in (0, 1):
        raise ConfigError(f"{field} must be True or False (or 0 or 1), got {_shown(value)}")
    return bool(value)


def _set(obj, field: str, value) -> None:
    object.__setattr__(obj, field, value)  # frozen dataclass: normalise once, at construction


def _check_ints(obj, fields: tuple, minimum: int | None = None, optional: tuple = ()) -> None:
    """Each of `fields` of `obj` a plain int (>= minimum), those `optional` also None; a plain int costs one test."""
    for field in fields:
        value = getattr(obj, field)
        if value is None and field in optional:
            continue
        if type(value) is not int or (minimum is not None and value < minimum):
            _set(obj, field, as_int(value, f"{type(obj).__name__}.{field}", minimum))


_LAYER_SIZES = ("page_size_bytes", "block_size", "num_kv_heads", "head_size", "dtype_bytes", "compress_ratio")
_PARALLEL_SIZES = ("tp", "total_kv_heads", "pcp", "dcp", "interleave", "world_size")


@record(frozen=True)
class LayerSpec:
    """What the engine knows about one layer's KV page on one rank."""

    kind: str  # the layer kind families `serve`: "attention", "mla", or any kind a spec names
    page_size_bytes: int | None
    block_size: int = 0
    num_kv_heads: int = 0
    head_size: int = 0
    dtype_bytes: int = 0
    per_token_head_quant: bool = False
    compress_ratio: int = 1
    sizes: tuple = ()  # more runtime names a spec declares (`param`): a mapping or (name, value) pairs

    def __post_init__(self):
        if not isinstance(self.kind, str):
            raise ConfigError(f"LayerSpec.kind must be a string, got {_shown(self.kind)} ({type(self.kind).__name__})")
        _check_ints(self, _LAYER_SIZES, optional=("page_size_bytes",))
        if type(self.per_token_head_quant) is not bool:
            _set(self, "per_token_head_quant", _as_flag(self.per_token_head_quant, "LayerSpec.per_token_head_quant"))
        if self.sizes is None or (not self.sizes and self.sizes != ()):
            _set(self, "sizes", ())  # None, {} and [] all mean no extra names (and stay hashable)
        elif self.sizes:
            _set(self, "sizes", _named_sizes(self.sizes))


def _named_sizes(sizes) -> tuple:
    """`sizes` as sorted (name, int) pairs, hashable so derivations stay memoised."""
    items = sizes.items() if hasattr(sizes, "items") else sizes
    try:
        pairs = [(k, v) for k, v in items]
    except (TypeError, ValueError):
        raise ConfigError(f"LayerSpec.sizes must map runtime names to integers, got {_shown(sizes)}") from None
    out = {}
    for name, value in pairs:
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"LayerSpec.sizes: {_shown(name)} is not a runtime name")
        if name in _DERIVED:
            raise ConfigError(f"LayerSpec.sizes: '{name}' comes from the layer's and the group's own fields")
        if name in out:
            raise ConfigError(f"LayerSpec.sizes: '{name}' is given twice")
        out[name] = as_int(value, f"LayerSpec.sizes[{name!r}]")
    return tuple(sorted(out.items()))


@record(frozen=True)
class ParallelConfig:
    """The worker group: tp x pcp ranks, DCP inside TP, CP token interleave."""

    tp: int
    total_kv_heads: int | None = None  # KV heads of the whole model: attention layers read it, state layers do not
    pcp: int = 1
    dcp: int = 1
    interleave: int = 1
    world_size: int | None = None  # defaults to tp * pcp

    def __post_init__(self):
        # A parallel size below 1 has no meaning (the reference divides by dcp and
        # interleave): an error, not a layer that fails closed.
        _check_ints(self, _PARALLEL_SIZES, minimum=1, optional=("world_size", "total_kv_heads"))
        # Past the proved domain a group is not a deployment but a typo, and a million
        # ranks would each get a mapping: refuse it by name.
        for field, name in (("tp", "tp"), ("pcp", "pcp"), ("dcp", "dcp"), ("interleave", "interleave"),
                            ("total_kv_heads", "total_heads")):
            lo, hi = params.DOMAIN[name]
            if getattr(self, field) is not None and getattr(self, field) > hi:
                raise ConfigError(f"ParallelConfig.{field} = {getattr(self, field)} is outside the proved domain "
                                  f"[{lo}, {hi}]")


@record(frozen=True)
class TensorLayout:
    """A KV tensor as the runtime sees it: shape, strides (elements), element bytes."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    element_size: int
    dtype: str = ""  # the element type's name, where known ('torch.bfloat16'): part of the page format

    def __post_init__(self):
        shape, stride = _int_tuple(self.shape, "TensorLayout.shape"), _int_tuple(self.stride, "TensorLayout.stride")
        if len(shape) != len(stride):
            raise ConfigError(f"TensorLayout: shape {shape} has {len(shape)} dimensions but stride {stride} "
                              f"has {len(stride)}")
        if shape is not self.shape or stride is not self.stride:
            _set(self, "shape", shape)
            _set(self, "stride", stride)
        _check_ints(self, ("element_size",), minimum=1)
        if not isinstance(self.dtype, str):
            raise ConfigError(f"TensorLayout.dtype must be the element type's name, got {_shown(self.dtype)}")

    @staticmethod
    def of(tensor) -> "TensorLayout | tuple[TensorLayout, ...] | None":
        """From a torch tensor (or anything with shape/stride/element_size); from a list or
        tuple of them (a layer of several tensors, as vLLM gives a Mamba layer's conv and SSM
        state), a tuple of them; None otherwise."""
        if isinstance(tensor, (list, tuple)) and tensor:
            layouts = tuple(TensorLayout.of(t) for t in tensor)
            bad = next((i for i, t in enumerate(layouts) if not isinstance(t, TensorLayout)), None)
            if bad is not None:
                raise ConfigError(f"a layer's tensors: item {bad} is a {type(tensor[bad]).__name__}, not a tensor")
            return layouts
        if not all(hasattr(tensor, a) for a in ("shape", "stride", "element_size")):
            return None
        if not (callable(tensor.stride) and callable(tensor.element_size)):
            raise ConfigError(f"a {type(tensor).__name__} with shape, stride and element_size that are not "
                              "a torch tensor's (stride() and element_size() must be methods)")
        return TensorLayout(tensor.shape, tensor.stride(), tensor.element_size(), str(getattr(tensor, "dtype", "")))


def _int_tuple(values, field: str) -> tuple[int, ...]:
    if type(values) is tuple and all(type(v) is int and v >= 0 for v in values):
        return values
    try:
        items = tuple(values)
    except TypeError:
        raise ConfigError(f"{field} must be a sequence of integers, got {_shown(values)}") from None
    return tuple(as_int(v, f"{field}[{i}]", minimum=0) for i, v in enumerate(items))


@record(frozen=True)
class LayerResult:
    """Every rank's mapping of one layer, and how it was obtained."""

    result: str  # certified | opaque | no_mappings | omitted
    family: str | None
    mappings: tuple[CanonicalPageMapping, ...]
    reasons: tuple[str, ...] = ()  # why candidate families did not apply


class Deriver:
    """Derives layer mappings from a compiled spec library (the shipped one by default)."""

    def __init__(self, spec_dir: str | os.PathLike | None = None):
        self.families = compiled_library(str(spec_dir) if spec_dir else None)
        if not self.families:  # every layer would fail closed, and a run would look like one of layers no family serves
            raise ConfigError(f"spec library {spec_dir or '(shipped)'} holds no family: nothing to derive a mapping "
                              f"from")
        self._by_kind: dict[str, list[CompiledFamily]] = {}
        for cf in sorted(self.families.values(), key=lambda f: (f.order, f.name)):
            self._by_kind.setdefault(cf.serves, []).append(cf)
        fallback = self._by_kind.get(FALLBACK, [])
        if len(fallback) > 1:
            raise ConfigError(f"spec library {spec_dir or '(shipped)'}: at most one family may serve "
                              f"'{FALLBACK}', found {len(fallback)} ({', '.join(cf.name for cf in fallback)})")
        self.fallback = fallback[0] if fallback else None  # a library without one fails closed instead
        self.names = {b.name for cf in self.families.values() for b in cf.bounds}  # every name some family reads
        self.domains = {b.name: (b.lo, b.hi) for cf in self.families.values() for b in cf.bounds}
        self._memo = functools.lru_cache(maxsize=4096)(self._derive)
        self._salt = os.urandom(16)  # names pages derived without their tensors (`_unread`)

    def derive(self, layer: LayerSpec, tensor: TensorLayout | None, parallel: ParallelConfig,
               num_blocks: int | None = None, strict: bool = True) -> LayerResult:
        """Every rank's mapping of `layer` (memoised: the arguments are hashable records).

        Raises `MissingNames` where every family serving the layer's kind reads a runtime name
        the layer does not give; with `strict` False such a layer goes to the fallback (the vLLM
        adapter's choice: a model's layer it cannot read is stored opaque, with a warning)."""
        try:
            return self._memo(layer, tensor, parallel, num_blocks, strict)
        except TypeError:  # an argument that is no hashable record: say which, as on a cache miss
            _check_arguments(layer, tensor, parallel, num_blocks)
            raise

    def reads(self, kind: str) -> set[str]:
        """The runtime names the families serving `kind` read (the fallback aside)."""
        return {b.name for cf in self._by_kind.get(kind, []) for b in cf.bounds}

    def cache_info(self):
        """Hits and misses of the memoised derivations (`functools.lru_cache`)."""
        return self._memo.cache_info()

    def _derive(self, layer: LayerSpec, tensor: TensorLayout | None, parallel: ParallelConfig,
                num_blocks: int | None = None, strict: bool = True) -> LayerResult:
        num_blocks = _check_arguments(layer, tensor, parallel, num_blocks)  # on cache misses only
        unread = sorted(n for n, _ in layer.sizes if n not in self.names)
        if unread:  # a misspelt name would otherwise silently select another grid's semantics
            raise ConfigError(f"LayerSpec.sizes: no family of this spec library reads {', '.join(map(repr, unread))}; "
                              f"the names they read: {', '.join(sorted(self.names))}")
        world = parallel.world_size if parallel.world_size is not None else parallel.tp * parallel.pcp
        if world != parallel.tp * parallel.pcp:
            return LayerResult(NO_MAPPINGS, None, (), (f"world size {world} != tp * pcp",))
        if layer.page_size_bytes is None:
            return LayerResult(OMITTED, None, (), ("the page size is unknown",))
        if layer.page_size_bytes < 1:
            return LayerResult(NO_MAPPINGS, None, (), (f"the page is {layer.page_size_bytes} bytes: "
                                                       "no family holds an empty or negative page",))
        sizes = _sizes(layer, tensor, parallel)
        reasons = [f"{n} = {v} is outside its declared domain [{self.domains[n][0]}, {self.domains[n][1]}]: no "
                   f"family reads this layer but the fallback" for n, v in layer.sizes
                   if n in self.domains and not self.domains[n][0] <= v <= self.domains[n][1]]
        # a name given out of its domain is a misdeclared deployment (`aiter_kv = 2`): a family
        # that does not read it must not take the layer in its place
        missing = {}
        kind = self._by_kind.get(layer.kind, []) if not reasons else []
        for k, cf in enumerate(kind):
            runs = _apply(cf, sizes, layer, tensor, num_blocks, salt=self._salt)
            if isinstance(runs, str):
                reasons.append(f"{cf.name}: {runs}")
                missing[cf.name] = getattr(runs, "missing", None)
                continue
            why = _taken_twice(cf, runs, kind[k + 1:], sizes, layer, tensor, num_blocks)
            if not why:
                return LayerResult(CERTIFIED, cf.name, runs, tuple(reasons))
            reasons.append(why)  # two readings of one tensor: neither is the engine's for certain
            break
        if strict and parallel.total_kv_heads is None and "total_heads" in missing.values():
            raise MissingNames(f"ParallelConfig.total_kv_heads (the KV heads of the whole model) is not given, and "
                               f"a '{layer.kind}' layer needs it: families "
                               f"{', '.join(f for f, n in missing.items() if n == 'total_heads')} read it as "
                               f"total_heads (state layers go without it)")
        if strict and missing and all(missing.values()):  # the layer is of this kind, but says too little
            names = sorted(set(missing.values()))
            raise MissingNames(f"LayerSpec.sizes: a '{layer.kind}' layer must give {', '.join(map(repr, names))}: "
                               f"{'; '.join(f'family {f} reads {n!r}' for f, n in missing.items())}, and the layer "
                               f"gives {', '.join(sorted(n for n, _ in layer.sizes)) or 'no runtime name'}")
        if self.fallback is None:
            reasons.append(f"no family serves '{layer.kind}' here and the library declares no fallback"
                           if not reasons else "the library declares no fallback")
            return LayerResult(NO_MAPPINGS, None, (), tuple(reasons))
        runs = _apply(self.fallback, sizes, layer, tensor, num_blocks, fallback=True, salt=self._salt)
        if isinstance(runs, str):  # not even the fallback holds the page: no mapping beats a partial copy
            reasons.append(f"{self.fallback.name} (fallback): {runs}")
            return LayerResult(NO_MAPPINGS, None, (), tuple(reasons))
        return LayerResult(OPAQUE, self.fallback.name, runs, tuple(reasons))


def _taken_twice(cf, runs, later, sizes, layer, tensor, num_blocks) -> str:
    """Why the layer `cf` takes is not certainly its (''): a family tried after it takes the same
    tensor too and places the tensor's bytes in a block's page otherwise (FlashAttention's
    `(2, blocks, ...)` read as split NHD's `(blocks, 2, ...)` at two blocks), so the preference
    alone chose between two readings of one tensor. Two that place them alike and name their
    elements apart are `layoutalg check`'s to find (`recognition`: the runtime reads no element)."""
    mine = [tuple(v.placing for v in m.tensors) for m in runs]
    for other in later:
        theirs = _apply(other, sizes, layer, tensor, num_blocks)
        if isinstance(theirs, str):
            continue
        if [tuple(v.placing for v in m.tensors) for m in theirs] != mine:
            return (f"{cf.name} and {other.name} both take this tensor and place its bytes in a block's page "
                    f"differently: no runtime name the layer gives tells them apart, so neither reading is certain "
                    f"(a guard one requires and the other refuses would)")
    return ""


class _Why(str):
    """Why a family does not hold a layer; `missing`: the runtime name it read and the layer lacks."""

    def __new__(cls, text: str, missing: str | None = None):
        out = super().__new__(cls, text)
        out.missing = missing
        return out


def _check_arguments(layer, tensor, parallel, num_blocks) -> int | None:
    for value, cls, what in ((layer, LayerSpec, "layer"), (parallel, ParallelConfig, "parallel")):
        if not isinstance(value, cls):
            raise ConfigError(f"Deriver.derive: {what} must be a {cls.__name__}, got {type(value).__name__}")
    if tensor is not None and not isinstance(tensor, TensorLayout) and not (
            type(tensor) is tuple and tensor and all(isinstance(t, TensorLayout) for t in tensor)):
        raise ConfigError(f"Deriver.derive: tensor must be a TensorLayout, a tuple of them (a layer of several "
                          f"tensors) or None, got {type(tensor).__name__}")
    if num_blocks is None or type(num_blocks) is int and num_blocks >= 0:
        return num_blocks
    return as_int(num_blocks, "Deriver.derive: num_blocks", minimum=0)


def _apply(cf: CompiledFamily, sizes: dict, layer: LayerSpec, tensor: TensorLayout | None, num_blocks,
           fallback: bool = False, salt: bytes = b""):
    """Every rank's mappings where `cf` describes the layer exactly, else why not (a string)."""
    if cf.tensor_dims and (not isinstance(tensor, TensorLayout) or len(tensor.shape) != cf.tensor_dims + 1):
        return f"needs a KV tensor of {cf.tensor_dims + 1} dimensions" + (
            f", got a list of {len(tensor)} tensors" if isinstance(tensor, tuple) else "")
    try:
        inst = cf.evaluate(sizes)
        views = cf.tensor_views(inst) if isinstance(cf, CompiledPage) else \
            (TensorView("kv", 0, inst.tensor_shape, inst.tensor_strides, inst.element, outer=cf.tensor_outer),) \
            if inst.tensor_shape else ()
    except GuardFailed as e:
        return _Why(str(e), getattr(e, "name", None))
    if views and views[0].segments > MAX_STRETCHES:
        return (f"its tensor holds the page in {views[0].segments} stretches apart (dims before the block), more "
                f"than the {MAX_STRETCHES} a copy takes")
    if isinstance(tensor, TensorLayout) and len(views) > 1 and raw_page(tensor, num_blocks, layer.page_size_bytes):
        one = stacked(views, tensor, num_blocks, layer.page_size_bytes)  # its views stacked before the block?
        views = (one,) if isinstance(one, TensorView) else views  # (else `_mismatch_views` says why not)
    why = (_mismatch_views(views, tensor, num_blocks, layer.page_size_bytes) if isinstance(cf, CompiledPage) else
           _mismatch(inst, cf, layer, tensor, num_blocks)) or misfit(inst, layer.page_size_bytes,
                                                                          sizes["tp"] * sizes["pcp"])
    box = () if fallback else getattr(inst, "local_form", None)
    if not why and not views and isinstance(tensor, TensorLayout):
        views, why = as_it_lies(tensor, num_blocks, layer.page_size_bytes, in_order=not fallback, box=box)
    if why:
        return why
    try:
        runs = lower(inst, cf.layout_id)
    except TilingError as e:  # the spec does not tile at these sizes: fail closed, say why
        return str(e)
    tensors = tensor if isinstance(tensor, tuple) else (tensor,) if isinstance(tensor, TensorLayout) else ()
    if len(tensors) == len(views):  # each view with the element type its tensor names
        views = tuple(v._replace(dtype=t.dtype) for v, t in zip(views, tensors))
    named = names_data(inst)
    fmt = format_id(cf.layout_id, inst, named, sizes, _dtypes(tensors),
                    () if named else (layer.kind,) + _physical(tensors))
    if not named and not tensors:  # where a rank's bytes lie is its tensor's word, and none was given
        fmt = _unread(fmt, salt, (cf.name, layer, num_blocks, sorted(sizes.items())))
    reads = (box,) if tensor is None and not views and not fallback else ()  # what a plan's tensor must be
    return tuple(replace(m, tensors=views, format_id=fmt, reads=reads) for m in runs)


def block_tensor(shape: tuple, strides: tuple, element: int, outer: int, blocks: int, page: int) -> TensorLayout:
    """The engine tensor of `blocks` blocks a view describes (`shape` and `strides` in elements after
    any `outer` dims, `page` bytes a block): the block dim after the outer dims, a block's stretch
    its stride, the outer dims stepping over every block's stretch.

    Examples:
        >>> block_tensor((2, 4, 8), (32, 8, 1), 2, 1, 3, 128)
        TensorLayout(shape=(2, 3, 4, 8), stride=(96, 32, 8, 1), element_size=2, dtype='')
    """
    step = page // element // prod(shape[:outer])
    return TensorLayout(tuple(shape[:outer]) + (blocks,) + tuple(shape[outer:]),
                        tuple(s * blocks for s in strides[:outer]) + (step,) + tuple(strides[outer:]), element)


def as_it_lies(t: TensorLayout, num_blocks, page: int, in_order: bool, box: tuple | None = ()) -> tuple[tuple, str]:
    """(views, why not) for a family whose spec names no tensor dims (MLA's latent rows, the
    opaque fallback) given one tensor: it reads block `b`'s page as the bytes of `t[b]` in
    memory, so `t` must be block first with each block one dense page. A certified family
    reads them in the tensor's own index order (`in_order`: its dims after the block
    row-major), and where its local index `box` is known (`Instance.local_form`), only if
    the tensor's dims group the box's or the box's group the tensor's (`_cuts`): MLA's
    `(t, b)` box takes `(blocks, block_size, head_size)` and flat `(blocks, page)` bytes, but
    not `(blocks, head_size, block_size)`, whose tokens are not its rows. A page of regions
    (`box` None: no one box) takes only flat `(blocks, page)` elements, as no tensor's dims
    group regions of other rows (quantised split KV: the data, then the scales). The fallback takes
    them in any order, its format covering the strides (`_physical`). The view (the tensor as given) lets a copy
    plan refuse another tensor of one size. The fallback gets no view, as before, where the
    tensor is no such block-first page: a copy plan then refuses it.

    Examples:
        >>> as_it_lies(TensorLayout((3, 4, 6), (24, 6, 1), 2), 3, 48, True)[0][0].strides
        (6, 1)
        >>> as_it_lies(TensorLayout((3, 4, 6), (24, 1, 4), 2), 3, 48, True)[1]
        'KV tensor dimension 2 has stride 4, expected 1 (elements): the family reads a block as its elements in row-major order (its spec names no tensor dims)'
        >>> as_it_lies(TensorLayout((3, 4, 6), (24, 1, 4), 2), 3, 48, False)[0][0].strides
        (1, 4)
    """
    def no(why):
        return (), why if in_order else ""
    if not t.shape:
        return no("the KV tensor has no block dimension")
    if num_blocks is not None and t.shape[0] != num_blocks:
        return no(f"KV tensor dimension 0 (block) has {t.shape[0]} blocks, the layer {num_blocks}")
    held = prod(t.shape[1:]) * t.element_size
    if held != page:
        return no(f"KV tensor holds {held} bytes per block but the page is {page}")
    gap = dense_gap(t.shape, t.stride, row_major=in_order)
    if gap:
        return no(f"KV tensor dimension {gap.dim} has stride {gap.stride}, expected {gap.expected} (elements): the family "
                  f"reads a block as its elements in row-major order (its spec names no tensor dims)")
    if box is None and len([n for n in t.shape[1:] if n != 1]) > 1:
        return no(f"KV tensor dims {tuple(t.shape[1:])} are not the family's page of regions, which names no tensor "
                  f"dims: it reads a given tensor only as flat (blocks, page) elements")
    if box:
        _, element, dims = box  # the local index box: (base, element bytes, ((extent, stride), ...))
        mine = _cuts(zip(t.shape[1:], (s * t.element_size for s in t.stride[1:])))
        spec = _cuts((e, c * element) for e, c in dims)
        if not (mine <= spec or spec <= mine):
            return no(f"KV tensor dims {tuple(t.shape[1:])} ({t.element_size}-byte elements) cut a block at bytes "
                      f"{sorted(mine)}, the family's local index box {tuple(e for e, _ in dims)} "
                      f"({element}-byte elements) at {sorted(spec)}: neither groups the other, so the tensor's "
                      f"dims are not the spec's indices (its spec names no tensor dims)")
    return (TensorView("kv", 0, tuple(t.shape[1:]), tuple(t.stride[1:]), t.element_size),), ""


def _cuts(dims) -> set:
    """Where the dims of a dense block end, in bytes (extent times byte stride, dims of one
    element aside): one factorisation groups another's dims exactly where its cuts are
    among the other's.

    Examples:
        >>> _cuts([(16, 1152), (576, 2)]) == _cuts([(16, 1152), (1152, 1)]) == {1152, 18432}
        True
    """
    return {e * s for e, s in dims if e != 1}


@named_tuple
class Gap:
    """Where a block is not one dense stretch: the dim, its stride, the stride it needs (elements)."""
    dim: int
    stride: int
    expected: int


def dense_gap(shape: tuple, stride: tuple, row_major: bool = False) -> Gap | None:
    """The first dim after the block (dim 0) keeping a block from being one dense stretch of
    memory, as (dim, its stride, the stride expected), or None. Dense in some order (sorted by
    stride, each dim steps over exactly those below it), or with `row_major` in index order,
    the last dim fastest. Dims of one element have no stride to misread; a block of no
    element has no memory to misread.

    Examples:
        >>> dense_gap((3, 4, 6), (24, 1, 4)), dense_gap((3, 4, 6), (24, 1, 4), row_major=True)
        (None, Gap(dim=2, stride=4, expected=1))
    """
    dims = [d for d in range(1, len(shape)) if shape[d] != 1]
    if any(shape[d] == 0 for d in dims):
        return None
    want = 1
    for d in reversed(dims) if row_major else sorted(dims, key=lambda d: (stride[d], shape[d], d)):
        if stride[d] != want:
            return Gap(d, stride[d], want)
        want *= shape[d]
    return None


def _physical(tensors: tuple) -> tuple:
    """How the tensors lay a block out (dims after the block, their strides): where the
    canonical page is the rank's bytes as they lie (the opaque fallback), an NHD and an HND
    tensor of one size are two formats."""
    return tuple((t.shape[1:], t.stride[1:], t.element_size) for t in tensors)


_UNREAD = "unread-"


def _unread(fmt: str, salt: bytes, derivation) -> str:
    """A format id for a page whose bytes lie as the layer's tensors say, derived without them
    (the opaque fallback from sizes alone): nothing tells two engines' placements apart (an NHD
    and an HND engine of one configuration), so the id is the deriving `Deriver`'s own (`salt`),
    one for one `derivation` however often it is derived again. Derived with the tensors, a page
    has a format that follows its bytes (`_physical`) and is found again by any process."""
    import hmac
    return f"{fmt.split('.')[0]}.{_UNREAD}{hmac.new(salt, repr(derivation).encode(), 'sha256').hexdigest()[:12]}"


def unread(fmt: str) -> bool:
    """Whether a format id is of a page derived without the tensors that say where its bytes lie.

    Examples:
        >>> unread("lal3-0.unread-abc"), unread("lal3-0.abc.def"), unread("")
        (True, False, False)
    """
    parts = fmt.split(".")
    return len(parts) > 1 and parts[1].startswith(_UNREAD)


def _dtypes(tensors: tuple) -> tuple:
    """The element types a layer's tensors name: bf16 and fp16 bytes are not one format."""
    return tuple(t.dtype for t in tensors) if any(t.dtype for t in tensors) else ()


def names_data(inst) -> bool:
    """Whether an instance (or a page) names the engine's elements by its canonical indices at
    its configuration: its `agnostic` claim holds there, or its case was shown to name them
    (`claims.names_data`). Its format is then its canonical numbers; else also its sizes."""
    return bool(inst.agnostic or inst.names_data)


def format_id(layout_id: str, inst, semantic: bool = True, sizes: dict | None = None, dtypes: tuple = (),
              physical: tuple = ()) -> str:
    """The concrete page format of an instance (or a page of them): the family's format and
    the numbers of its canonical layout (`Instance.canonical_form`). An instance whose
    canonical indices are not shown to name the engine's elements (`semantic` False, see
    `names_data`: the opaque fallback, whose page is its ranks' pages side by side; a case
    whose shard map deals rows by dcp) names where a rank put a byte, not what the byte is,
    so its format also covers the configuration (`sizes`): 2 x 256 bytes and 1 x 512 bytes
    are two formats of one size. Where the layer's tensors name their element
    types (`dtypes`), those too: bf16 and fp16 bytes are not one format; they are a part of
    their own (`LAYOUT.FORM.TYPES`), so pages of two configurations can be told to hold one
    element type without their forms being equal (`element_part`).

    Examples:
        >>> format_id("lal3-0", ()) == format_id("lal3-0", ()) != format_id("lal3-1", ())
        True
        >>> element_part(format_id("lal3-0", (), dtypes=("torch.bfloat16",))) != element_part(format_id("lal3-0", ()))
        True
    """
    import hashlib
    if isinstance(inst, Page):
        forms = tuple(i.canonical_form for _, i in inst.regions) + tuple(p.canonical_form for p in inst.canonical_pads)
    else:
        forms = getattr(inst, "canonical_form", ())
    key = repr((forms, getattr(inst, "canonical_page", 0)) if semantic else
               (forms, sorted((sizes or {}).items()), physical))
    fmt = f"{layout_id}.{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    return f"{fmt}.{hashlib.sha256(repr(dtypes).encode()).hexdigest()[:8]}" if dtypes else fmt


def form_part(fmt: str) -> str:
    """A format id without its element types: `LAYOUT.FORM`."""
    return ".".join(fmt.split(".")[:2])


def element_part(fmt: str) -> str:
    """What a format id says of the element types (after `LAYOUT.FORM`), '' where nothing."""
    return ".".join(fmt.split(".")[2:])


_DERIVED = ("tp", "pcp", "dcp", "interleave", "total_heads", "heads", "block_size", "head_size", "dtype_bytes",
            "page_size", "per_token_head_quant", "compress_ratio")
"""The built-in runtime names (`params.TABLE`), each filled from a field of the layer or the group."""


def _sizes(layer: LayerSpec, tensor: TensorLayout | None, parallel: ParallelConfig) -> dict:
    return {
        **dict(layer.sizes),
        "tp": parallel.tp, "pcp": parallel.pcp, "dcp": parallel.dcp, "interleave": parallel.interleave,
        **({} if parallel.total_kv_heads is None else {"total_heads": parallel.total_kv_heads}),
        "heads": layer.num_kv_heads,
        "block_size": layer.block_size, "head_size": layer.head_size,
        "dtype_bytes": tensor.element_size if isinstance(tensor, TensorLayout) else layer.dtype_bytes,
        "page_size": layer.page_size_bytes if layer.page_size_bytes is not None else 0,
        "per_token_head_quant": int(bool(layer.per_token_head_quant)),
        "compress_ratio": layer.compress_ratio,
    }


def _mismatch(inst: Instance, cf: CompiledFamily, layer: LayerSpec, tensor: TensorLayout | None, num_blocks) -> str:
    """Why the instance does not describe this layer's tensor ('' when it does): a family
    that reads the tensor must find its shape, strides and page in each block. (That the
    layout is the page and the grid the group is `compiled.misfit`, for every family.)
    Dims before the block dim (`cf.tensor_outer`) are matched by extent: their strides are
    the tensor's, held apart by `torch_copy` where bytes move."""
    page, names, k = layer.page_size_bytes, cf.tensor, cf.tensor_outer
    if inst.tensor_shape:  # the family reads a tensor: recognise it by shape and strides
        if tensor is None:
            return "no KV tensor to recognise"
        blocks = num_blocks if num_blocks is not None else (tensor.shape[k] if len(tensor.shape) > k else None)
        expected = inst.tensor_shape[:k] + (blocks,) + inst.tensor_shape[k:]
        dims = ", ".join(names[:k] + ("block",) + names[k:])
        if tensor.shape != expected:
            return f"KV tensor shape {tensor.shape} is not {expected} = ({dims})"
        for dim, (name, want, got) in enumerate(zip(names[k:], inst.tensor_strides[k:], tensor.stride[k + 1:]),
                                                start=k + 1):
            if want != got:
                return f"KV tensor dimension {dim} ({name}) has stride {got}, expected {want} (elements)"
        held = prod(inst.tensor_shape) * tensor.element_size
        if held != page:
            return f"KV tensor holds {held} bytes per block but the page is {page}"
    return ""


def _mismatch_views(views: tuple, tensors, num_blocks, page: int) -> str:
    """Why a page's tensors are not the ones its family views ('' when they are, or when the
    layer gives none: then its kind and sizes alone select the family, and copy plans check
    the tensors they are given against the mapping's views)."""
    if tensors is None:
        return ""
    names = ", ".join(v.name for v in views)
    if not views:
        return ""  # a page whose spec names no tensors is read from its sizes alone
    if isinstance(tensors, TensorLayout):
        if len(views) > 1 or views[0].element == 1 and len(tensors.shape) == 2:  # no view of the page: its bytes
            why = raw_page(tensors, num_blocks, page)
            if why and len(views) > 1:  # (a stack of the views is one view of an outer dim: not here)
                why = f"{why}; nor are its views stacked before the block: it {stacked(views, tensors, num_blocks, page)}"
            return f"the page is viewed by {len(views)} tensor(s) ({names}) and one tensor {why}" if why else ""
        # a page one tensor views whole (quantised KV: data, scales and padding in its rows)
        why = view_mismatch(views[0], tensors.shape, tensors.stride, tensors.element_size, num_blocks)
        if not why and (views[0].offset, views[0].bytes_per_block) != (0, page):
            why = (f"it views bytes [{views[0].offset}, {views[0].offset + views[0].bytes_per_block}) of a "
                   f"block but the page is {page} bytes: one tensor must hold the whole page")
        return f"tensor ({views[0].name}): {why}" if why else ""
    if len(tensors) != len(views):
        return f"the layer gives {len(tensors)} tensor(s) but the page is viewed by {len(views)} ({names})"
    for i, (v, t) in enumerate(zip(views, tensors)):
        why = view_mismatch(v, t.shape, t.stride, t.element_size, num_blocks)
        if why:
            return f"tensor {i} ({v.name}): {why}"
    return ""


def stacked(views: tuple, t: TensorLayout, num_blocks, page: int):
    """One tensor holding a page's views stacked before the block, as a `TensorView` of its outer
    dim (one stretch of the page a view), else why not (a string). vLLM v0 allocates a layer's
    key and value caches as one `(2, num_blocks, ...)` buffer: slice i holds view i of every
    block, one dense stretch a block. The views must follow one another from byte 0 in equal
    stretches (the slices of one tensor are alike), each of the tensor's elements.

    Examples:
        >>> kv = (TensorView("key", 0, (2, 4), (4, 1), 2), TensorView("value", 16, (4, 2), (2, 1), 2))
        >>> stacked(kv, TensorLayout((2, 5, 8), (40, 8, 1), 2), 5, 32)
        TensorView(name='key|value', offset=0, shape=(2, 8), strides=(8, 1), element=2, dtype='', outer=1)
        >>> stacked(kv, TensorLayout((5, 2, 8), (16, 8, 1), 2), 5, 32)
        'has shape (5, 2, 8), not (2, 5, ...): the 2 views, then the blocks'
    """
    n, e = len(views), t.element_size
    if len(t.shape) < 3 or t.shape[0] != n or num_blocks is not None and t.shape[1] != num_blocks:
        return f"has shape {t.shape}, not ({n}, {'blocks' if num_blocks is None else num_blocks}, ...): the {n} " \
               f"views, then the blocks"
    if page % n or any((v.offset, v.bytes_per_block) != (i * (page // n), page // n) for i, v in enumerate(views)):
        return f"stacks {n} slices alike, but the views ({', '.join(v.name for v in views)}) are not {n} equal " \
               f"stretches of the {page}-byte page, one after another"
    if any(v.element not in (e, 1) and e != 1 for v in views) or prod(t.shape[2:]) * e != page // n:
        return f"holds {prod(t.shape[2:]) * e} bytes a slice of a block ({e}-byte elements), not a {page // n}-byte view"
    gap = dense_gap(t.shape[1:], t.stride[1:])
    if gap:
        return f"has stride {gap.stride} in dimension {gap.dim + 1}, expected {gap.expected}: a slice of a block is " \
               f"no dense stretch"
    return TensorView("|".join(v.name for v in views), 0, (n,) + tuple(t.shape[2:]),
                      (page // n // e,) + tuple(t.stride[2:]), e, t.dtype, outer=1)


def raw_page(t: TensorLayout, num_blocks, page: int) -> str:
    """Why `t` is not a page's raw bytes ('' when it is): bytes (one-byte elements), the block
    dim first, each block one dense `page`-byte stretch of memory, the blocks apart. It is how
    vLLM allocates a Mamba layer's pages (`(num_blocks, 1, 1, page bytes)` int8) and how a copy
    plan takes a page of regions in one tensor (`torch_copy.page_bytes`): the spec's views say
    where each region lies in it.

    Examples:
        >>> raw_page(TensorLayout((3, 1, 1, 96), (96, 96, 96, 1), 1), 3, 96)
        ''
        >>> raw_page(TensorLayout((3, 48), (48, 1), 2), 3, 96)
        'is of 2-byte elements, not the raw bytes (uint8 or int8) of the page'
    """
    if t.element_size != 1 or t.dtype not in ("", "torch.uint8", "torch.int8"):  # (as copy plans take raw bytes)
        what = f"{t.element_size}-byte" if t.element_size != 1 else t.dtype
        return f"is of {what} elements, not the raw bytes (uint8 or int8) of the page"
    blocks = t.shape[0] if t.shape else None
    if len(t.shape) < 2 or num_blocks is not None and blocks != num_blocks:
        return f"has shape {t.shape}, not ({'blocks' if num_blocks is None else num_blocks}, ...) of the page's bytes"
    if prod(t.shape[1:]) != page:
        return f"holds {prod(t.shape[1:])} bytes a block (shape {t.shape}), not the {page}-byte page"
    gap = dense_gap(t.shape, t.stride)
    if gap:
        return f"has stride {gap.stride} in dimension {gap.dim}, expected {gap.expected}: a block is no dense page"
    if blocks > 1 and t.stride[0] < page:
        return f"has block stride {t.stride[0]} bytes, less than the {page}-byte page"
    return ""


def view_mismatch(v: TensorView, shape: tuple, stride: tuple, element: int, num_blocks=None) -> str:
    """Why a tensor of `shape` and `stride` (elements) is not view `v` ('' when it is). The
    strides of dims before the block dim (`v.outer`) are the tensor's own: `torch_copy`
    checks that they keep its segments apart."""
    k = v.outer
    blocks = num_blocks if num_blocks is not None else (shape[k] if len(shape) > k else None)
    expected = tuple(v.shape[:k]) + (blocks,) + tuple(v.shape[k:])
    if tuple(shape) != expected:
        return f"shape {tuple(shape)} is not {expected} ({'the outer dims, ' if k else ''}blocks, then the view's dims)"
    if element != v.element:
        return f"elements of {element} bytes, expected {v.element}"
    for dim, (want, got, extent) in enumerate(zip(v.strides[k:], stride[k + 1:], shape[k + 1:]), start=k + 1):
        if want != got and extent != 1:  # a dim of one element has no stride to misread
            return f"dimension {dim} has stride {got}, expected {want} (elements)"
    return ""


_COMPILED: dict[str, tuple] = {}
"""Per folder: (the times of the files it was made from, `sources.stats`, and when they were
recorded; or None, and the sources it was compiled from, `library.sources`; its spec files;
its families)."""


def compiled_library(spec_dir: str | None = None) -> dict[str, CompiledFamily]:
    """Every family of a library, compiled once per process (or loaded precompiled), and again
    whenever a file it was compiled from, or a file of its folder, changes: a spec edited
    between two `Deriver`s of one process is never served stale."""
    from ..compile import cache
    from .._resources import specs_folder
    folder = os.path.realpath(os.fspath(spec_dir or specs_folder()))
    hit = _COMPILED.get(folder)
    if hit is not None and _still(hit, folder):
        return hit[3]
    listing = files.folder_listing(folder)
    recalled = cache.recall("library", folder) if os.path.isdir(folder) else None
    out = _from_entries(recalled.data) if recalled is not None else None
    if out is not None:  # by the folder's index: nothing hashed, nothing parsed
        return _held(folder, ((recalled.sig, recalled.at), (), listing, out))
    # the disk cache is keyed by a folder's spec files: a path that is no folder (a file, nothing)
    # has none, and would be served any empty folder's entry; it is read (or refused) as given
    key, data, entry = cache.load("library", folder, with_files=True) if os.path.isdir(folder) else (None, None, None)
    read = files.snapshot(entry[0]) if data is not None else (None, ())
    if data is not None and read[0] == entry[1]:  # the files as read now are those the entry was made from
        out, made_from = _from_entries(data), read[1]
    if out is None:
        from ..compile.codegen import compile_named
        from ..dsl.library import load_default, sources
        lib = load_default(folder)
        out, made_from = {name: compile_named(lib, name) for name in lib.families}, sources(lib)
        if key is not None:
            cache.store("library", key, [p for p, _ in made_from], [cf.to_json() for cf in out.values()],
                        made_from, folder)
    if key is not None:
        cache.remember("library", folder, key, [p for p, _ in made_from])
    return _held(folder, (None, made_from, listing, out))


def _held(folder: str, entry: tuple) -> dict:
    if len(_COMPILED) >= 8:
        _COMPILED.pop(next(iter(_COMPILED)))
    _COMPILED[folder] = entry
    return entry[3]


def _still(hit: tuple, folder: str) -> bool:
    """Whether a library this process holds may be served again: the files it was made from
    have the times recorded (and those vouch for them), else the bytes it was compiled from."""
    if hit[0] is not None:
        (sig, at), listing = hit[0], hit[2]
        return (listing == files.folder_listing(folder) and files.settled(sig, at)
                and files.stats(p for p, *_ in sig) == sig)
    return files.unchanged(hit[1], folder, hit[2])


def _from_entries(data: list) -> dict | None:
    """The families of a cache entry, or None where one is not of the form `store` admitted
    (an entry of another layoutalg that the key did not tell apart): the library is compiled."""
    try:
        return {d["name"]: from_entry(d, trusted=True) for d in data}
    except Exception:  # noqa: BLE001 - whatever a damaged entry raises, the library is compiled afresh
        return None


def forget_compiled() -> None:
    """Drop the compiled libraries this process holds: the next `compiled_library` reads the
    on-disk cache (or compiles) again."""
    _COMPILED.clear()
