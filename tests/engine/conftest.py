"""Tests on vLLM's own objects and engine: run by `.ci/engine` in a venv of their own that
holds vLLM CPU (`LAYOUTALG_ENGINE=1`); the main suite leaves this folder out (tests/conftest.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
