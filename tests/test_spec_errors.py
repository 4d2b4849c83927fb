"""Bad specs get a clear error naming file, line and column with a caret; never a traceback."""
import pathlib
import subprocess
import sys

import pytest

from layoutalg.cli import main
from layoutalg.compile.codegen import compile_family
from layoutalg.errors import SHOWN, SpecError
from layoutalg.ir.family import check_layouts, resolve
from layoutalg.dsl.library import MAX_IMPORT_DEPTH, load
from layoutalg.dsl.syntax import MAX_DEPTH, parse

from conftest import ROOT

GRIDS = (ROOT / "specs" / "grids.lal").read_text()
FAMILY = ('import "grids.lal"\nlayout a(T):\n    index t < T\n    offset t\n'
          'family f serves fallback:\n    grid private\n    local a(page_size)\n    canonical a(page_size)\n'
          '    shard (t) -> (t)\n')  # a family, so that resolve evaluates the top-level lets after it


def error_of(tmp_path, text: str | bytes, name: str = "bad.lal") -> SpecError:
    (tmp_path / "grids.lal").write_text(GRIDS)
    if isinstance(text, str):
        text = text.encode()
    (tmp_path / name).write_bytes(text)
    with pytest.raises(SpecError) as info:
        lib = load([tmp_path / name])
        check_layouts(lib)
        for f in lib.families:
            resolve(lib, f)
    return info.value


CASES = [
    ("layout a(T):\n    index t < T\n    offset t +\n", 3, 15, "expected"),
    ("layout a(T):\n    index t < T\n    offset Q * t\n", 3, 12, "unknown name 'Q'"),
    ("layout a(T):\n    index t < T, t < 4\n    offset t\n", 2, 18, "declared twice"),
    ("layout a(T):\n    index t < T, s < 2\n    offset t * s\n", 3, 12, "not affine"),
    ("layout a(T):\n    index t < 2.5\n    offset t\n", 2, 15, "must be an integer, not 2.5"),
    ("layout a(T):\n    index t < T\n      offset t\n", 3, 7, "unexpected indentation"),
    ("family f serves attention:\n", 1, 27, "unexpected end of file; expected an indented block"),
    ("layout a(T):\n    index t < T\n    offset " + "t + " * 100 + "\n", 3, 412, "unexpected end of line"),
    ("layout a(T):\n    offset 0\n", 1, 1, "no 'index' clause"),
    ("layout a(T):\n    index t < T\n    tensor (block, ..., ...)\n", 3, 25, "'...' (the indices it does not name) at most once"),
    ("grid g:\n    world tp\n    use nothing\n", 3, 9, "'use nothing' names no rules (none are defined)"),
    ("rules r:\n    use s\nrules s:\n    use r\ngrid g:\n    use r\n", 4, 9, "rules use each other in a circle: r -> s -> r"),
    ("rules r:\n    world tp\nrules r:\n    world 1\n", 3, 1, "'r' is already defined"),
    ("rules r:\n    case tp == 1:\n        let a = 1\ngrid g:\n    case tp > 1:\n        let a = 2\n    use r\n",
     7, 9, "rules 'r' begins with a case group and a 'case' stands next to its 'use'"),
    ("rules r:\n    case tp == 1:\n        let a = 1\ngrid g:\n    use r\n    case tp > 1:\n        let a = 2\n",
     6, 5, "rules 'r' ends with a case group and a 'case' stands next to its 'use'"),
    ("layout a(T):\n    index t < T\n    offset t // 2\n", 1, 1, "affine in whole indices"),
    ("layout a(T):\n    index t < T\n    offset t\n    tensor (block, s)\n", 4, 20, "not an index"),
    ('import "nope.lal"\n', 1, 1, "not found"),
    ('import "grids.lal"\nlayout a(T):\n    index t < T, s < 2\n    offset t + T * s\n'
     'family f serves fallback:\n    grid private\n    local a(page_size)\n    canonical a(page_size)\n'
     '    shard (t, s) -> (t, t)\n', 9, 5, "index 't' is used twice by the shard map"),
    ('import "grids.lal"\nlayout a(T):\n    index t < T\n    offset t\n'
     'family f serves fallback:\n    grid nosuch\n    local a(page_size)\n    canonical a(page_size)\n'
     '    shard (t) -> (t)\n', 6, 10, "unknown grid 'nosuch'; known: heads, latent, private"),
    ('import "grids.lal"\nlayout a(T):\n    index t < T\n    offset t\n'
     'family f serves fallback:\n    grid private\n    local a(page_size)\n    canonical a(page_size * 2)\n'
     '    shard (t) -> (t // 2)\n', 9, 5, "digits of 't' that overlap or leave a gap"),
    ('import "grids.lal"\nlayout a(T):\n    index t < T\n    offset t\n'
     'family f serves fallback:\n    grid private\n    local a(page_size)\n    canonical a(page_size)\n'
     '    shard (t) -> (t, t)\n', 9, 5, "gives 2 canonical indices"),
    ('import "grids.lal"\nlayout a(T):\n    index t < T\n    offset t\n'
     'family f serves fallback:\n    grid private\n    local a(page_size)\n    canonical a(page_sise)\n'
     '    shard (t) -> (t)\n', 8, 17, "unknown name 'page_sise'"),
    ('import "grids.lal"\nlayout a(T):\n    index t < T\n    offset t\n'
     'family f serves fallback:\n    grid private\n    let tp = 2\n    local a(page_size)\n'
     '    canonical a(page_size)\n    shard (t) -> (t)\n', 7, 9, "'tp' is already defined"),
    ('grid g:\n    world tp\n    ranks r < tp\n    let B = 2\n    let B = 3\n'
     'layout a(T):\n    index t < T\n    offset t\n'
     'family f serves fallback:\n    grid g\n    local a(page_size)\n'
     '    canonical a(page_size)\n    shard (t) -> (t)\n', 5, 9, "'B' is already defined"),
    # found by corrupting the shipped specs: each of these used to escape as a traceback
    ("layout a(T):\n        index t < T\n    offset t\n", 3, 5,
     "inconsistent indentation: this line is indented by 4, which matches no enclosing block"),
    ("let big = " + " + ".join(["tp"] * 500) + "\n", 1, 5, "expression too deeply nested: 499 levels, at most 100"),
    ("layout a(T):\n    index t < T\n    offset " + "-" * 150 + "t\n", 3, 5, "expression too deeply nested: 150"),
    ("grid g:\n    require " + "not " * 150 + "tp == 1\n", 2, 5, "expression too deeply nested: 151"),
    ("let n = " + "9" * 5000 + "\n", 1, 9, "number too large: 99999999999999999999... (5000 characters)"),
    ("let n = 9223372036854775808\n", 1, 9, "number too large"),
    ("layout a(T):\n    index t < 1." + "5" * 5000 + "\n    offset t\n", 2, 15, "number too long: 1.555"),
    ("family f serves fallback, order 1.5:\n    grid private\n", 1, 33, "a family's order must be an integer, not 1.5"),
    ("layout a(T):\n    index t < T\0\n    offset t\n", 2, 16, "unexpected character '\\x00'"),
    ("grid g:\n" + "".join("    " * (i + 1) + "case tp == 1:\n" for i in range(17)) + "    " * 18 + "let x = 1\n",
     18, 69, "'case' blocks nested too deeply: more than 16 levels"),
    # sizes stay small: a chain of lets cannot square its way to a huge polynomial or number
    (FAMILY + "let a0 = block_size\n" + "".join(f"let a{i + 1} = a{i} * a{i}\n" for i in range(6)), 16, 10,
     "'let a6' has degree 64; at most 32"),
    (FAMILY + "let a0 = 4000000000\nlet a1 = a0 * a0\n", 11, 10, "'let a1' has a constant too large (64 bits)"),
    (FAMILY + "let a0 = tp + pcp + dcp + heads + block_size + head_size\n"
     + "".join(f"let a{i + 1} = a{i} * a{i}\n" for i in range(3)), 13, 10, "more than 512 terms"),
    (FAMILY + "let a0 = tp\n" + "".join(f"let a{i + 1} = a{i} // 2 // 2 // 2\n" for i in range(6)), 16, 10,
     "divisions nested too deeply: 17 levels (counting those in 'let's), at most 16"),
    (FAMILY + "let z = tp / (tp - tp)\n", 10, 9, "division by zero in 'tp / 0'"),
    (FAMILY + "let z = tp % 0\n", 10, 9, "division by zero"),
    (FAMILY.replace("grid private", "grid g") + "grid g:\n    world tp\n    ranks r < tp\n"
     + "".join(f"    case tp == {i}:\n        let x = 1\n    case tp != {i}:\n        let x = 2\n    let y{i} = 1\n"
               for i in range(9)),
     5, 1, "family 'f' has 512 combinations of cases (grid 'g' and the family's own); at most 256"),
    ('import "."\n', 1, 1, "imported path '.' is a folder, not a spec file"),
    (b"layout a(T):\n    index t < T\n    offset t  # \xe9t\xe9\n", 3, 17,
     "the file is not UTF-8 text: byte 0xe9 (byte 45 of the file) cannot be decoded; save it as UTF-8"),
    # str.splitlines() counts '\x0c' as a line break and lark does not: the caret used to sit under another line
    ("# a\x0cb\nlayout a(T):\n    index t < T\n    offset Q\n", 4, 12, "unknown name 'Q'"),
    # a library-level let gave tp (or a declared name) another meaning in every file loaded with it
    (FAMILY + "let tp = 2\n", 10, 5, "'tp' is a runtime name (tensor-parallel ranks); a let may not redefine it"),
    (FAMILY.replace("    shard (t) -> (t)\n", "    sequence zz\n    shard (t) -> (t)\n"), 9, 14,
     "'sequence zz' names no index of the canonical layout 'a' (its indices: t)"),
    (FAMILY + "fn tp(x) = x\n", 10, 4, "'tp' is a runtime name (tensor-parallel ranks); a fn may not take its name"),
    # a tab's width is the editor's: which block a line joins must not depend on it
    ("grid g:\n    world tp\n    case tp == 1:\n        let x = 1\n\tranks r < tp\n", 5, 1,
     "this indentation mixes tabs and spaces"),
]


@pytest.mark.parametrize("text,line,column,message", CASES)
def test_error_points_at_the_problem(tmp_path, text, line, column, message):
    e = error_of(tmp_path, text)
    assert message in e.message
    assert (e.span.line, e.span.column) == (line, column)
    rendered = str(e).splitlines()
    assert rendered[0].startswith(f"{tmp_path / 'bad.lal'}:{line}:{column}: ")
    source = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    # the line as a terminal shows it: a tab as one space (the caret counts characters), a NUL as U+FFFD
    shown = source.split("\n")[line - 1].replace("\t", " ").replace("\x00", "\ufffd")
    if len(shown) <= SHOWN:
        assert rendered[-2] == shown and rendered[-1] == " " * (column - 1) + "^"
    else:  # a long line is shown around the caret, marked '...' where it is cut
        at = rendered[-1].index("^")
        assert rendered[-1] == " " * at + "^" and len(rendered[-2]) <= SHOWN + 6 and "..." in rendered[-2]
        assert column > len(shown) or rendered[-2][at] == shown[column - 1]


def test_nesting_limit_is_exact():
    def sum_of(terms):
        return "let big = " + " + ".join(["tp"] * terms) + "\n"
    assert parse(sum_of(MAX_DEPTH + 1)).lets[0].name == "big"
    with pytest.raises(SpecError, match=f"{MAX_DEPTH + 1} levels, at most {MAX_DEPTH}"):
        parse(sum_of(MAX_DEPTH + 2))


def test_the_deepest_expression_allowed_goes_through_every_pass(tmp_path):
    """A sum and a negation as deep as allowed, in a guard and the shard map: no pass recurses too far."""
    text = (ROOT / "specs" / "split_nhd.lal").read_text()
    text = text.replace("    require per_token_head_quant == 0\n",
                        "    require " + " + ".join(["block_size"] * MAX_DEPTH) + f" == {MAX_DEPTH} * block_size\n")
    negated, summed = "-" * (MAX_DEPTH - 2) + "kv", "d" + " + 0" * (MAX_DEPTH - 2)
    text = text.replace("-> (kv, token(t), head(h), d)",
                        f"-> ({negated}, token(t), head(h), {summed})")
    (tmp_path / "grids.lal").write_text(GRIDS)
    (tmp_path / "deep.lal").write_text(text)
    assert main(["check", str(tmp_path / "deep.lal")]) == 0
    assert main(["explain", str(tmp_path / "deep.lal")]) == 0


@pytest.mark.parametrize("command", ["check", "explain", "prove"])
def test_a_500_term_sum_is_an_error_in_every_command(tmp_path, capsys, command):
    (tmp_path / "grids.lal").write_text(GRIDS)
    text = (ROOT / "specs" / "split_nhd.lal").read_text() + "let big = " + " + ".join(["tp"] * 500) + "\n"
    (tmp_path / "big.lal").write_text(text)
    assert main([command, str(tmp_path / "big.lal")]) == 2
    err = capsys.readouterr().err
    line = (ROOT / "specs" / "split_nhd.lal").read_text().count("\n") + 1  # the appended let
    assert err.startswith(f"error: {tmp_path / 'big.lal'}:{line}:5: expression too deeply nested: 499 levels")
    assert "Traceback" not in err


def test_line_endings_and_byte_order_mark_do_not_matter(tmp_path):
    """The fallback's spec (comments, an import, indented clauses, a guard with a comment after
    it): it compiles in a tenth of a second where split NHD's takes seconds, five times over."""
    text = (ROOT / "specs" / "opaque.lal").read_bytes()
    (tmp_path / "grids.lal").write_text(GRIDS)
    variants = {"lf.lal": text, "crlf.lal": text.replace(b"\n", b"\r\n"), "cr.lal": text.replace(b"\n", b"\r"),
                "bom.lal": b"\xef\xbb\xbf" + text, "tabs.lal": text.replace(b"\n    ", b"\n\t")}
    for name, data in variants.items():
        (tmp_path / name).write_bytes(data)
    compiled = {n: compile_family(resolve(load([tmp_path / n]), "opaque")).source for n in variants}
    assert len(set(compiled.values())) == 1 and "kv_blocks_second" in compiled["lf.lal"]


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "# no newline at the end"])
def test_a_file_with_nothing_in_it_is_an_empty_library(tmp_path, text):
    (tmp_path / "empty.lal").write_text(text)
    lib = load([tmp_path / "empty.lal"])
    assert (lib.layouts, lib.grids, lib.families) == ({}, {}, {})


def test_import_cycle_loads_each_file_once(tmp_path):
    (tmp_path / "a.lal").write_text('import "b.lal"\nlet x = 1\n')
    (tmp_path / "b.lal").write_text('import "a.lal"\nlet y = 2\n')
    lib = load([tmp_path / "a.lal"])
    assert sorted(lib.lets) == ["x", "y"] and len(lib.modules) == 2


def test_imports_nested_too_deeply(tmp_path):
    n = MAX_IMPORT_DEPTH + 2
    for i in range(n):
        (tmp_path / f"f{i}.lal").write_text(f'import "f{i + 1}.lal"\n' if i + 1 < n else "let x = 1\n")
    e = error_of(tmp_path, 'import "f0.lal"\n')
    assert e.message == f"imports nested too deeply: more than {MAX_IMPORT_DEPTH} levels"
    assert (pathlib.Path(e.span.file).name, e.span.line) == (f"f{MAX_IMPORT_DEPTH - 1}.lal", 1)


def test_a_spec_folder_holding_a_folder_named_lal(tmp_path):
    (tmp_path / "odd.lal").mkdir()
    with pytest.raises(SpecError, match="cannot read spec file .*odd.lal: it is a folder"):
        load([tmp_path])


def test_unreadable_imported_file_is_reported_at_the_import(tmp_path, monkeypatch):
    (tmp_path / "secret.lal").write_text("let x = 1\n")
    real = pathlib.Path.read_bytes

    def read_bytes(self):
        if self.name == "secret.lal":
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", read_bytes)
    e = error_of(tmp_path, 'let y = 2\nimport "secret.lal"\n')
    assert e.message == f"cannot read spec file {tmp_path / 'secret.lal'}: permission denied"
    assert (e.span.line, e.span.column) == (2, 1)


def test_missing_spec_path(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope.lal")]) == 2
    assert capsys.readouterr().err == f"error: no such spec file or folder: {tmp_path / 'nope.lal'}\n"


def test_cli_reports_errors_without_traceback(tmp_path):
    (tmp_path / "bad.lal").write_text("layout a(T):\n    index t < T\n    offset Q * t\n")
    proc = subprocess.run([sys.executable, "-m", "layoutalg.cli", "check", str(tmp_path / "bad.lal")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"{tmp_path / 'bad.lal'}:3:12: unknown name 'Q'" in proc.stderr
    assert proc.stderr.rstrip().endswith("^")


@pytest.mark.parametrize("target", ["/dev/zero", "pipe"])
def test_importing_a_device_or_a_pipe_is_an_error_not_a_hang(tmp_path, target):
    import os
    if target == "pipe":
        os.mkfifo(tmp_path / "pipe")
    (tmp_path / "a.lal").write_text(f'import "{target}"\n')
    with pytest.raises(SpecError, match="is not a regular file") as info:
        load([tmp_path / "a.lal"])
    assert info.value.span.line == 1


def test_a_spec_file_past_the_size_limit_is_refused(tmp_path):
    from layoutalg.dsl.syntax import MAX_FILE_BYTES
    (tmp_path / "big.lal").write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(SpecError, match="more than a spec file's"):
        load([tmp_path / "big.lal"])
