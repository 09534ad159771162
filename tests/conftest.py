"""Test-wide settings: offline, CPU, Hugging Face caches in a temporary directory."""

from __future__ import annotations

import os
import tempfile

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
if "HF_HOME" not in os.environ or not os.environ["HF_HOME"].startswith(tempfile.gettempdir()):
    os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hf_lrdwm_tests_hf_home_")


@pytest.fixture(autouse=True)
def _offline_env(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield
