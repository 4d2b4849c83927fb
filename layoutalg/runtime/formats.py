"""Page format identifiers: what two groups' pages must share to be the same format (the layout,
the sizes it reads, the element types), and the parts of an identifier a reader compares.
"""
from __future__ import annotations

from ..compile.compiled import Page


_ASSUMED = "assumed-"


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
    layout, form, *rest = fmt.split(".")
    return ".".join([layout, _ASSUMED + form, *rest])


def unread(fmt: str) -> bool:
    """Whether a format id is of a page derived without the tensors that say where its bytes lie
    (`assumed_id`).

    Examples:
        >>> unread("lal3-0.assumed-abc"), unread("lal3-0.abc.def"), unread("")
        (True, False, False)
    """
    parts = fmt.split(".")
    return len(parts) > 1 and parts[1].startswith(_ASSUMED)


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
