"""The acceptance bar: every layer of the reference corpus, byte for byte."""
import json
import subprocess
import sys

from layoutalg.runtime.corpus import derive_row
from layoutalg.mapping import CopyRun, merged_triples
from layoutalg.runtime.derive import Deriver

from conftest import DATA

FIELDS = ("canonical_page_size_bytes", "local_page_size_bytes", "num_writers", "writer_index",
          "parallelism_agnostic")


def compare(row, out):
    """'' when the derived line matches the expected one, else what differs."""
    if out["result"] != row["result"]:
        return f"result {out['result']} != {row['result']}"
    expected = row.get("ranks")
    if expected is None:
        return "" if "ranks" not in out else "ranks present for no_mappings"
    if len(out["ranks"]) != len(expected):
        return f"{len(out['ranks'])} ranks != {len(expected)}"
    for rank, (got, want) in enumerate(zip(out["ranks"], expected)):
        for f in FIELDS:
            if got[f] != want[f]:
                return f"rank {rank}: {f} {got[f]} != {want[f]}"
        triples = [list(t) for t in merged_triples([CopyRun(*r) for r in got["runs"]])]
        if triples != want["triples"]:
            return f"rank {rank}: byte map differs"
        if len(got["runs"]) > want["reference_num_runs"]:
            return f"rank {rank}: {len(got['runs'])} runs, more than the reference's {want['reference_num_runs']}"
    return ""


def test_whole_corpus_matches_reference(corpus_rows):
    deriver = Deriver()
    failures = [(row["id"], why) for row in corpus_rows if (why := compare(row, derive_row(deriver, row)))]
    assert len(corpus_rows) == 9801
    assert failures == []


def test_corpus_covers_every_result_kind(corpus_rows):
    deriver = Deriver()
    seen = {derive_row(deriver, r)["result"] for r in corpus_rows}
    assert seen == {"certified", "opaque", "no_mappings"}


def test_fewer_runs_than_reference(corpus_rows):
    deriver = Deriver()
    ours = theirs = 0
    for row in corpus_rows:
        out = derive_row(deriver, row)
        for got, want in zip(out.get("ranks", []), row.get("ranks", [])):
            ours += len(got["runs"])
            theirs += want["reference_num_runs"]
    assert ours < theirs / 4  # the reference emits about 4.5x the minimum


def test_derive_corpus_command(tmp_path, corpus_rows):
    sample = tmp_path / "sample.jsonl"
    rows = corpus_rows[::97]
    sample.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.run([sys.executable, "-m", "layoutalg.cli", "derive-corpus", str(sample),
                           "--specs", str(DATA.parent.parent / "specs")],
                          capture_output=True, text=True, check=True)
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [x["id"] for x in lines] == [r["id"] for r in rows]
    assert all(compare(r, x) == "" for r, x in zip(rows, lines))
    assert set(lines[0]) >= {"id", "result"}
    certified = next(x for x in lines if x["result"] == "certified")
    assert set(certified["ranks"][0]) == set(FIELDS) | {"runs"}
    assert all(len(run) == 6 for run in certified["ranks"][0]["runs"])
