"""End to end on real vLLM 0.32 CPU engines: KV pages stored at one TP are reused at another
(TP 2 -> TP 1 and TP 1 -> TP 2; and for a Mamba2 whose state only layoutalg certifies, TP 2 -> TP 1,
with the plugin off as the control) through vLLM's offloading connector (`TieringOffloadingSpec`,
`"canonical_layout": true`, an `fs` tier) with layoutalg's plugin on. The engines run in
subprocesses, one at a time (engine_reuse.py says what each does); about 6 minutes on 2 cores, so
it runs only where `LAYOUTALG_ENGINE_E2E=1` (`.ci/engine` sets it) and needs the test-only
cpu_offload_shim installed (`.ci/engine` installs it)."""
import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.environ.get("LAYOUTALG_ENGINE_E2E") != "1",
                                reason="the engine end-to-end runs where LAYOUTALG_ENGINE_E2E=1 (.ci/engine)")
SCRIPT = Path(__file__).with_name("engine_reuse.py")


def test_kv_pages_stored_at_one_tp_are_reused_at_another_with_the_same_greedy_tokens():
    run("llama", 1100)  # 4 engines of at most 240 s each, and the model


def test_mamba2_state_only_layoutalg_certifies_is_reused_across_tp_and_not_without_the_plugin():
    """TP 2 stores a pure Mamba2's state with the plugin on; TP 1 reuses it (same greedy tokens)
    with the plugin on and finds nothing with it off (vLLM's gate keys the state per TP)."""
    run("mamba2", 800)  # 3 engines of at most 240 s each


def run(scenario: str, timeout: int) -> None:
    assert any(e.name == "cpu_offload_shim" for e in entry_points(group="vllm.general_plugins")), (
        "tests/engine/cpu_offload_shim is not installed: pip install --no-deps --no-build-isolation "
        "tests/engine/cpu_offload_shim (as .ci/engine does)")
    p = subprocess.Popen([sys.executable, str(SCRIPT), "--scenario", scenario], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.terminate()  # the script ends its engine's process group on SIGTERM
        out, err = p.communicate(timeout=60)
    print(out)
    summary = json.loads(out.strip().splitlines()[-1])
    assert "error" not in summary, summary["error"]
    failed = [name for name, ok in summary["checks"].items() if not ok]
    assert not failed, f"failed: {failed}; {json.dumps(summary)}"
    assert p.returncode == 0, err[-4000:]
