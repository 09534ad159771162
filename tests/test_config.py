"""LRDWMConfig: validation, serialisation, Hub round trips (mocked), and secret hygiene."""

from __future__ import annotations

import json
import logging
import pickle

import pytest

import hf_lrdwm.config as config_module
from hf_lrdwm import LRDWMConfig
from hf_lrdwm.hashing import derive_key

SECRET = "correct horse battery staple"


def _secret_strings(cfg: LRDWMConfig) -> list[str]:
    return [SECRET, str(cfg.key_left), str(cfg.key_right), f"{cfg.key_left:x}", f"{cfg.key_right:x}"]


def test_defaults_and_derived_keys():
    cfg = LRDWMConfig(key=SECRET)
    assert (cfg.delta, cfg.gamma, cfg.sides) == (2.0, 0.5, "both")
    assert cfg.key_left == derive_key(SECRET, "left")
    assert cfg.key_right == derive_key(SECRET, "right")
    assert cfg.key_left != cfg.key_right
    assert LRDWMConfig(key=42) == LRDWMConfig(key="42")


def test_explicit_keys():
    cfg = LRDWMConfig(key_left=1, key_right="0xff")
    assert (cfg.key_left, cfg.key_right) == (1, 255)
    with pytest.raises(ValueError, match="not both"):
        LRDWMConfig(key="x", key_left=1, key_right=2)
    with pytest.raises(ValueError, match="both `key_left` and `key_right`"):
        LRDWMConfig(key_left=1)
    with pytest.raises(ValueError, match=r"key_right.*2\*\*64"):
        LRDWMConfig(key_left=1, key_right=2**64)
    with pytest.raises(ValueError, match="needs `key`"):
        LRDWMConfig()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"delta": -1.0}, r"`delta` must be >= 0, got -1.0"),
        ({"delta": float("nan")}, r"`delta` must be finite"),
        ({"delta": "2"}, r"`delta` must be a number, got str"),
        ({"gamma": 0.0}, r"`gamma` must be in \(0, 1\), got 0.0"),
        ({"gamma": 1.0}, r"`gamma` must be in \(0, 1\), got 1.0"),
        ({"sides": "up"}, r"`sides` must be one of .* got 'up'"),
        ({"hash_scheme": "md5-v0"}, r"`hash_scheme` 'md5-v0' is not supported"),
        ({"confidence_sees_watermark": "yes"}, r"confidence_sees_watermark"),
    ],
)
def test_validation_names_field_and_value(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        LRDWMConfig(key=SECRET, **kwargs)


def test_validate_after_mutation():
    cfg = LRDWMConfig(key=SECRET)
    cfg.gamma = 2.0
    with pytest.raises(ValueError, match="gamma"):
        cfg.validate()


def test_dict_json_roundtrip():
    cfg = LRDWMConfig(key=SECRET, delta=3.25, gamma=0.25, sides="left")
    d = cfg.to_dict()
    assert d["delta"] == 3.25 and d["gamma"] == 0.25 and d["sides"] == "left"
    assert SECRET not in json.dumps(d)  # the secret itself is never stored, only derived keys
    assert LRDWMConfig.from_dict(d) == cfg
    assert LRDWMConfig.from_json_string(cfg.to_json_string()) == cfg
    assert LRDWMConfig.from_dict(d) != LRDWMConfig(key="other", delta=3.25, gamma=0.25, sides="left")
    with pytest.raises(ValueError, match="unknown LRDWMConfig fields: \\['colour'\\]"):
        LRDWMConfig.from_dict({**d, "colour": "green"})
    with pytest.raises(ValueError, match="not a valid watermark config JSON"):
        LRDWMConfig.from_json_string("{nope")
    with pytest.raises(TypeError, match="needs a dict"):
        LRDWMConfig.from_dict([1, 2])


def test_save_and_load_directory(tmp_path):
    cfg = LRDWMConfig(key=SECRET, delta=4.0)
    path = cfg.save_pretrained(tmp_path / "wm")
    assert path.name == "watermark_config.json"
    assert (path.stat().st_mode & 0o077) == 0  # readable by the owner only
    assert LRDWMConfig.from_pretrained(tmp_path / "wm") == cfg
    assert LRDWMConfig.from_pretrained(path) == cfg
    with pytest.raises(FileNotFoundError, match="no watermark_config.json"):
        LRDWMConfig.from_pretrained(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(NotADirectoryError):
        cfg.save_pretrained(blocker)


def test_from_pretrained_hub_repo(monkeypatch, tmp_path):
    cfg = LRDWMConfig(key=SECRET)
    saved = cfg.save_pretrained(tmp_path)
    calls = {}

    def fake_download(repo_id, filename, **kwargs):
        calls.update(repo_id=repo_id, filename=filename, **kwargs)
        return str(saved)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    assert LRDWMConfig.from_pretrained("org/detector", token="t") == cfg
    assert calls["repo_id"] == "org/detector" and calls["filename"] == "watermark_config.json"


class _FakeApi:
    created: dict = {}
    uploaded: dict = {}

    def __init__(self, token=None):
        pass

    def create_repo(self, repo_id, private, exist_ok):
        _FakeApi.created = {"repo_id": repo_id, "private": private}

    def upload_file(self, path_or_fileobj, path_in_repo, repo_id, commit_message):
        with open(path_or_fileobj) as fh:
            _FakeApi.uploaded = {"path": path_in_repo, "content": fh.read()}
        return "https://hub/commit/1"


def test_push_to_hub_private_by_default(monkeypatch, caplog):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", _FakeApi)
    cfg = LRDWMConfig(key=SECRET)
    url = cfg.push_to_hub("me/wm")
    assert url == "https://hub/commit/1"
    assert _FakeApi.created == {"repo_id": "me/wm", "private": True}
    assert LRDWMConfig.from_json_string(_FakeApi.uploaded["content"]) == cfg
    with caplog.at_level(logging.WARNING, logger=config_module.__name__):
        cfg.push_to_hub("me/wm-public", private=False)
    assert _FakeApi.created["private"] is False
    assert "PUBLIC" in caplog.text
    for s in _secret_strings(cfg):
        assert s not in caplog.text


def test_secrets_never_in_repr_str_or_errors(caplog):
    cfg = LRDWMConfig(key=SECRET)
    shown = repr(cfg) + str(cfg) + f"{cfg}"
    for s in _secret_strings(cfg):
        assert s not in shown
    assert "<hidden>" in repr(cfg)
    with caplog.at_level(logging.DEBUG):
        try:
            LRDWMConfig(key=SECRET, gamma=5)
        except ValueError as err:
            message = str(err)
    for s in _secret_strings(cfg):
        assert s not in message
        assert s not in caplog.text
    try:
        LRDWMConfig(key_left="0xnothex", key_right=1)
    except ValueError as err:
        assert "nothex" not in str(err)


def test_copy_and_pickle_keep_keys():
    cfg = LRDWMConfig(key=SECRET)
    other = cfg.copy(delta=5.0)
    assert other.delta == 5.0 and cfg.delta == 2.0 and other.key_left == cfg.key_left
    with pytest.raises(ValueError, match="cannot change 'key_left'"):
        cfg.copy(key_left=3)
    assert pickle.loads(pickle.dumps(cfg)) == cfg


def test_construct_processor():
    proc = LRDWMConfig(key=SECRET).construct_processor(vocab_size=100, mask_token_id=99, in_place=True)
    assert proc.vocab_size == 100 and proc.mask_token_id == 99 and proc.in_place
