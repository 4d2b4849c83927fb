import subprocess
import sys

from conftest import ROOT


def run(*args):
    return subprocess.run([sys.executable, "-m", "layoutalg.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_help_lists_commands():
    out = run("--help").stdout
    for cmd in ("check", "runs", "explain", "derive-corpus", "prove"):
        assert cmd in out


def test_check_shipped_specs():
    proc = run("check", "specs/")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shipped = sorted(p.stem for p in (ROOT / "specs").glob("*.lal") if "\nfamily " in p.read_text())
    assert len(shipped) >= 15
    for fam in shipped:  # every shipped family certifies some configuration and agrees with the oracle
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
