"""A corpus that cannot be read, or a line that is not a layer, is an error naming the file and line."""
import gzip
import io
import json

import pytest

from layoutalg.cli import main
from layoutalg.runtime.corpus import CorpusError, derive_corpus, derive_row, read_lines
from layoutalg.runtime.derive import Deriver

from conftest import DATA


@pytest.fixture(scope="module")
def good_lines():
    with gzip.open(DATA / "vllm_reference.jsonl.gz", "rt") as f:
        return [next(f) for _ in range(4100)]


def row(good_lines, edit=None) -> str:
    r = json.loads(good_lines[0])
    if edit:
        edit(r)
    return json.dumps(r) + "\n"


def drop(*path):
    def apply(r):
        for key in path[:-1]:
            r = r[key]
        del r[path[-1]]
    return apply


def put(value, *path):
    def apply(r):
        for key in path[:-1]:
            r = r[key]
        r[path[-1]] = value
    return apply


# (third line of the file, message after "FILE:3: ")
BAD_LINES = [
    ('{"id": 1, "spec": ', "not a JSON line: Expecting value at column 19"),
    ("[1, 2]", "expected a JSON object, got list"),
    ("[" * 100000 + "]" * 100000, "not a JSON line: nested too deeply"),
    (drop("spec"), "'spec' must be an object, got nothing"),
    (put("attention", "spec"), "'spec' must be an object, got str"),
    (drop("parallel"), "'parallel' must be an object, got nothing"),
    (drop("parallel", "tp"), "'parallel' has no 'tp'"),
    (put(5, "tensor", "shape"), "'tensor.shape' must be a list, got int"),
    (drop("tensor", "dtype_bytes"), "'tensor' has no 'dtype_bytes'"),
    # an integer of more digits than Python converts is a clear error, and "false" as a
    # flag reads as false (not as a non-empty string)
    ('{"id": ' + "9" * 5000 + "}", "not a JSON line: Exceeds the limit (4300 digits) for integer string conversion: "
                                   "value has 5000 digits; use sys.set_int_max_str_digits() to increase the limit"),
    (put("false", "spec", "per_token_head_quant"), "'spec.per_token_head_quant' must be true or false, got 'false'"),
    (put(2, "spec", "per_token_head_quant"), "'spec.per_token_head_quant' must be true or false, got 2"),
]


def write(tmp_path, good_lines, third) -> str:
    """A corpus whose third line is `third` (a line, or an edit of a good row); its second is blank."""
    bad = third if isinstance(third, str) else row(good_lines, third)
    path = tmp_path / "c.jsonl"
    path.write_text(good_lines[0] + "\n" + bad.rstrip("\n") + "\n" + good_lines[1])
    return str(path)


@pytest.mark.parametrize("third,message", BAD_LINES)
def test_bad_line_is_named_by_file_and_line(tmp_path, good_lines, third, message):
    path = write(tmp_path, good_lines, third)
    with pytest.raises(CorpusError) as info:
        derive_corpus(path, io.StringIO(), jobs=1)
    assert str(info.value) == f"{path}:3: {message}"


def test_field_of_the_wrong_type_is_named_by_line(tmp_path, good_lines):
    path = write(tmp_path, good_lines, put("2", "parallel", "tp"))
    with pytest.raises(CorpusError, match=f"^{path}:3: "):
        derive_corpus(path, io.StringIO(), jobs=1)


def test_line_that_is_not_utf8(tmp_path, good_lines):
    path = tmp_path / "c.jsonl"
    path.write_bytes(good_lines[0].encode() + b'{"id": "\xe9"}\n')
    with pytest.raises(CorpusError, match=f"^{path}:2: not UTF-8: byte 0xe9 at column 9$"):
        list(read_lines(str(path)))


def test_bad_line_found_by_a_worker_process(tmp_path, good_lines):
    lines = list(good_lines)
    lines[4050] = '{"spec": 1}\n'
    path = tmp_path / "big.jsonl"
    path.write_text("".join(lines))
    with pytest.raises(CorpusError, match=f"^{path}:4051: 'spec' must be an object, got int$"):
        derive_corpus(str(path), io.StringIO(), jobs=2)


def unreadable(tmp_path, kind: str):
    if kind == "missing":
        return tmp_path / "nope.jsonl", "cannot read corpus {p}: no such file or directory"
    if kind == "folder":
        (tmp_path / "d.jsonl").mkdir()
        return tmp_path / "d.jsonl", "cannot read corpus {p}: it is a folder"
    if kind == "not gzip":
        (tmp_path / "c.jsonl.gz").write_text('{"id": 0}\n')
        return tmp_path / "c.jsonl.gz", "{p}: not a gzip file, though its name ends in .gz"
    data = gzip.compress(b'{"id": 0}\n' * 1000)
    if kind == "gzip of a wrong checksum":  # a gzip file, corrupt: not "not a gzip file"
        (tmp_path / "crc.jsonl.gz").write_bytes(data[:-8] + bytes([data[-8] ^ 1]) + data[-7:])
        return tmp_path / "crc.jsonl.gz", "{p}: the gzip data is corrupt (CRC check failed"
    if kind == "device":
        return "/dev/zero", "cannot read corpus {p}: not a file (a device such as /dev/zero has no end to read to)"
    (tmp_path / "t.jsonl.gz").write_bytes(data[:len(data) // 2])
    return tmp_path / "t.jsonl.gz", ("{p}: the gzip data is truncated or corrupt (Compressed file ended before "
                                     "the end-of-stream marker was reached)")


@pytest.mark.parametrize("kind", ["missing", "folder", "not gzip", "truncated gzip", "gzip of a wrong checksum",
                                  "device"])
def test_unreadable_corpus(tmp_path, kind):
    path, message = unreadable(tmp_path, kind)
    with pytest.raises(CorpusError) as info:
        derive_corpus(str(path), io.StringIO())
    assert str(info.value).startswith(message.format(p=path))
    assert kind == "gzip of a wrong checksum" or str(info.value) == message.format(p=path)


@pytest.mark.parametrize("kind", ["missing", "not gzip"])
def test_cli_exits_2_without_traceback(tmp_path, capsys, kind):
    path, message = unreadable(tmp_path, kind)
    assert main(["derive-corpus", str(path)]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"error: {message.format(p=path)}\n")


def test_cli_bad_line(tmp_path, capsys, good_lines):
    path = write(tmp_path, good_lines, drop("spec"))
    assert main(["derive-corpus", path]) == 2
    assert capsys.readouterr().err == f"error: {path}:3: 'spec' must be an object, got nothing\n"


def test_blank_lines_are_skipped_but_counted(tmp_path, good_lines):
    path = tmp_path / "c.jsonl"
    path.write_text("\n" + good_lines[0] + "   \n" + good_lines[1])
    out = io.StringIO()
    assert derive_corpus(str(path), out, jobs=1) == 2
    deriver = Deriver()
    expected = [derive_row(deriver, json.loads(x)) for x in good_lines[:2]]
    assert [json.loads(x) for x in out.getvalue().splitlines()] == json.loads(json.dumps(expected))
