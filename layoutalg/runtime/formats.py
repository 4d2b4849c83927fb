"""Page format identifiers: what two groups' pages must share to be the same format (the layout,
the sizes it reads, the element types), and the parts of an identifier a reader compares. Every
format id is made here (`FormatId`), and read back only through `FormatId.parse`.
"""
from __future__ import annotations

from ..compile.compiled import Page
from ..errors import ConfigError


_ASSUMED = "assumed-"


class FormatId:
    """A page format's identifier, `LAYOUT.FORM[.TYPES]` as text: `layout`, the family's layout id
    (`ir.identity.layout_id`); `form`, 12 hex digits of the canonical numbers (and of the sizes,
    where the page does not name its data: `format_id`); `types`, 8 hex digits of what the layer
    says of its elements ('' where nothing); `assumed`, a page derived without the tensors that say
    where its bytes lie (`assumed_id`). Its parts hold no dot, so the text reads back one way.
    (A plain class: the runtime's start-up imports neither dataclasses nor typing.)

    Examples:
        >>> f = FormatId.parse("lal3-0.assumed-0123456789ab.cdef0123")
        >>> (f.layout, f.form, f.types, f.assumed), str(f) == "lal3-0.assumed-0123456789ab.cdef0123"
        (('lal3-0', '0123456789ab', 'cdef0123', True), True)
        >>> FormatId.parse("lal3-0")
        Traceback (most recent call last):
        ...
        layoutalg.errors.ConfigError: 'lal3-0' is not a page format id (LAYOUT.FORM or LAYOUT.FORM.TYPES)
    """
    __slots__ = ("layout", "form", "types", "assumed")

    def __init__(self, layout: str, form: str, types: str = "", assumed: bool = False):
        for name, v in (("layout", layout), ("form", form), ("types", types)):
            if not isinstance(v, str) or "." in v or (not v and name != "types"):
                raise ConfigError(f"a page format id's {name} must be a non-empty string with no '.', got {v!r}")
        if not isinstance(assumed, bool):
            raise ConfigError(f"a page format id's assumed must be a bool, got {assumed!r}")
        for name, v in (("layout", layout), ("form", form), ("types", types), ("assumed", assumed)):
            object.__setattr__(self, name, v)

    def __setattr__(self, name, value):
        raise AttributeError(f"a FormatId is not changed: make another ({name})")

    def _key(self) -> tuple:
        return self.layout, self.form, self.types, self.assumed

    def __eq__(self, other) -> bool:
        return isinstance(other, FormatId) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"FormatId.parse({str(self)!r})"

    @classmethod
    def parse(cls, text) -> "FormatId":
        """The id `text` names; a `ConfigError` naming it where it is none (a record's field)."""
        parts = text.split(".") if isinstance(text, str) else ()
        if len(parts) not in (2, 3) or not all(parts) or parts[1] == _ASSUMED:
            raise ConfigError(f"{text!r} is not a page format id (LAYOUT.FORM or LAYOUT.FORM.TYPES)")
        assumed = parts[1].startswith(_ASSUMED)
        return cls(parts[0], parts[1][len(_ASSUMED):] if assumed else parts[1], parts[2] if len(parts) == 3 else "",
                   assumed)

    def replaced(self, **parts) -> "FormatId":
        """This id with some of its parts given anew."""
        return FormatId(**{**dict(zip(self.__slots__, self._key())), **parts})

    def __str__(self) -> str:
        return f"{self.form_part}.{self.types}" if self.types else self.form_part

    @property
    def form_part(self) -> str:
        """`LAYOUT.FORM`: the id without its element types."""
        return f"{self.layout}.{_ASSUMED if self.assumed else ''}{self.form}"


def _digits(text: str, n: int) -> str:
    import hashlib  # (here: the runtime's start-up does not import it)
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def assumed_id(fmt: str) -> str:
    """The format id of a page derived without the tensors that would say where its bytes lie
    (`fmt`, keyed by its family's layout, its sizes and the layer's kind), marked so: the layout
    was assumed, the family's own or, for the fallback, the kind's as the engine lays it out. It
    is one id whatever the process or the derivation's history, and never an id derived from a
    tensor (whose key holds the tensor's strides, `tensors.physical_layout`). A kind some family reads from
    its tensor is refused from sizes alone (`derive._tensor_readers`): there two engines' bytes
    may lie apart at one size.

    Examples:
        >>> assumed_id("lal3-0.0123456789ab") == assumed_id("lal3-0.0123456789ab") != "lal3-0.0123456789ab"
        True
        >>> assumed_id("lal3-0.0123456789ab.cdef0123")
        'lal3-0.assumed-0123456789ab.cdef0123'
    """
    return str(FormatId.parse(fmt).replaced(assumed=True))


def unread(fmt: str) -> bool:
    """Whether a format id is of a page derived without the tensors that say where its bytes lie
    (`assumed_id`); '' is a mapping made with no id (not unread), any other string that is no
    format id a `ConfigError`.

    Examples:
        >>> unread("lal3-0.assumed-abc"), unread("lal3-0.abc.def"), unread("")
        (True, False, False)
    """
    return fmt != "" and FormatId.parse(fmt).assumed


def with_element_words(fmt: str, words: list) -> str:
    """`fmt` with `words` (what the layer, its spec and the deployment say of the bytes: the
    element part it had first among them) as its element part, the form part kept: the vLLM
    adapter's word on the encoding (fp8 e4m3 and e5m2 are both uint8 tensors)."""
    return str(FormatId.parse(fmt).replaced(types=_digits(repr(words), 8)))


def model_page_id(layout: tuple) -> str:
    """The format of a page holding several layers (`copy.ModelPlan.format_id`): 16 hex digits of
    each layer's (name, offset, canonical page bytes, format id), the repr quoting names so that
    none forges another."""
    return _digits(repr(layout), 16)


def layer_dtypes(tensors: tuple) -> tuple:
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
    if isinstance(inst, Page):
        forms = tuple(i.canonical_form for _, i in inst.regions) + tuple(p.canonical_form for p in inst.canonical_pads)
    else:
        forms = getattr(inst, "canonical_form", ())
    key = repr((forms, getattr(inst, "canonical_page", 0)) if semantic else
               (forms, sorted((sizes or {}).items()), physical))
    return str(FormatId(layout_id, _digits(key, 12), _digits(repr(dtypes), 8) if dtypes else ""))


def form_part(fmt: str) -> str:
    """A format id without its element types: `LAYOUT.FORM` ('' of '', a mapping made with no id)."""
    return fmt and FormatId.parse(fmt).form_part


def element_part(fmt: str) -> str:
    """What a format id says of the element types (after `LAYOUT.FORM`), '' where nothing (and of
    '', a mapping made with no id)."""
    return fmt and FormatId.parse(fmt).types
