"""The witness records (`verify/prove/witness`): every query of the prover says what its terms
mean by a record of its kind, and the registry's witness names are terms of the records they are
read from (a certificate's cuts read them by name)."""
import pytest

from conftest import ROOT
from layoutalg.dsl.interpret import paths
from layoutalg.dsl.library import load
from layoutalg.ir.family import resolve
from layoutalg.verify.prove import obligations, witness
from layoutalg.verify.prove.obligations import Model
from layoutalg.verify.prove.registry import ENTRIES
from layoutalg.verify.prove.runner import query

KIND = {"local-bijective": witness.Layout, "canonical-bijective": witness.Layout, "shard-in-range": witness.Shard,
        "shard-injective": witness.Shard, "writers-disjoint": witness.Shard, "writers-cover": witness.Cover,
        "single-rank-identity": witness.Shard, "sequence-order": witness.Sequence, "one-format": witness.Meaning,
        "digits-match-spec": witness.Digits, "regions-tile-local": witness.Tiling,
        "regions-tile-canonical": witness.Tiling}


@pytest.fixture(scope="module")
def lib():
    return load([ROOT / "specs" / "split_nhd.lal", ROOT / "specs" / "mamba2.lal"])


def test_every_query_says_what_its_terms_mean_by_a_record_of_its_kind(lib):
    asked = set()
    for family, names in (("split_nhd", [e.name for e in ENTRIES if e.query in ("model", "meaning", "digits")
                                         and e.mode != "page"]),
                          (lib.parts_of("mamba2")[0], ["regions-tile-local", "regions-tile-canonical"])):
        fam = resolve(lib, family) if family == "split_nhd" else None
        for name in names:
            m = Model(lib, family, paths(lib, family)[0])
            extra = (fam.variants[0], fam.atoms) if name == "digits-match-spec" else ()
            _, w = query(m, name, *extra)
            assert type(w) is KIND[name], (name, type(w))
            assert len(w.parts) == len(w.meaning) or not w.meaning, name
            entry = next(e for e in ENTRIES if e.name == name)
            for _, pairs in entry.shard_points:
                for pair in pairs:
                    assert all(w.term(n) is not None for n in pair), (name, pair)
            layout = entry.layout_points
            if layout is not None:
                assert w.term(layout[2]) is not None and w.term(layout[3]) is not None, name
            asked.add(name)
    assert asked == set(KIND), sorted(set(KIND) - asked)


def test_a_runs_query_says_what_its_terms_mean_too(lib):
    from layoutalg.compile.codegen import compile_family
    from layoutalg.dsl.interpret import Reading
    from layoutalg.runtime.lower import certify as certify_instance, run_plan
    from layoutalg.verify.samples import fitted_instance
    cf = compile_family(resolve(lib, "split_nhd"))
    sizes = {"tp": 2, "pcp": 1, "dcp": 1, "interleave": 1, "total_heads": 2, "heads": 1, "block_size": 2,
             "head_size": 2, "dtype_bytes": 1, "per_token_head_quant": 0, "pcp_replicas": 0, "kv_blocks_second": 0,
             "aiter_kv": 0, "cpu_attn_layout": 0}
    inst, sizes = fitted_instance(cf, sizes)
    m = Model(lib, "split_nhd", tuple(Reading(lib, "split_nhd", sizes).taken), sizes=sizes)
    for name, want in (("runs-match-spec", ("x", "i", "d", "claimed", "b")), ("runs-cover-local", ("x",))):
        _, w = obligations.runs_query(m, name, inst, run_plan(certify_instance(inst)))
        assert type(w) is witness.Runs and all(w.term(n) is not None for n in want), name


def test_a_term_no_kind_has_is_refused_by_name():
    w = witness.Layout(i={}, j={}, role="local")
    assert w.term("role") == "local"
    with pytest.raises(AttributeError, match=r"a Layout witness has no term 'd' \(its terms: i, j, role, clash, size\)"):
        w.term("d")
    with pytest.raises(TypeError):
        witness.Shard(i={}, q={})  # a term no kind has cannot be made either
