"""What the runtime takes and gives: a layer's sizes (`LayerSpec`), the parallel configuration
(`ParallelConfig`), the engine's tensor (`TensorLayout`) and a layer's result (`LayerResult`).

Each is checked where it is built: a value that is not an integer, or a parallel size below 1,
raises `ConfigError` naming the field, so the memoised path never re-checks them.
"""
from __future__ import annotations

import operator

from .. import params
from ..errors import ConfigError
from ..mapping import CanonicalPageMapping
from ..record import record
from ..verdicts import Reason, Word


class Outcome(Word):
    """How a layer's mappings were obtained (`LayerResult.result`): by a `certified` family, by
    the `opaque` fallback (the page stored whole), or none (`no_mappings`: no family applies;
    `omitted`: the layer is not one the runtime maps). A `str`: each reads as its word."""

    CERTIFIED = "certified"
    OPAQUE = "opaque"
    NO_MAPPINGS = "no_mappings"
    OMITTED = "omitted"


CERTIFIED, OPAQUE, NO_MAPPINGS, OMITTED = Outcome.CERTIFIED, Outcome.OPAQUE, Outcome.NO_MAPPINGS, Outcome.OMITTED


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


_PARALLEL_SIZES = ("tp", "total_kv_heads", "pcp", "dcp", "interleave", "world_size", "pp")


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
    pp: int = 1  # pipeline stages: a stage grid's page (one holding a stage's layers) spans tp * pcp * pp ranks

    def __post_init__(self):
        # A parallel size below 1 has no meaning (the reference divides by dcp and
        # interleave): an error, not a layer that fails closed.
        _check_ints(self, _PARALLEL_SIZES, minimum=1, optional=("world_size", "total_kv_heads"))
        # Past the proved domain a group is not a deployment but a typo, and a million
        # ranks would each get a mapping: refuse it by name.
        for field, name in (("tp", "tp"), ("pcp", "pcp"), ("dcp", "dcp"), ("interleave", "interleave"),
                            ("total_kv_heads", "total_heads"), ("pp", "pp")):
            why = None if getattr(self, field) is None else params.outside(name, getattr(self, field),
                                                                           *params.DOMAIN[name])
            if why:
                raise ConfigError(f"ParallelConfig.{field}: {why}")


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

    result: Outcome  # certified | opaque | no_mappings | omitted (a plain word is read as its Outcome)
    family: str | None
    mappings: tuple[CanonicalPageMapping, ...]
    reasons: tuple[Reason, ...] = ()  # why candidate families did not apply, each a sentence with its fields

    def __post_init__(self):
        object.__setattr__(self, "result", Outcome.of(self.result))  # a word outside the four is refused
        reasons = tuple(self.reasons) if isinstance(self.reasons, (tuple, list)) else self.reasons
        if not isinstance(reasons, tuple):
            raise TypeError(f"LayerResult.reasons: a tuple of Reasons, got {type(reasons).__name__}")
        object.__setattr__(self, "reasons", reasons)
        bare = [r for r in reasons if not isinstance(r, Reason)]
        if bare:  # a reason says which test refused (`Reason.check`): a bare sentence says it to no program
            raise TypeError(f"LayerResult.reasons: each is a Reason (`verdicts.Reason`), got "
                            f"{type(bare[0]).__name__} {bare[0]!r}")


_DERIVED = ("tp", "pcp", "dcp", "interleave", "total_heads", "heads", "block_size", "head_size", "dtype_bytes",
            "page_size", "per_token_head_quant", "compress_ratio")
"""The built-in runtime names (`params.TABLE`), each filled from a field of the layer or the group."""
