"""Hostile inputs and outputs: an output that cannot be written (a full disk, a file over its
size limit, a closed stdout) is a clear error, not a traceback; a spec line quoted in an error
shows no terminal escape sequences; a damaged proof-cache entry, however deeply nested, is not
blamed on the spec; a pipe named like a spec file is not read; `draw` of a page of a gibibyte
is refused before it runs out of memory."""
import os
import subprocess
import sys

import pytest

from layoutalg.compile import cache
from layoutalg.tools import draw
from layoutalg.errors import LayoutalgError, Span, SpecError
from layoutalg.mapping import CanonicalPageMapping, CopyRun

from conftest import ROOT


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_an_output_that_cannot_be_written_is_one_line_and_exit_2():
    proc = subprocess.run(f"{sys.executable} -m layoutalg id specs > /dev/full", shell=True, cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr == "error: cannot write the output: No space left on device; what was written of it is " \
                          "incomplete\n"
    closed = subprocess.run(f"{sys.executable} -m layoutalg id specs >&-", shell=True, cwd=ROOT,
                            capture_output=False, stderr=subprocess.PIPE, text=True)
    assert closed.returncode == 2 and closed.stderr == "error: there is no standard output to write to\n"


def test_a_quoted_spec_line_never_passes_control_characters():
    e = SpecError("unexpected character '\\x1b'", Span("a.lal", 2, 17, "\tindex h < H \x1b]0;PWNED\x07\x1b[2J\u202e oops\n"))
    text = str(e)
    assert not any(c in text for c in "\x1b\x07\u202e\t")
    line, caret = text.splitlines()[1:]
    assert line == " index h < H \ufffd]0;PWNED\ufffd\ufffd[2J\ufffd oops" and caret == " " * 16 + "^"


def test_a_damaged_proof_cache_entry_is_a_miss(tmp_path, monkeypatch):
    from layoutalg.verify.prove import store
    monkeypatch.setenv("LAYOUTALG_CACHE", str(tmp_path / "c"))
    key = "0" * 64
    store.write(key, [])  # (the folder, private)
    p = store._cache_file(key)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, b"[" * 100000 + b"]" * 100000)
    os.close(fd)
    assert store.read(key) is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_pipe_named_like_a_spec_file_is_refused_not_read(tmp_path):
    (tmp_path / "a.lal").write_text((ROOT / "specs/opaque.lal").read_text())
    os.mkfifo(tmp_path / "b.lal")
    with pytest.raises(SpecError, match="cannot read spec file .*b.lal: it is not a regular file"):
        cache.key_of(tmp_path)


def test_draw_refuses_pages_too_large_to_follow_byte_by_byte(tmp_path):
    big = 1 << 30
    m = CanonicalPageMapping(big, big, (CopyRun(0, 0, big, 1, big, big),), 1, 0, True)
    with pytest.raises(LayoutalgError, match="draw: the canonical page and the ranks' pages hold 2147483648 bytes"):
        draw.owners([m])


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_stderr_that_cannot_be_written_loses_progress_lines_never_the_verdict():
    """Check's progress line to a full stderr raised OSError, and exit 1 said
    the spec had errors. Its verdict (exit 0, and the table on stdout) stands."""
    proc = subprocess.run(f"{sys.executable} -m layoutalg check specs/opaque.lal 2>/dev/full", shell=True, cwd=ROOT,
                          capture_output=False, stdout=subprocess.PIPE, text=True)
    assert proc.returncode == 0 and "opaque" in proc.stdout and " ok (" in proc.stdout


def test_prove_writes_to_the_stdout_of_each_call(tmp_path, monkeypatch):
    """Prove's output went to the stdout of the first import of its module."""
    import io
    from layoutalg.cli import main
    for _ in range(2):
        out = io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setenv("LAYOUTALG_CACHE", str(tmp_path / "c"))
        assert main(["prove", str(ROOT / "specs/opaque.lal")]) == 0
        assert "opaque" in out.getvalue() and "obligations:" in out.getvalue()


def test_a_spec_file_name_never_passes_control_characters():
    e = SpecError("unexpected character", Span("s8/evil\x1b[7mX.lal", 3, 1, "x"))
    assert str(e).splitlines()[0] == "s8/evil\ufffd[7mX.lal:3:1: unexpected character"


def test_a_spec_path_that_is_a_device_is_named_so():
    from layoutalg.dsl.library import load
    with pytest.raises(SpecError, match="cannot read spec file /dev/null: it is not a regular file"):
        load(["/dev/null"])
