"""Property-based fuzzing of command-line arguments and runtime inputs: a clear error or a
result, never a traceback, and every result copies each page exactly once."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layoutalg.cli import main
from layoutalg.verify.check import tiling_errors
from layoutalg.errors import LayoutalgError
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

SETTINGS = settings(derandomize=True, database=None, deadline=None, max_examples=300,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

NUMBER = st.one_of(st.integers(-3, 70), st.sampled_from(["0", "-1", "x", "1.5", "", "1e3", "99999999999999999999"]))
OPTIONS = ("--tp", "--pcp", "--dcp", "--interleave", "--heads", "--local-heads", "--block-size", "--head-size",
           "--dtype-bytes", "--page-size")


@settings(SETTINGS, max_examples=40)  # each example parses and compiles a family: keep the count modest
@given(st.sampled_from(["split_nhd", "split_hnd", "packed_nhd", "packed_hnd", "mla", "opaque"]),
       st.lists(st.tuples(st.sampled_from(OPTIONS), NUMBER), max_size=5))
def test_runs_arguments_get_a_result_or_a_clear_error(capsys, family, options):
    argv = ["runs", f"specs/{family}.lal"] + [x for o, v in options for x in (o, str(v))]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: a usage error, exit 2, its message on stderr
        assert e.code == 2 and "error:" in capsys.readouterr().err
        return
    out = capsys.readouterr()
    assert code in (0, 1, 2) and "Traceback" not in out.err
    if code == 0:
        assert "family " in out.out and "\nrank 0 " in out.out
    elif code == 1:
        assert "does not apply" in out.out
    else:
        assert out.err.startswith("error: ")



SIZE = st.one_of(st.integers(-2, 40), st.sampled_from([64, 128, 576, 1 << 20]))


@st.composite
def layers(draw):
    """Mostly consistent layers (heads = total // tp, the page the layout holds), sometimes not."""
    tp = draw(st.one_of(st.sampled_from([1, 2, 4, 8]), st.integers(-2, 12)))
    total = draw(st.one_of(st.sampled_from([1, 2, 4, 8, 16]), st.integers(-2, 12)))
    heads = max(1, total // tp) if tp > 0 and draw(st.integers(0, 9)) < 7 else draw(SIZE)
    bs, d, e = draw(st.sampled_from([1, 2, 4, 16])), draw(st.sampled_from([1, 2, 8, 64])), draw(st.sampled_from([1, 2]))
    bs, d = (bs, d) if draw(st.integers(0, 9)) < 8 else (draw(SIZE), draw(SIZE))
    page = 2 * bs * heads * d * e if draw(st.integers(0, 9)) < 7 else draw(st.one_of(st.none(), SIZE))
    kind = draw(st.sampled_from(["attention", "attention", "mla", "mamba"]))
    return kind, page, bs, heads, d, e, tp, total


@SETTINGS
@given(layer=layers(), quant=st.booleans(), ratio=st.sampled_from([1, 1, 1, 0, 2]),
       pcp=st.sampled_from([1, 1, 2, 0]), dcp=st.sampled_from([1, 1, 2, 4, 0]), interleave=st.sampled_from([1, 2, 0, 3]),
       tensor=st.booleans(), layout=st.sampled_from(["split", "packed"]))
def test_derive_gets_a_result_or_a_clear_error(deriver, layer, quant, ratio, pcp, dcp, interleave, tensor, layout):
    kind, page, bs, heads, d, e, tp, total = layer
    try:
        layer = LayerSpec(kind, page, bs, heads, d, e, quant and kind == "mamba", ratio)
        par = ParallelConfig(tp=tp, total_kv_heads=total, pcp=pcp, dcp=dcp, interleave=interleave)
        shape = (3, 2, bs, heads, d) if layout == "split" else (3, heads, bs, 2 * d)
        strides = tuple(int(_prod(shape[k + 1:])) for k in range(len(shape)))
        tl = TensorLayout(shape, strides, e) if tensor and min(shape) > 0 else None
    except LayoutalgError:
        return  # refused at the boundary, with a message naming the field
    try:
        res = deriver.derive(layer, tl, par, 3)
    except LayoutalgError:
        return
    if res.mappings:
        assert len(res.mappings) == tp * pcp
        assert all(m.local_page_size_bytes == page for m in res.mappings)
        if tp * pcp <= 64 and page <= 1 << 16:
            assert tiling_errors(res.mappings) == [], (res.family, layer, par)
    else:
        assert res.result in ("no_mappings", "omitted") and (res.reasons or page is None)


def _prod(xs):
    out = 1
    for x in xs:
        out *= x
    return out
