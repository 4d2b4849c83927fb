"""Mutated shipped specs get a result or a LayoutalgError, never another exception.

The mutations are the ones that found the bugs this guards against: lines deleted,
duplicated and swapped; bytes, characters and grammar tokens inserted; numbers changed
(huge, fractional, 2**63); indentation changed (spaces, tabs, inconsistent dedents).
"""
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layoutalg.cli import main
from layoutalg.compile.codegen import compile_family
from layoutalg.errors import LayoutalgError
from layoutalg.ir.family import check_layouts, resolve
from layoutalg.dsl.library import load

from conftest import FULL, ROOT

SPECS = {p.name: p.read_bytes() for p in sorted((ROOT / "specs").glob("*.lal"))}
GRAMMAR = (ROOT / "grammar" / "layoutalg.lark").read_text()
TOKENS = sorted({t.encode() for t in re.findall(r'"([a-z]+|[^"\[a-z]+)"', GRAMMAR)}
                | {b"tp", b"heads", b"page_size", b"shards", b"token", b"head_shard", b"9" * 30, b"2.5",
                   b'"grids.lal"', b'"."', b'"nope.lal"', b"#", b"\\", b"(" * 40, b")" * 40, b"-" * 150})
NUMBERS = [b"0", b"1", b"3", b"1.5", b"9223372036854775807", b"9223372036854775808", b"9" * 5000,
           b"00000000000000000000000000000000000000000007"]
INDENTS = [b"", b" ", b"  ", b"    ", b"      ", b"        ", b"\t", b"\t    ", b" \t"]

# a mutated grids.lal is exercised through one family of each grid
WITH_GRIDS = ["grids.lal", "split_nhd.lal", "mla.lal", "opaque.lal"]


def pipeline(folder, name: str) -> None:
    """What `layoutalg check` does before enumerating: load, check layouts, resolve, compile."""
    lib = load([folder / n for n in (WITH_GRIDS if name == "grids.lal" else [name])])
    check_layouts(lib)
    for family in lib.families:
        compile_family(resolve(lib, family))


# ---- mutations: each takes the hypothesis `data` and the lines, returns new lines ------


def _line(data, lines) -> int:
    return data.draw(st.integers(0, len(lines) - 1))


def delete_line(data, lines):
    i = _line(data, lines)
    return lines[:i] + lines[i + 1:]


def duplicate_line(data, lines):
    i = _line(data, lines)
    return lines[:i + 1] + lines[i:]


def swap_lines(data, lines):
    i, j = _line(data, lines), _line(data, lines)
    out = list(lines)
    out[i], out[j] = out[j], out[i]
    return out


def _insert(data, lines, what: bytes):
    i = _line(data, lines)
    col = data.draw(st.integers(0, len(lines[i])))
    return lines[:i] + [lines[i][:col] + what + lines[i][col:]] + lines[i + 1:]


def insert_bytes(data, lines):
    return _insert(data, lines, data.draw(st.binary(min_size=1, max_size=4)))


def insert_characters(data, lines):
    return _insert(data, lines, data.draw(st.text(min_size=1, max_size=3)).encode())


def insert_token(data, lines):
    return _insert(data, lines, b" " + data.draw(st.sampled_from(TOKENS)) + b" ")


def change_number(data, lines):
    text = b"\n".join(lines)
    spots = [m.span() for m in re.finditer(rb"[0-9]+", text)]
    if not spots:
        return lines
    a, b = data.draw(st.sampled_from(spots))
    return (text[:a] + data.draw(st.sampled_from(NUMBERS)) + text[b:]).split(b"\n")


def change_indentation(data, lines):
    i = _line(data, lines)
    return lines[:i] + [data.draw(st.sampled_from(INDENTS)) + lines[i].lstrip(b" \t")] + lines[i + 1:]


def truncate(data, lines):
    text = b"\n".join(lines)
    return text[:data.draw(st.integers(0, len(text)))].split(b"\n")


MUTATIONS = [delete_line, duplicate_line, swap_lines, insert_bytes, insert_characters, insert_token,
             change_number, change_indentation, truncate]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("specs")
    for name, text in SPECS.items():
        (d / name).write_bytes(text)
    return d


@settings(derandomize=True, database=None, max_examples=300 if FULL else 100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_specs_fail_only_with_layoutalg_errors(folder, data):
    """100 mutants, the same every run (derandomized); 300 with LAYOUTALG_FULL=1."""
    name = data.draw(st.sampled_from(sorted(SPECS)), label="file")
    lines = SPECS[name].split(b"\n")
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        lines = data.draw(st.sampled_from(MUTATIONS), label="mutation")(data, lines) or [b""]
    path = folder / name
    path.write_bytes(b"\n".join(lines))
    try:
        pipeline(folder, name)
    except LayoutalgError:
        pass  # anything else propagates and fails the test, shrunk by hypothesis
    finally:
        path.write_bytes(SPECS[name])


def _corrupt(name: str, fn) -> bytes:
    return fn(SPECS[name])


CORRUPTED = {
    "latin1.lal": _corrupt("split_nhd.lal", lambda t: t.replace(b"# Split NHD", b"# Split NHD \xe9")),
    "deep.lal": _corrupt("split_nhd.lal", lambda t: t + b"let big = " + b" + ".join([b"tp"] * 500) + b"\n"),
    "dedent.lal": _corrupt("split_hnd.lal", lambda t: t.replace(b"\n    offset", b"\n  offset")),
    "huge.lal": _corrupt("mla.lal", lambda t: t.replace(b"ratio == 1", b"ratio == " + b"9" * 5000)),
    "nul.lal": _corrupt("packed_nhd.lal", lambda t: t.replace(b"layout", b"lay\0out", 1)),
    "crlf.lal": _corrupt("opaque.lal", lambda t: t.replace(b"\n", b"\r\n")),
    "tabs.lal": _corrupt("opaque.lal", lambda t: t.replace(b"\n    ", b"\n\t")),
    "nooffset.lal": _corrupt("packed_hnd.lal", lambda t: re.sub(rb"\n    offset[^\n]*", b"", t)),
    "twice.lal": _corrupt("opaque.lal", lambda t: t + t.split(b"\n", 1)[1]),
    "order.lal": _corrupt("split_nhd.lal", lambda t: t.replace(b"order 3", b"order 3.5")),
    "cut.lal": _corrupt("split_hnd.lal", lambda t: t[:len(t) // 2]),
}


@pytest.mark.parametrize("name", sorted(CORRUPTED))
def test_cli_check_on_corrupted_specs_never_shows_a_traceback(tmp_path, capsys, name):
    (tmp_path / "grids.lal").write_bytes(SPECS["grids.lal"])
    (tmp_path / name).write_bytes(CORRUPTED[name])
    rc = main(["check", str(tmp_path / name)])
    out, err = capsys.readouterr()
    assert rc in (0, 1, 2)
    assert "Traceback" not in out + err
    if rc == 2:
        assert err.startswith("error: ") and str(tmp_path / name) in err
    if err.startswith(f"error: {tmp_path / name}:"):  # a position in the file: shown with a caret
        assert err.rstrip().endswith("^")
