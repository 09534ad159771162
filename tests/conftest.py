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


@pytest.fixture(autouse=True, scope="module")
def _one_thread(request):
    """Modules that set ``ONE_THREAD = True`` run on one torch thread (set before their own fixtures):
    tiny models run fastest on one intra-op thread and do not fight other processes for shared cores."""
    if not getattr(request.module, "ONE_THREAD", False):
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
