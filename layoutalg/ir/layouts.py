"""Layout definitions applied to sizes: a `LayoutIR` of extents and strides, checked
(indices declared once, offsets affine in whole indices, tensor dims that are indices)."""
from __future__ import annotations

import sympy

from .. import params
from ..errors import SpecError
from .itersum import normalise
from ..dsl.library import Library
from .sizes import Atoms, Scope
from .resolved import LayoutIR
from ..dsl.tree import RESERVED, Call, LayoutDef


def instantiate(lib: Library, use, scope: Scope, role: str) -> LayoutIR:
    """A layout definition applied to size arguments."""
    call: Call = use.call
    ldef: LayoutDef | None = lib.layouts.get(call.fn)
    if ldef is not None and ldef.regions:
        raise SpecError(f"layout '{ldef.name}' is a page of regions ({', '.join(r.name for r in ldef.regions)}): "
                        f"a family of pages names each region's shard map ('shard REGION (...) -> (...)')",
                        call.span)
    if ldef is None:
        raise SpecError(f"unknown layout '{call.fn}'" + (f"; known: {', '.join(sorted(lib.layouts))}"
                                                         if lib.layouts else ""), call.span)
    if len(call.args) != len(ldef.params):
        raise SpecError(f"layout '{ldef.name}' takes {len(ldef.params)} size(s) "
                        f"({', '.join(ldef.params)}), given {len(call.args)}", call.span)
    bound = {p: scope.size(a, f"argument '{p}' of {role} layout") for p, a in zip(ldef.params, call.args)}
    return layout_ir(ldef, bound, scope.atoms)


def layout_ir(ldef: LayoutDef, bound: dict, atoms: Atoms) -> LayoutIR:
    """A layout definition with its parameters bound to sizes; checks the definition."""
    if len(set(ldef.params)) != len(ldef.params):
        raise SpecError(f"layout '{ldef.name}' names a parameter twice", ldef.span)
    inner = Scope(atoms, bound)
    names, extents = [], []
    for d in ldef.indices:
        if d.name in names:
            raise SpecError(f"index '{d.name}' is declared twice in layout '{ldef.name}'", d.span)
        if d.name in bound:
            raise SpecError(f"index '{d.name}' has the name of a parameter of layout '{ldef.name}'", d.span)
        if d.name in RESERVED:  # `block` in a tensor clause would mean the block dim and this index at once
            raise SpecError(f"index '{d.name}' of layout '{ldef.name}' has a reserved name "
                            f"({', '.join(sorted(RESERVED))}); name the index otherwise", d.span)
        if d.name in params.TABLE:  # a shard map's lets would read the index where they mean the size
            raise SpecError(f"index '{d.name}' of layout '{ldef.name}' has the name of a runtime quantity "
                            f"({params.TABLE[d.name].meaning}); name the index otherwise", d.span)
        names.append(d.name)
        extents.append(inner.size(d.extent, f"extent of index '{d.name}'"))
    iters = dict(zip(names, extents))
    off = normalise(ldef.offset, iters, inner)
    coef = {n: sympy.Integer(0) for n in names}
    for split, c in off.terms:
        if split.lower != 1 or not atoms.equal(split.extent, iters[split.source]):
            raise SpecError(f"layout offsets are affine in whole indices: '{split.source}' is split "
                            f"with // or %", ldef.span)
        coef[split.source] = c
    element = inner.size(ldef.element, "element size") if ldef.element is not None else sympy.Integer(1)
    tensor = None
    if ldef.tensor is not None:
        tensor = []
        for n in ldef.tensor:
            if n.id not in iters:
                raise SpecError(f"tensor dimension '{n.id}' is not an index of layout '{ldef.name}'", n.span)
            if n.id in tensor:
                raise SpecError(f"index '{n.id}' is used twice in the tensor of layout '{ldef.name}'", n.span)
            tensor.append(n.id)
        tensor = tuple(tensor)
        _check_outer(ldef, tensor[:ldef.tensor_outer], iters, coef, off.base)
    return LayoutIR(ldef.name, tuple(names), tuple(extents), tuple(coef[n] for n in names), off.base,
                    element, tensor, ldef.span, ldef.tensor_outer)


def _check_outer(ldef: LayoutDef, outer: tuple, iters: dict, coef: dict, base) -> None:
    """Tensor dims before `block` must be the box's outermost indices, row-major, from byte 0:
    then each of their values holds one contiguous stretch of the page (a segment), and the
    tensor is that many block-strided tensors, one a segment."""
    step = sympy.Integer(1)
    for n in iters:
        if n not in outer:
            step *= iters[n]
    for n in reversed(outer):
        if sympy.simplify(coef[n] - step) != 0 or sympy.simplify(base) != 0:
            raise SpecError(f"tensor dimension '{n}' of layout '{ldef.name}' comes before 'block', so it must be "
                            f"outermost in the page (stride {step} elements, the indices after it, from byte 0), "
                            f"but its stride is {coef[n]}" + (f" and the layout starts at {base}" if base != 0 else ""),
                            ldef.tensor[outer.index(n)].span)
        step *= iters[n]


def check_layouts(lib: Library) -> None:
    """Check every layout definition on its own, its parameters taken as free sizes."""
    for ldef in lib.layouts.values():
        if ldef.regions:
            continue  # a page: each region is a layout of its own ('page.region')
        layout_ir(ldef, {p: sympy.Symbol(p, integer=True, positive=True) for p in ldef.params}, Atoms())
