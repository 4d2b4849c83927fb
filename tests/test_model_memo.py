"""`obligations.Model` takes an earlier path's shadow terms from a memo: what it gives is what
reading the paths again gives, for each library, path and sizes apart."""
import gc

import z3

from conftest import ROOT
from layoutalg.dsl.interpret import paths
from layoutalg.dsl.library import load
from layoutalg.verify.prove import obligations
from layoutalg.verify.prove.obligations import Model


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all((x is y) or (z3.is_expr(x) and z3.is_expr(y) and x.eq(y)) or x == y
                                    for x, y in zip(a, b))


def test_a_models_shadows_are_a_fresh_reading_of_the_earlier_paths_at_its_own_sizes():
    lib = load([str(ROOT / "specs" / "split_nhd.lal")])
    every = paths(lib, "split_nhd")
    assert len(every) > 2  # (earlier paths to shadow)
    reads = Model(lib, "split_nhd", every[0]).sizes  # the names a symbolic model quantifies over
    concrete = {**{n: 1 for n in reads}, "tp": 4, "dcp": 2, "total_heads": 2, "block_size": 16, "head_size": 8,
                "page_size": 512, "per_token_head_quant": 0, "kv_blocks_second": 0, "aiter_kv": 0, "cpu_attn_layout": 0}
    for path in every:
        for sizes in (None, concrete):  # the symbolic model first: its terms must not be the concrete one's
            m = Model(lib, "split_nhd", path, sizes=sizes)
            assert _same(m.shadows, m._read_shadows()), (path, sizes)
    last = Model(lib, "split_nhd", every[-1])
    assert last.shadows and any(z3.is_expr(t) for t in last.shadows)  # the last path is shadowed by terms


def test_the_memo_is_the_librarys_and_goes_with_it():
    one, two = (load([str(ROOT / "specs" / "split_nhd.lal")]) for _ in range(2))
    path = paths(one, "split_nhd")[-1]
    Model(one, "split_nhd", path), Model(two, "split_nhd", path)
    assert obligations._shadow_memo(one) is not obligations._shadow_memo(two)
    held = id(one)
    assert held in obligations._SHADOWS
    del one
    gc.collect()
    assert held not in obligations._SHADOWS


def test_a_models_assumptions_are_made_once_and_again_under_other_flags():
    """`Model.assumptions` is a fresh reading (`_assume`) the first time and the same terms after;
    a flag it depends on (the page guard) made otherwise gives that flag's reading."""
    lib = load([str(ROOT / "specs" / "split_nhd.lal")])
    m = Model(lib, "split_nhd", paths(lib, "split_nhd")[-1])
    first = m.assumptions()
    assert _same(first, m._assume()) and _same(m.assumptions(), first)
    m.assumptions().append(z3.BoolVal(False))  # a caller's list is its own
    assert _same(m.assumptions(), first)
    m.page_guard = False
    unguarded = m.assumptions()
    assert len(unguarded) == len(first) - 1 and not any(a.eq(m.page_fits()) for a in unguarded if z3.is_expr(a))


def test_the_monotonicity_theorems_are_made_once_per_six_terms():
    """`z3ops.monotone` gives the same theorems for the same terms (two arithmetics of one path),
    and others for other terms: a dividend, quotient or remainder apart is a theorem apart."""
    from layoutalg.verify.prove.z3ops import monotone
    a, q, r, a2, q2, r2, q3 = z3.Ints("a q r a2 q2 r2 q3")
    one = monotone(a, q, r, a2, q2, r2)
    assert monotone(*z3.Ints("a q r a2 q2 r2")) is one  # the same terms, made anew
    other = monotone(a, q3, r, a2, q2, r2)
    assert other is not one and not other[0].eq(one[0])
    s = z3.Solver()  # and they are theorems: with both divisions defined, no model breaks one
    b = z3.Int("b")
    s.add(b > 0, a == q * b + r, r >= 0, r < b, a2 == q2 * b + r2, r2 >= 0, r2 < b, z3.Not(z3.And(*one)))
    assert s.check() == z3.unsat
    assert monotone(7, q, r, a2, q2, r2) is not one  # an int dividend is a term too


def test_a_remembered_normal_form_is_the_one_rewriting_again_gives():
    """`guards.rewritten` remembers each size's normal form under a set of rewrites for the
    process: every form it holds after compiling two families is what rewriting afresh gives,
    and the same size under other rewrites is another entry."""
    import sympy
    from layoutalg.compile.codegen import compile_family
    from layoutalg.ir import guards
    from layoutalg.ir.family import resolve
    lib = load([str(ROOT / "specs" / "split_nhd.lal"), str(ROOT / "specs" / "mla.lal")])
    guards._REWRITTEN.clear()
    for family in ("split_nhd", "mla"):
        compile_family(resolve(lib, family))
    held = dict(guards._REWRITTEN)
    assert len(held) > 50
    for (x, key), form in held.items():
        y = x
        for _ in range(4):
            y = y.subs(dict(key))
        assert sympy.cancel(y) == form, (x, key)
    h, t = sympy.symbols("heads tp", positive=True, integer=True)
    a = guards.rewritten(h * t, {h: sympy.Integer(2)}, frozenset({h: sympy.Integer(2)}.items()))
    b = guards.rewritten(h * t, {t: sympy.Integer(3)}, frozenset({t: sympy.Integer(3)}.items()))
    assert (a, b) == (2 * t, 3 * h)


def test_rewrites_are_applied_as_sympys_subs_applies_them_chains_and_cycles_too():
    """`guards.rewrite` replaces structurally where no rewrite reads another's key, and where
    one does (a chain, a cycle) applies them in sympy's order: either way what four rounds of
    `subs` give. (A cycle is where a structural replacement alone would differ.)"""
    import sympy
    from layoutalg.ir.guards import rewrite
    a, b, c = sympy.symbols("a b c")

    def by_subs(x, subs):
        for _ in range(4):
            x, before = x.subs(subs), x
            if x == before:
                break
        return x
    e = a + 2 * b + c * a
    for subs in ({a: 2 * b, c: sympy.Integer(3)}, {a: b, b: c}, {a: b, b: a}, {a: b + 1, b: 2 * a}):
        assert rewrite(e, subs) == by_subs(e, subs), subs
    assert by_subs(e, {a: b, b: a}) != e.xreplace({a: b, b: a}).xreplace({a: b, b: a})


def test_a_lemma_instance_is_made_once_per_terms_and_is_the_lemma_at_them():
    """`lemmas` remembers each instance by its terms: the same terms made anew give the same
    instance, which is the lemma's own formula at them; a term apart (an int among them) is
    another instance."""
    from layoutalg.verify.prove import lemmas
    b, q, r, big_q = z3.Ints("b q r Q")
    one = lemmas.quotient(b, q, r, big_q)
    assert lemmas.quotient(*z3.Ints("b q r Q")) is one and one.eq(lemmas.quotient.__wrapped__(b, q, r, big_q))
    assert not lemmas.quotient(b, q, r, 4).eq(one) and lemmas.quotient(b, q, r, 4).eq(
        lemmas.quotient.__wrapped__(b, q, r, z3.IntVal(4)))
    assert not lemmas.digit(b, q, r, q, r).eq(lemmas.digit(b, q, r, r, q))  # (the order of its terms is its own)


def test_a_chains_sample_is_asked_once_per_assertions_and_strides(monkeypatch):
    """`lemmas._sample` asks Z3 once for the same assertions, sizes and strides (two models of
    one path), and again for other strides."""
    from layoutalg.verify.prove import lemmas
    lib = load([str(ROOT / "specs" / "split_nhd.lal")])
    path = paths(lib, "split_nhd")[-1]
    asked = []
    real = lemmas._configuration
    monkeypatch.setattr(lemmas, "_configuration", lambda *a: asked.append(a) or real(*a))
    monkeypatch.setattr(lemmas, "_SAMPLES", {})
    one, two = Model(lib, "split_nhd", path), Model(lib, "split_nhd", path)
    tp = one.sizes["tp"]
    first = lemmas._sample(one, [tp, 2 * tp])
    assert first is not None and lemmas._sample(two, [two.sizes["tp"], 2 * two.sizes["tp"]]) is first
    assert len(asked) == 1
    lemmas._sample(one, [tp, 3 * tp])
    assert len(asked) == 2
