"""Detector repos: save_pretrained / from_pretrained / push_to_hub, the model card, permissions, secrets."""

from __future__ import annotations

import json
import logging
import os
import stat

import numpy as np
import pytest
from test_pipeline import TEXTS, random_ids, tiny_tokenizer, watermarked_ids

from hf_lrdwm import LRDWMConfig, LRDWMDetector
from hf_lrdwm import hub as hub_module

SECRET = "hub test secret"


def _secret_strings(cfg: LRDWMConfig) -> list[str]:
    return [SECRET, str(cfg.key_left), str(cfg.key_right), f"{cfg.key_left:x}", f"{cfg.key_right:x}"]


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def detector(tokenizer):
    det = LRDWMDetector(
        LRDWMConfig(key=SECRET, gamma=0.25, delta=3.0, sides="both"),
        tokenizer,
        fpr=0.001,
        min_tokens=8,
        statistic="paper",
    )
    det.calibrate([random_ids(120, det.vocab_size, seed=s) for s in range(40)], fpr=0.05)
    return det


@pytest.fixture(scope="module")
def repo(detector, tmp_path_factory):
    return detector.save_pretrained(tmp_path_factory.mktemp("repo"))


def _inputs(det):
    wm = watermarked_ids(det.config, 60, det.vocab_size, avoid=det.ignore_token_ids)
    return [*TEXTS, " ".join(TEXTS)], [wm, random_ids(90, det.vocab_size, seed=3), [4, 5]]


def _same_results(a, b):
    assert np.array_equal(a.z_score, b.z_score, equal_nan=True)
    assert np.array_equal(a.p_value, b.p_value)
    assert np.array_equal(a.prediction, b.prediction)
    assert a.reason == b.reason and a.threshold == b.threshold and a.statistic == b.statistic
    for x, y in zip(a.token_scores, b.token_scores, strict=True):
        assert np.array_equal(x, y, equal_nan=True)


def test_repo_files_and_config(repo, detector):
    names = set(os.listdir(repo))
    assert {"config.json", "model.safetensors", "README.md", "tokenizer.json"} <= names
    assert "tokenizer_config.json" in names
    assert stat.S_IMODE(os.stat(repo / "config.json").st_mode) == 0o600
    data = json.loads((repo / "config.json").read_text())
    assert data["model_type"] == "lrdwm-detector"
    assert data["key_left"] == f"0x{detector.config.key_left:016x}"
    assert data["key_right"] == f"0x{detector.config.key_right:016x}"
    assert (data["gamma"], data["sides"], data["hash_scheme"]) == (0.25, "both", "lrdwm-splitmix64-v1")
    assert (data["fpr"], data["statistic"], data["min_tokens"]) == (0.001, "paper", 8)
    assert data["ignore_token_ids"] == [0, 1] and data["vocab_size"] == 300
    assert data["calibration"] == detector.calibration.to_dict()
    assert "custom_pipelines" not in data and "auto_map" not in data  # nothing needs remote code


def test_round_trip_gives_identical_results(repo, detector):
    loaded = LRDWMDetector.from_pretrained(repo)
    assert loaded.config == detector.config
    for name in ("fpr", "statistic", "min_tokens", "ignore_repeated_pairs", "ignore_token_ids", "vocab_size"):
        assert getattr(loaded, name) == getattr(detector, name)
    assert loaded.calibration == detector.calibration
    texts, ids = _inputs(detector)
    assert loaded.tokenizer(texts[0])["input_ids"] == detector.tokenizer(texts[0])["input_ids"]
    _same_results(loaded(texts), detector(texts))
    _same_results(loaded(ids), detector(ids))
    _same_results(loaded(ids, fpr=0.2), detector(ids, fpr=0.2))
    assert loaded(ids).prediction.tolist() == [True, False, False]


def test_round_trip_uncalibrated_without_tokenizer(tmp_path):
    det = LRDWMDetector(LRDWMConfig(key=SECRET, sides="left"), vocab_size=500, ignore_token_ids=[7])
    det.save_pretrained(tmp_path)
    assert not (tmp_path / "tokenizer_config.json").exists()
    loaded = LRDWMDetector.from_pretrained(tmp_path)
    assert loaded.tokenizer is None and loaded.calibration is None and loaded.config == det.config
    ids = [random_ids(100, 500, seed=s) for s in range(3)]
    _same_results(loaded(ids), det(ids))
    # a tokenizer given at load time is used; the saved settings (ignored ids, vocab size) are kept
    with_tok = LRDWMDetector.from_pretrained(tmp_path, tokenizer=tiny_tokenizer())
    assert with_tok.tokenizer is not None and with_tok.ignore_token_ids == [7] and with_tok.vocab_size == 500


def test_auto_classes_load_the_repo(repo, detector):
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(str(repo))
    assert type(config) is hub_module.LRDWMDetectorConfig
    model = AutoModel.from_pretrained(str(repo))
    assert type(model) is hub_module.LRDWMDetectorModel
    ids = _inputs(detector)[1]
    _same_results(model.detector(ids), detector(ids))


def test_model_card(repo, detector):
    from huggingface_hub import ModelCard

    text = (repo / "README.md").read_text()
    card = ModelCard(text)
    assert {"watermark-detection", "hf_lrdwm"} <= set(card.data.tags)
    assert card.data.library_name == "hf_lrdwm"
    assert "PRIVATE" in text.split("---")[1]  # the note in the front matter
    assert "Private repository" in text
    for fact in ("lrdwm-splitmix64-v1", "`both`", "0.25", "0.001", "Calibrated on 40 human texts"):
        assert fact in text
    assert f"{detector.calibration.threshold:.6g}" in text
    assert 'pipeline("watermark-detection"' in text
    for s in _secret_strings(detector.config):
        assert s not in text


def test_secrets_not_in_reprs_or_logs(tmp_path, detector, caplog):
    from transformers import pipeline
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_info()
    hf_logging.enable_propagation()
    try:
        with caplog.at_level(logging.DEBUG):
            detector.save_pretrained(tmp_path)
            loaded = LRDWMDetector.from_pretrained(tmp_path)
            detect = pipeline("watermark-detection", model=str(tmp_path), device="cpu")
            detect(TEXTS[0])
    finally:
        hf_logging.disable_propagation()
        hf_logging.set_verbosity_warning()
    assert "Model config LRDWMDetectorConfig" in caplog.text  # transformers logs the config (at INFO)
    config = detect.model.config
    shown = caplog.text + repr(loaded) + repr(detect.model) + repr(config) + str(config) + f"{config}"
    assert "<hidden>" in repr(detect.model.config)
    for s in _secret_strings(detector.config):
        assert s not in shown


def test_permissions_are_restricted_when_overwriting(tmp_path, detector):
    (tmp_path / "config.json").write_text("{}")
    os.chmod(tmp_path / "config.json", 0o644)
    detector.save_pretrained(tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path / "config.json").st_mode) == 0o600
    assert LRDWMDetector.from_pretrained(tmp_path).config == detector.config


def test_save_and_load_errors(tmp_path, detector):
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(NotADirectoryError):
        detector.save_pretrained(file)
    with pytest.raises(FileNotFoundError, match="not a detector repo"):
        LRDWMDetector.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="not an hf_lrdwm detector repo"):
        LRDWMDetector.from_pretrained(tmp_path)


def test_from_pretrained_hub_repo_downloads_config_and_tokenizer_only(monkeypatch, repo, detector):
    import huggingface_hub

    calls = {}

    def fake_snapshot_download(repo_id, **kwargs):
        calls.update(repo_id=repo_id, **kwargs)
        return str(repo)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    loaded = LRDWMDetector.from_pretrained("org/detector", token="t", revision="main")
    assert loaded.config == detector.config and loaded.tokenizer is not None
    assert calls["repo_id"] == "org/detector" and calls["token"] == "t" and calls["revision"] == "main"
    assert "*.safetensors" not in calls["allow_patterns"] and "*.json" in calls["allow_patterns"]


class _FakeApi:
    created: dict = {}
    uploaded: dict = {}
    existing_public: set = set()

    def __init__(self, token=None):
        self.token = token

    def create_repo(self, repo_id, private, exist_ok):
        _FakeApi.created = {"repo_id": repo_id, "private": private, "token": self.token}

    def repo_info(self, repo_id):
        class Info:
            private = repo_id not in _FakeApi.existing_public and _FakeApi.created["private"]

        return Info()

    def upload_folder(self, folder_path, repo_id, commit_message):
        files = {name: (folder_path + "/" + name) for name in os.listdir(folder_path)}
        _FakeApi.uploaded = {
            "repo_id": repo_id,
            "files": sorted(files),
            "config": json.loads(open(files["config.json"]).read()),
            "mode": stat.S_IMODE(os.stat(files["config.json"]).st_mode),
        }
        return "https://hub/commit/1"


def test_push_to_hub_private_by_default_and_warns_when_public(monkeypatch, caplog, detector):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", _FakeApi)
    with caplog.at_level(logging.WARNING, logger=hub_module.__name__):
        url = detector.push_to_hub("me/detector", token="tok")
    assert url == "https://hub/commit/1"
    assert _FakeApi.created == {"repo_id": "me/detector", "private": True, "token": "tok"}
    assert "PUBLIC" not in caplog.text
    files = set(_FakeApi.uploaded["files"])
    assert {"config.json", "README.md", "model.safetensors", "tokenizer.json"} <= files
    assert _FakeApi.uploaded["config"]["key_left"] == f"0x{detector.config.key_left:016x}"
    assert _FakeApi.uploaded["mode"] == 0o600
    with caplog.at_level(logging.WARNING, logger=hub_module.__name__):
        detector.push_to_hub("me/detector-public", private=False)
    assert _FakeApi.created["private"] is False
    assert "PUBLIC" in caplog.text
    for s in _secret_strings(detector.config):
        assert s not in caplog.text


def test_push_to_hub_refuses_an_existing_public_repo(monkeypatch, detector):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", _FakeApi)
    monkeypatch.setattr(_FakeApi, "existing_public", {"me/already-public"})
    _FakeApi.uploaded = {}
    with pytest.raises(ValueError, match="is public"):
        detector.push_to_hub("me/already-public")
    assert _FakeApi.uploaded == {}


def test_every_push_path_is_private_by_default(monkeypatch, repo, detector):
    """Detector, pipeline, model and config all push a detector repo, private unless told otherwise."""
    import huggingface_hub
    from transformers import AutoConfig, AutoModel, pipeline

    monkeypatch.setattr(huggingface_hub, "HfApi", _FakeApi)
    model = AutoModel.from_pretrained(str(repo))
    config = AutoConfig.from_pretrained(str(repo))
    detect = pipeline("watermark-detection", model=str(repo), device="cpu")
    for obj in (detector, detect, model, config):
        _FakeApi.created, _FakeApi.uploaded = {}, {}
        assert obj.push_to_hub("me/d") == "https://hub/commit/1"
        assert _FakeApi.created["private"] is True
        assert {"config.json", "README.md"} <= set(_FakeApi.uploaded["files"])
        assert _FakeApi.uploaded["config"]["key_left"] == f"0x{detector.config.key_left:016x}"
        assert "custom_pipelines" not in _FakeApi.uploaded["config"]
    assert "tokenizer.json" in _FakeApi.uploaded["files"] or obj is config
    for obj in (model, config):
        with pytest.raises(ValueError, match="private by default"):
            obj.save_pretrained("unused", push_to_hub=True)


def test_model_and_config_save_pretrained_restrict_permissions(tmp_path, repo):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(repo))
    model.save_pretrained(tmp_path / "model")
    model.config.save_pretrained(tmp_path / "config")
    for sub in ("model", "config"):
        assert stat.S_IMODE(os.stat(tmp_path / sub / "config.json").st_mode) == 0o600
    assert LRDWMDetector.from_pretrained(tmp_path / "model").config == model.config.to_watermark_config()
