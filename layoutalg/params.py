"""The names a spec may use for the quantities the runtime knows: one table for all.

A spec never invents a runtime quantity: every free name in a family, grid or `let`
is one of these, a `let` it defined, a rank digit or a layout index. Each name has its
meaning, the bounds the prover quantifies over (`DOMAIN`) and the sample values that
`layoutalg check` and the prover's per-configuration steps start from (`SAMPLES`);
both come from this table and nowhere else.
"""
from __future__ import annotations

from .errors import ConfigError
from .record import named_tuple
from .verdicts import Check, Reason


@named_tuple
class Param:
    meaning: str
    lo: int          # prover bounds, inclusive
    hi: int
    samples: tuple   # values `check` enumerates (page_size: fitted per configuration)
    default: int | None = None  # what a layer that does not give the name gets (declared names only)


TABLE = {
    "tp": Param("tensor-parallel ranks", 1, 1024, (1, 2, 4)),
    "pcp": Param("prefill context-parallel ranks", 1, 64, (1, 2)),
    "dcp": Param("decode context-parallel ranks (they subdivide TP)", 1, 64, (1, 2)),
    "interleave": Param("tokens per context-parallel chunk", 1, 1024, (1, 2)),
    "total_heads": Param("KV heads of the whole model", 1, 1024, (1, 2, 4)),
    "heads": Param("KV heads this rank holds (the layer spec's num_kv_heads)", 1, 1024, (1, 2)),
    "block_size": Param("tokens per block", 1, 4096, (4, 6)),
    "head_size": Param("elements per head", 1, 4096, (4, 3)),
    "dtype_bytes": Param("bytes per element (the KV tensor's element size when there is one)", 1, 8, (1, 2)),
    "page_size": Param("bytes of one block of this layer on one rank (unpadded)", 1, 1 << 31, ()),
    "per_token_head_quant": Param("1 when K/V carry per-token-head scales, else 0", 0, 1, (0,)),
    "compress_ratio": Param("tokens per stored state (MLA compression; 1 when none)", 1, 64, (1,)),
    "pp": Param("pipeline stages whose ranks share one page (a stage grid: `world tp * pcp * pp`)", 1, 64, (1, 2)),
}

ROLES = {
    "tp": "given group moves", "pcp": "given group moves", "dcp": "given group moves",
    "interleave": "given group moves", "pcp_replicas": "given", "total_heads": "group", "heads": "moves",
    "pp": "moves",
}
"""The one table of the parallel names, each with its roles: `given` by a parallel configuration
(`CONFIG_NAMES`), describing the worker group (`PARALLEL`), changing with the group
(`MOVES_WITH_THE_GROUP`). `pp` a `Configuration` takes as well where asked (`also`)."""


def _having(role: str) -> tuple:
    return tuple(n for n, r in ROLES.items() if role in r.split())


PARALLEL = _having("group")
"""The names that describe the worker group rather than one layer."""

MOVES_WITH_THE_GROUP = _having("moves")
"""Runtime names that change with the parallel configuration for one and the same model: an
`agnostic` canonical page depends on none of them."""

RUNTIME = {n: p.meaning for n, p in TABLE.items()}
"""Every runtime name with its meaning, in a fixed order."""

NAMES = tuple(TABLE)

DOMAIN = {n: (p.lo, p.hi) for n, p in TABLE.items()}
"""The declared parameter domain the prover quantifies over (inclusive bounds)."""

SAMPLES = {n: p.samples for n, p in TABLE.items() if n != "page_size"}
"""The configurations `check` enumerates; page_size is fitted to each (see `verify.samples.fitted_instance`)."""

CHECK_PAGE_LIMIT = 1 << 22
"""The largest page (bytes) `check` enumerates byte by byte; a spec beyond it is refused."""


def outside(name: str, value: int, lo: int, hi: int) -> Reason | None:
    """None when `lo <= value <= hi`, else the reason every domain check gives: past a name's
    declared bounds nothing is proved.

    Examples:
        >>> outside("tp", 2, 1, 1024) is None
        True
        >>> outside("tp", 4096, 1, 1024)
        Reason('domain', 'tp = 4096 is outside the proved domain [1, 1024]', name='tp', expected=(1, 1024), actual=4096)
    """
    if lo <= value <= hi:
        return None
    return Reason(Check.DOMAIN, f"{name} = {value} is outside the proved domain [{lo}, {hi}]", name=name,
                  expected=(lo, hi), actual=value)


def in_domain(sizes: dict) -> Reason | None:
    """None when every built-in size lies inside `DOMAIN`, else the reason of the first that does not.

    Examples:
        >>> in_domain({"tp": 2, "dcp": 1}) is None
        True
        >>> in_domain({"tp": 4096})
        Reason('domain', 'tp = 4096 is outside the proved domain [1, 1024]', name='tp', expected=(1, 1024), actual=4096)
    """
    return next((why for n, v in sizes.items() if n in DOMAIN for why in [outside(n, v, *DOMAIN[n])] if why), None)


def default_head_size(serves: str) -> int:
    """The head size a command takes when none is given: a DeepSeek MLA latent row (512
    latent and 64 rope elements) for `mla`, else 128.

    Examples:
        >>> default_head_size("mla"), default_head_size("attention")
        (576, 128)
    """
    return 576 if serves == "mla" else 128


def configuration(*, tp: int, heads: int, block_size: int, head_size: int, dtype_bytes: int,
                  total_heads: int | None = None, pcp: int = 1, dcp: int = 1, interleave: int = 1,
                  page_size: int | None = None, per_token_head_quant: int = 0, compress_ratio: int = 1,
                  **declared) -> dict:
    """One layer on one worker group as the sizes a family is evaluated at: every built-in
    runtime name (total_heads and page_size only where known: a page is fitted to the rest,
    `compile.compiled.fitted_page`) and the names a spec declares, as given.

    Examples:
        >>> c = configuration(tp=2, heads=4, block_size=16, head_size=128, dtype_bytes=2)
        >>> (c["tp"], c["pcp"], c["compress_ratio"], "total_heads" in c, "page_size" in c)
        (2, 1, 1, False, False)
        >>> configuration(tp=1, heads=1, block_size=4, head_size=8, dtype_bytes=1, aiter_kv=1)["aiter_kv"]
        1
    """
    return {"tp": tp, "pcp": pcp, "dcp": dcp, "interleave": interleave,
            **({} if total_heads is None else {"total_heads": total_heads}), "heads": heads,
            "block_size": block_size, "head_size": head_size, "dtype_bytes": dtype_bytes,
            **({} if page_size is None else {"page_size": page_size}),
            "per_token_head_quant": int(per_token_head_quant), "compress_ratio": compress_ratio, **declared}


def group(sizes: dict, reads: set | frozenset) -> int:
    """The ranks the runtime runs for a layer of a family that reads the names `reads`: its worker
    group, tp * pcp; for a stage grid's family (one that reads `pp`: a page holding a pipeline
    stage's layers), every stage's group, tp * pcp * pp, stage-major (rank = stage * tp * pcp + r).

    Examples:
        >>> group({"tp": 2, "pcp": 1, "pp": 4}, {"tp"}), group({"tp": 2, "pcp": 1, "pp": 4}, {"tp", "pp"})
        (2, 8)
    """
    return sizes["tp"] * sizes["pcp"] * (sizes.get("pp", 1) if "pp" in reads else 1)


CONFIG_NAMES = _having("given")
"""The names a parallel configuration gives (`--store tp=2,dcp=1`, a reshard's pair)."""

DEFAULTS = {n: 0 if n == "pcp_replicas" else 1 for n in CONFIG_NAMES}
"""What a configuration that does not give a name has (`pp` too: one stage)."""


def _check(said: str, name: str, value) -> None:
    """A `ConfigError` unless `value` may be `name`'s in a configuration (`said`: as the user wrote it)."""
    if name not in ROLES and name not in TABLE:
        raise ConfigError(f"configuration {said!r}: {name!r} is no name of a configuration (one of "
                          f"{', '.join(CONFIG_NAMES)}, pp or a runtime name)")
    if type(value) is not int:  # (a bool is no size)
        raise ConfigError(f"configuration {said!r}: {name} must be a whole number, got {value!r}")
    lo, hi = DOMAIN.get(name, (0, None))  # (pcp_replicas, in no table of the runtime's: at least 0)
    if value < lo:
        raise ConfigError(f"configuration {said!r}: {name} = {value}, expected at least {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"configuration {said!r}: {outside(name, value, lo, hi)}")


class Configuration(dict):
    """A parallel configuration, the one shape it has between modules: a dict of the names it
    gives (`CONFIG_NAMES`; `pp`, and a runtime name such as a reshard side's `block_size`, where a
    caller takes them), each checked once, here: a whole number (not a bool), at least 1
    (`pcp_replicas` at least 0) and inside `TABLE`'s domain. The parallel names read as
    attributes, at `DEFAULTS` where not given; `text` is the configuration as every message
    prints it, and `Configuration.parse` (`parse_config`) reads it back; `split` is each pipeline
    stage's layer count where `pp=3+5` was given (pp is then 2), else ().

    Examples:
        >>> c = Configuration.parse("tp=4,pp=3+5", also=("pp",))
        >>> (c.tp, c.dcp, c.pcp_replicas, c.pp, c.split)
        (4, 1, 0, 2, (3, 5))
        >>> c.text
        'tp=4,pcp=1,dcp=1,interleave=1,pcp_replicas=0,pp=3+5'
        >>> c == {"tp": 4, "pcp": 1, "dcp": 1, "interleave": 1, "pcp_replicas": 0, "pp": 2}
        True
        >>> Configuration.parse(c.text, also=("pp",)) == c, c.without("pp").text
        (True, 'tp=4,pcp=1,dcp=1,interleave=1,pcp_replicas=0')
        >>> (Configuration(tp=2).text, Configuration(tp=2).pp)
        ('tp=2', 1)
        >>> Configuration(tp=True)
        Traceback (most recent call last):
        ...
        layoutalg.errors.ConfigError: configuration 'tp=True': tp must be a whole number, got True
        >>> Configuration(tp=2048)
        Traceback (most recent call last):
        ...
        layoutalg.errors.ConfigError: configuration 'tp=2048': tp = 2048 is outside the proved domain [1, 1024]
        >>> c["dcp"] = 0
        Traceback (most recent call last):
        ...
        layoutalg.errors.ConfigError: configuration 'tp=4,pcp=1,dcp=1,interleave=1,pcp_replicas=0,pp=3+5,dcp=0': dcp = 0, expected at least 1
    """

    def __init__(self, items=(), /, *, split: tuple = (), shown: str | None = None, **names):
        dict.update(self, items, **names)
        self._split = tuple(split) or (items.split if isinstance(items, Configuration) else ())
        said = self.text if shown is None else shown
        for name, value in self.items():
            _check(said, name, value)
        if self._split:
            if self.get("pp") != len(self._split) or any(type(c) is not int for c in self._split):
                raise ConfigError(f"configuration {said!r}: pipeline split {'+'.join(map(str, self._split))}: "
                                  f"one whole number a stage, for pp = {self.get('pp')} stages")
            if min(self._split) < 1:
                raise ConfigError(f"configuration {said!r}: pipeline split {'+'.join(map(str, self._split))}: stage "
                                  f"{self._split.index(min(self._split))} owns no layer; every stage owns at least one")

    def __setitem__(self, name, value):  # a value set later is checked as one given is
        _check(f"{self.text},{name}={value}", name, value)
        dict.__setitem__(self, name, value)

    def __reduce__(self):  # (pickled through the constructor, which checks it, with its split)
        return _configuration, (dict(self), self._split)

    def update(self, *items, **names):
        for name, value in dict(*items, **names).items():
            self[name] = value

    def setdefault(self, name, value=None):
        if name not in self:
            self[name] = value
        return self[name]

    def __ior__(self, other):
        self.update(other)
        return self

    @classmethod
    def parse(cls, text: str, also: tuple = (), shown: str | None = None) -> Configuration:
        """'tp=2,dcp=1,pcp=1' -> {'tp': 2, 'dcp': 1, 'pcp': 1, ...} with the others at `DEFAULTS`.
        Names in `also` (a reshard side's `block_size`, its `pp`) may be given too, and are absent
        unless given; `pp` is a number of stages (`pp=2`) or each stage's layer count (`pp=3+5`).
        Errors quote `shown` (the text as the user wrote it) where given.

        Examples:
            >>> Configuration.parse("tp=4,block_size=64", also=("block_size",))["block_size"]
            64
            >>> Configuration.parse("tp=2,tp=4")
            Traceback (most recent call last):
            ...
            layoutalg.errors.ConfigError: configuration 'tp=2,tp=4': tp is given twice
        """
        out, seen, split = dict(DEFAULTS), set(), ()
        said = text if shown is None else shown
        for item in filter(None, (t.strip() for t in text.split(","))):
            name, eq, value = item.partition("=")
            if not eq or name not in CONFIG_NAMES + tuple(also):
                raise ConfigError(f"configuration {said!r}: expected NAME=VALUE items with NAME one of "
                                  f"{', '.join(CONFIG_NAMES + tuple(also))}, got {item!r}")
            if name in seen:
                raise ConfigError(f"configuration {said!r}: {name} is given twice")
            seen.add(name)
            if name == "pp":
                counts = value.split("+")
                if not all(c.isascii() and c.isdigit() and len(c) <= 18 for c in counts):
                    raise ConfigError(f"configuration {said!r}: pp must be a number of stages (pp=2) or each "
                                      f"stage's layer count (pp=3+5), got {item!r}")
                split = tuple(map(int, counts)) if len(counts) > 1 else ()
                out[name] = len(split) or int(value)
                cls({name: out[name]}, split=split, shown=said)  # (its refusals in the order given)
                continue
            digits = value[1:] if value.startswith("-") else value  # a negative number is named below as too small
            if not (digits.isascii() and digits.isdigit() and len(digits) <= 18):  # (past 2**63 no size has meaning)
                raise ConfigError(f"configuration {said!r}: {name} must be a whole number, got {value!r}")
            out[name] = int(value)
            _check(said, name, out[name])
        if not seen:
            raise ConfigError(f"configuration {said!r}: no NAME=VALUE item (give at least tp, as 'tp=1')")
        return cls(out, split=split, shown=said)

    @property
    def split(self) -> tuple:
        return self._split if self._split and self.get("pp") == len(self._split) else ()

    @property
    def text(self) -> str:
        return self.joined(",")

    def joined(self, sep: str) -> str:
        """The items NAME=VALUE joined by `sep` (`text`: by ','), `pp` as its split where one was given."""
        split = "+".join(map(str, self.split))
        return sep.join(f"{k}={split if k == 'pp' and split else v}" for k, v in self.items())

    def without(self, *names: str) -> Configuration:
        """The configuration less `names`."""
        return Configuration({k: v for k, v in self.items() if k not in names},
                             split=() if "pp" in names else self.split)

    def copy(self) -> Configuration:
        return Configuration(self)

    def __eq__(self, other):
        same = dict.__eq__(self, other)
        return same and self.split == other.split if isinstance(other, Configuration) else same

    def __ne__(self, other):
        same = self.__eq__(other)
        return same if same is NotImplemented else not same

    __hash__ = None


def _configuration(items: dict, split: tuple) -> Configuration:
    return Configuration(items, split=split)


def _reading(name: str) -> property:
    return property(lambda self: self.get(name, DEFAULTS.get(name, 1)), doc=f"{name} ({RUNTIME.get(name, name)})")


for _name in (*CONFIG_NAMES, "pp"):
    setattr(Configuration, _name, _reading(_name))
del _name

parse_config = Configuration.parse
"""A configuration's text read (`Configuration.parse`)."""


def stage_layers(layers: int, pp: int = 1, split: tuple = ()) -> tuple:
    """The layers each pipeline stage owns, one `range` a stage: `split` gives each stage's
    count (an uneven split, as vLLM's VLLM_PP_LAYER_PARTITION), else vLLM's own rule: every
    stage `layers // pp`, and the remainder one each to the stages before the last.

    Post-conditions: the ranges are contiguous, in stage order, and cover range(layers) once.

    Examples:
        >>> stage_layers(8, 2)
        (range(0, 4), range(4, 8))
        >>> stage_layers(7, 3)
        (range(0, 2), range(2, 5), range(5, 7))
        >>> stage_layers(8, split=(3, 5))
        (range(0, 3), range(3, 8))
    """
    if split:
        counts = list(split)
        if any(c < 1 for c in counts):
            raise ConfigError(f"pipeline split {'+'.join(map(str, counts))}: stage {counts.index(min(counts))} owns "
                              f"no layer; every stage owns at least one")
        if sum(counts) != layers:
            raise ConfigError(f"pipeline split {'+'.join(map(str, counts))}: its stages must own at least one "
                              f"layer each and {layers} layers in all, got {sum(counts)}")
    else:
        if not 1 <= pp <= layers:
            raise ConfigError(f"pp = {pp}: a pipeline of {layers} layers has 1 to {layers} stages")
        counts = [layers // pp] * pp
        for k in range(2, layers % pp + 2):  # the remainder: one more layer to each stage before the last
            counts[-k] += 1
    out, start = [], 0
    for c in counts:
        out.append(range(start, start + c))
        start += c
    return tuple(out)

