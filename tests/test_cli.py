import os
import re
import subprocess
import sys

from conftest import ROOT


def run(*args):
    return subprocess.run([sys.executable, "-m", "layoutalg.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_help_lists_commands():
    out = run("--help").stdout
    for cmd in ("check", "runs", "explain", "derive-corpus", "prove"):
        assert cmd in out


CHECKED = ("split_nhd", "split_hnd", "packed_nhd", "packed_hnd", "mla", "opaque", "mamba2")
"""The spec files `check` runs on in the suite: the attention layouts, MLA, the fallback and a
page of regions; `LAYOUTALG_FULL=1` checks the whole library (`layoutalg check specs/`)."""


def test_check_shipped_specs():
    shipped = sorted(p.stem for p in (ROOT / "specs").glob("*.lal") if "\nfamily " in p.read_text())
    assert len(shipped) >= 15
    if os.environ.get("LAYOUTALG_FULL") != "1":
        shipped = [f for f in shipped if f in CHECKED]
    proc = run("check", *(f"specs/{f}.lal" for f in shipped))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for fam in shipped:  # every family checked certifies some configuration and agrees with the oracle
        line = next(x for x in proc.stdout.splitlines() if x.startswith(fam + " "))
        certified, oracle = int(line.split()[1]), int(line.split()[3])
        assert " ok " in line and certified > 0 and oracle > 0, line
    for fam in ("split_nhd", "split_hnd", "packed_nhd", "packed_hnd", "mla", "opaque"):
        assert f"\n{fam}, example with tp=" in proc.stdout
    assert "  rank 0 (writer 0 of " in proc.stdout


def test_runs_prints_every_rank():
    proc = run("runs", "specs/split_nhd.lal", "--tp", "4", "--heads", "8", "--block-size", "4",
               "--head-size", "8", "--dtype-bytes", "1")
    assert proc.returncode == 0
    out = proc.stdout
    assert out.count("\nrank ") == 4
    assert "rank 3 (pcp_rank=0, head_shard=3, writer=0, dcp_rank=0)" in out
    # rank 3 holds heads 6, 7: 16 B of each token row, at canonical byte 48 of each 64 B row
    assert "         0         48        16      8        16        64" in out


def test_runs_explains_a_configuration_that_fails_closed():
    proc = run("runs", "specs/split_nhd.lal", "--tp", "3", "--heads", "2")
    assert proc.returncode == 1 and "does not apply" in proc.stdout and "tp % total_heads == 0" in proc.stdout


def test_explain_shows_symbolic_strides():
    out = run("explain", "specs/split_nhd.lal").stdout
    assert "when total_heads >= tp and pcp_replicas == 0 and cp > 1" in out
    assert "t//interleave" in out and "writer (replica)" in out


def test_python_dash_m_and_version():
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.startswith("layoutalg ")


def test_explain_aligns_its_columns_and_defines_each_placeholder_before_it_is_read():
    lines = run("explain", "specs/split_nhd.lal").stdout.splitlines()
    for k, line in enumerate(lines):
        if line.strip().startswith("digit ") and "rank stride" in line:
            rows = []
            for x in lines[k + 1:]:
                if x.startswith("    copy") or not x.startswith("    ") or x.startswith("     "):
                    break
                rows.append(x)
            start = line.index("rank stride")
            assert rows and all(x[start - 2:start] == "  " and x[start] != " " for x in rows), rows  # lined up
    text = "\n".join(lines)
    for placeholder in {w for w in text.replace("*", " ").split() if w.startswith("_q")}:
        first_use = min(i for i, x in enumerate(lines) if placeholder in x)
        assert lines[first_use].strip().startswith("where ") and f"{placeholder} =" in lines[first_use]


# ---- bad input: each a clear error, exit 2, nothing half-written ----------------------------

def test_a_library_of_no_family_or_no_folder_derives_nothing_and_says_so(tmp_path):
    """An empty spec folder gave every corpus row `no_mappings` with exit 0, and its cache entry
    was then served for a folder that does not exist (both have no spec files)."""
    import os
    env = {**os.environ, "LAYOUTALG_CACHE": str(tmp_path / "cache")}
    (tmp_path / "empty").mkdir()
    corpus = ROOT / "tests" / "data" / "vllm_reference.jsonl.gz"

    def derive(specs):
        return subprocess.run([sys.executable, "-m", "layoutalg.cli", "derive-corpus", str(corpus), "--specs", specs],
                              capture_output=True, text=True, cwd=ROOT, env=env)
    for specs, said in ((str(tmp_path / "empty"), "holds no family"), (str(tmp_path / "nowhere"), "no such spec"),
                        (str(tmp_path / "empty"), "holds no family")):
        proc = derive(specs)
        assert proc.returncode == 2 and said in proc.stderr + proc.stdout and not proc.stdout.strip(), proc


def test_options_given_wrong_are_refused_before_any_work(tmp_path):
    (tmp_path / "pictures").write_text("a file, not a folder")
    proc = run("prove", "specs/opaque.lal", "--draw", str(tmp_path / "pictures"))
    assert proc.returncode == 2 and "--draw" in proc.stderr and "not a folder" in proc.stderr
    assert "proved" not in proc.stdout  # said before the proof, not after it
    proc = run("runs", "specs/split_nhd.lal", "--tp", "2", "--size", "pcp_replicas=0", "--size", "pcp_replicas=1")
    assert proc.returncode == 2 and "--size pcp_replicas is given twice" in proc.stderr
    for odd in ("1_0", "\uff12"):  # int() reads both; a configuration string reads neither
        proc = run("runs", "specs/split_nhd.lal", "--tp", odd)
        assert proc.returncode == 2 and "expected a whole number" in proc.stderr, odd


def test_a_picture_that_cannot_be_written_whole_leaves_the_old_one(tmp_path):
    import resource

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
    old = tmp_path / "keep.svg"
    old.write_text("<svg>the picture from before</svg>")
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "draw", "specs/split_nhd.lal", "-o", str(old),
                           "--store", "tp=2", "--load", "tp=4"], capture_output=True, text=True, cwd=ROOT,
                          preexec_fn=small_files)
    assert proc.returncode == 2 and "cannot write the picture" in proc.stderr, proc.stderr
    assert old.read_text() == "<svg>the picture from before</svg>" and sorted(tmp_path.iterdir()) == [old]
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "draw", "specs/split_nhd.lal", "-o", str(old),
                           "--store", "tp=2", "--load", "tp=4"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and old.read_text().lstrip().startswith("<?xml") and sorted(tmp_path.iterdir()) == [old]


BLOCK_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None; from layoutalg.cli import main; sys.exit(main(sys.argv[1:]))"


def test_draw_without_its_extra_names_the_extra_in_one_line(tmp_path):
    for args in (["draw", "specs/split_nhd.lal", "--tp", "2", "-o", str(tmp_path / "x.png")],
                 ["prove", "specs/split_nhd.lal", "--draw", str(tmp_path)]):
        proc = subprocess.run([sys.executable, "-c", BLOCK_MATPLOTLIB, *args], capture_output=True, text=True,
                              cwd=ROOT)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == ('error: drawing a picture needs matplotlib, which is not installed: '
                               'pip install "layoutalg[draw]"\n'), args
        assert list(tmp_path.iterdir()) == []  # nothing drawn, nothing proved first


def test_reshard_takes_a_users_spec_folder(tmp_path):
    """A family the user wrote, in a folder of their own, goes through `reshard` as a shipped one."""
    (tmp_path / "grids.lal").write_text((ROOT / "specs" / "grids.lal").read_text())
    text = (ROOT / "specs" / "split_nhd.lal").read_text()
    mine = text.replace("family split_nhd serves attention, before split_hnd:", "family my_nhd serves attention:")
    assert mine != text
    (tmp_path / "my_nhd.lal").write_text(mine)
    args = ["reshard", "--family", "my_nhd", "--store", "tp=1", "--load", "tp=2", "--heads", "4", "--block-size", "4",
            "--head-size", "8", "--blocks", "4", "--layers", "1"]  # (1 + 2 rank processes)
    proc = run(*args, "--specs", str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "2 passed, 0 failed", proc.stdout + proc.stderr
    # the copies' time is said apart from the processes, the filling and the checking
    assert re.search(r"the copies \d+\.\d{3} s \(the slowest rank's store and load\); processes, filling, "
                     r"converting and checking the rest of \d+\.\d\d s", proc.stdout), proc.stdout
    proc = run(*args)  # the control: the shipped library has no such family
    assert proc.returncode == 2 and "no family 'my_nhd'; the shipped ones" in proc.stderr
