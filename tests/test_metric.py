"""The ``tpr_at_fpr`` evaluate metric: the pure core against brute force, evaluate.load, and the Space app."""

from __future__ import annotations

import doctest
import importlib.util
import json
import math
import os
import re
import socket
import types
from pathlib import Path

import numpy as np
import pytest

import hf_lrdwm.metrics
from hf_lrdwm.metrics.tpr_at_fpr.core import roc_auc, tpr_at_fpr

METRIC_DIR = Path(hf_lrdwm.metrics.__file__).resolve().parent / "tpr_at_fpr"
EXAMPLE = dict(predictions=[0.1, 0.4, 0.35, 0.8, 0.9, 0.2], references=[0, 0, 1, 1, 1, 0])


# ---------------------------------------------------------------- brute force references


def _brute(scores, labels, target):
    """Try every threshold among the scores and -inf: (best TPR, smallest feasible threshold, its FPR)."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y == 1]
    neg = [s for s, y in zip(scores, labels, strict=True) if y == 0]

    def rates(t):
        return sum(n > t for n in neg) / len(neg), sum(p > t for p in pos) / len(pos)

    feasible = [t for t in [-math.inf, *scores] if rates(t)[0] <= target]
    best_tpr = max(rates(t)[1] for t in feasible)
    threshold = min(t for t in [-math.inf, *neg] if rates(t)[0] <= target)
    return best_tpr, threshold, rates(threshold)[0], rates(threshold)[1]


def _brute_auc(scores, labels):
    pos = [s for s, y in zip(scores, labels, strict=True) if y == 1]
    neg = [s for s, y in zip(scores, labels, strict=True) if y == 0]
    total = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return total / (len(pos) * len(neg))


def _random_case(rng):
    n = int(rng.integers(2, 17))
    labels = rng.integers(0, 2, n)
    labels[rng.choice(n, 2, replace=False)] = [0, 1]  # both classes present
    kind = int(rng.integers(0, 4))
    if kind == 0:  # heavy ties: 1 to 4 distinct values (1 = everything tied)
        scores = rng.integers(0, int(rng.integers(1, 5)), n).astype(float)
    elif kind == 1:  # ties across classes on a coarse grid, shifted positives
        scores = np.round(rng.normal(size=n) + 0.7 * labels, 1)
    elif kind == 2:  # negative and tiny scores
        scores = rng.integers(-3, 3, n) * 1e-3
    else:  # continuous
        scores = rng.normal(size=n) * 10
    n_neg = int((labels == 0).sum())
    targets = [float(rng.uniform(1e-6, 1)), (int(rng.integers(0, n_neg)) + 0.0) / n_neg or 1e-9]
    targets += [int(rng.integers(1, n_neg + 1)) / n_neg - 1e-12, 1e-9, 1 - 1e-9]
    targets = [t for t in targets if 0 < t < 1]
    return scores.tolist(), labels.tolist(), targets


# ---------------------------------------------------------------- core properties


def test_matches_brute_force_on_random_tied_inputs():
    for seed in range(500):
        scores, labels, targets = _random_case(np.random.default_rng(seed))
        many = tpr_at_fpr(scores, labels, fpr=targets)
        assert many["roc_auc"] == _brute_auc(scores, labels), seed
        assert many["num_positives"] + many["num_negatives"] == len(scores)
        for i, target in enumerate(targets):
            best_tpr, threshold, fpr, tpr = _brute(scores, labels, target)
            one = tpr_at_fpr(scores, labels, fpr=target)
            assert one["tpr"] == best_tpr == tpr, (seed, target)
            assert one["threshold"] == threshold, (seed, target)
            assert one["fpr"] == fpr <= target, (seed, target)
            assert one["true_positives"] == round(tpr * one["num_positives"])
            assert one["false_positives"] == round(fpr * one["num_negatives"])
            for key in ("tpr", "threshold", "fpr", "true_positives", "false_positives"):
                assert many[key][i] == one[key], (seed, key)


def test_matches_brute_force_on_larger_inputs():
    for seed in range(4):
        rng = np.random.default_rng(1000 + seed)
        labels = rng.integers(0, 2, 150)
        scores = np.round(rng.normal(size=150) + labels, 2).tolist()
        targets = [0.01, 0.05, 0.1, 0.5]
        res = tpr_at_fpr(scores, labels.tolist(), fpr=targets)
        assert res["roc_auc"] == _brute_auc(scores, labels.tolist())
        for i, target in enumerate(targets):
            best_tpr, threshold, fpr, _ = _brute(scores, labels.tolist(), target)
            assert (res["tpr"][i], res["threshold"][i], res["fpr"][i]) == (best_tpr, threshold, fpr)


@pytest.mark.parametrize("target, allowed", [(0.29, 29), (0.57, 57), (0.07, 7), (0.005, 0), (0.999, 99)])
def test_target_fpr_boundaries_are_exact(target, allowed):
    # 0.29 * 100 and 0.57 * 100 round below 29 and 57 in floating point; 29/100 <= 0.29 still holds.
    scores = [float(i) for i in range(100)] + [1000.0]
    res = tpr_at_fpr(scores, [0] * 100 + [1], fpr=target)
    assert res["false_positives"] == allowed
    assert res["fpr"] == allowed / 100 <= target
    assert res["threshold"] == 99.0 - allowed
    assert res["tpr"] == 1.0


def test_ties_at_the_threshold_count_as_negative():
    # Negatives 1, 2, 2, 5; positives 2, 3. At fpr 0.5 the threshold is 2 (one negative above it); the
    # positive tied at 2 is not flagged, and no threshold below 2 keeps the FPR within 0.5.
    res = tpr_at_fpr([1, 2, 2, 5, 2, 3], [0, 0, 0, 0, 1, 1], fpr=0.5)
    assert (res["threshold"], res["fpr"], res["tpr"]) == (2.0, 0.25, 0.5)
    assert (res["true_positives"], res["false_positives"]) == (1, 1)
    everything_tied = tpr_at_fpr([0.3] * 6, [0, 1, 0, 1, 0, 1], fpr=[0.01, 0.99])
    assert everything_tied["tpr"] == [0.0, 0.0] and everything_tied["fpr"] == [0.0, 0.0]
    assert everything_tied["roc_auc"] == 0.5


def test_output_shapes_and_types():
    one = tpr_at_fpr(**EXAMPLE, fpr=0.34)
    assert one == {
        "tpr": 1.0,
        "threshold": 0.2,
        "fpr": 1 / 3,
        "roc_auc": 8 / 9,
        "num_positives": 3,
        "num_negatives": 3,
        "true_positives": 3,
        "false_positives": 1,
    }
    many = tpr_at_fpr(**EXAMPLE, fpr=(0.34, np.float64(0.9)))
    assert many["tpr"] == [1.0, 1.0] and many["threshold"] == [0.2, 0.1] and many["false_positives"] == [1, 2]
    assert tpr_at_fpr(**EXAMPLE, fpr=np.array([0.34]))["tpr"] == [1.0]
    assert tpr_at_fpr(**EXAMPLE)["fpr"] == 0.0  # default fpr 0.01
    json.dumps(many)  # plain Python numbers
    assert all(type(v) in (int, float) for v in one.values())
    assert roc_auc(np.array(EXAMPLE["predictions"], dtype=np.float32), [True, False, True, True, True, False])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(predictions=[0.1, 0.2], references=[0, 1, 1]), "same length"),
        (dict(predictions=[0.1, float("nan")], references=[0, 1]), "finite"),
        (dict(predictions=[math.inf, 0.2], references=[0, 1]), "finite"),
        (dict(predictions=[0.1, -math.inf], references=[0, 1]), "finite"),
        (dict(predictions=[0.1, 0.2], references=[0, 2]), "1 .watermarked. or 0"),
        (dict(predictions=[0.1, 0.2], references=[-1, 1]), "1 .watermarked. or 0"),
        (dict(predictions=[0.1, 0.2], references=[0, 0.5]), "1 .watermarked. or 0"),
        (dict(predictions=[0.1, 0.2], references=[1, 1]), "both classes"),
        (dict(predictions=[0.1, 0.2], references=[0, 0]), "both classes"),
        (dict(predictions=[], references=[]), "both classes"),
        (dict(predictions=[[0.1, 0.2]], references=[[0, 1]]), "1-D"),
        (dict(predictions=["a", "b"], references=[0, 1]), "real numbers"),
        (dict(predictions=[0.1, 0.2], references=[0, 1], fpr=0.0), "strictly between 0 and 1"),
        (dict(predictions=[0.1, 0.2], references=[0, 1], fpr=1.0), "strictly between 0 and 1"),
        (dict(predictions=[0.1, 0.2], references=[0, 1], fpr=-0.1), "strictly between 0 and 1"),
        (dict(predictions=[0.1, 0.2], references=[0, 1], fpr=float("nan")), "strictly between 0 and 1"),
        (dict(predictions=[0.1, 0.2], references=[0, 1], fpr=[0.1, 1.5]), "strictly between 0 and 1"),
        (dict(predictions=[0.1, 0.2], references=[0, 1], fpr=True), "fpr must be"),
        (dict(predictions=[0.1, 0.2], references=[0, 1], fpr="0.1"), "fpr must be"),
        (dict(predictions=[0.1, 0.2], references=[0, 1], fpr=[]), "non-empty"),
    ],
)
def test_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tpr_at_fpr(**kwargs)


# ---------------------------------------------------------------- evaluate


@pytest.fixture(scope="module")
def metric():
    import evaluate

    assert os.environ["HF_HOME"].startswith(__import__("tempfile").gettempdir())
    return evaluate.load(str(METRIC_DIR))


def test_evaluate_load_offline_from_path(metric):
    assert type(metric).__name__ == "TprAtFpr"
    assert (Path(os.environ["HF_HOME"]) / "modules").is_dir()  # evaluate's cache went to the temp HF_HOME
    assert metric.features["predictions"].dtype == "float64"
    assert "false-positive" in metric.description and metric.citation
    assert metric.compute(**EXAMPLE, fpr=0.34) == tpr_at_fpr(**EXAMPLE, fpr=0.34)
    res = metric.compute(**EXAMPLE, fpr=[0.01, 0.34, 0.9])
    assert res["tpr"] == [2 / 3, 1.0, 1.0] and res["threshold"] == [0.4, 0.2, 0.1]
    assert res["fpr"] == [0.0, 1 / 3, 2 / 3] and res["roc_auc"] == 8 / 9
    # float64 features: a threshold that float32 would round is kept exactly
    assert (
        metric.compute(predictions=[0.1 + 1e-12, 0.3], references=[0, 1], fpr=0.5)["threshold"] == 0.1 + 1e-12
    )


def test_evaluate_add_batch(metric):
    metric.add_batch(predictions=EXAMPLE["predictions"][:3], references=EXAMPLE["references"][:3])
    metric.add_batch(predictions=EXAMPLE["predictions"][3:], references=EXAMPLE["references"][3:])
    assert metric.compute(fpr=[0.34]) == tpr_at_fpr(**EXAMPLE, fpr=[0.34])


def test_evaluate_errors():
    import evaluate

    # In memory: after a failed compute, a file-backed evaluate metric waits ~1 s for its stale lock.
    in_memory = evaluate.load(str(METRIC_DIR), keep_in_memory=True)
    for kwargs in [
        dict(predictions=[0.1, float("nan")], references=[0, 1]),
        dict(predictions=[0.1, 0.2], references=[0, 2]),
        dict(predictions=[0.1, 0.2], references=[1, 1]),
        dict(predictions=[0.1, 0.2], references=[0, 1, 1]),
        dict(predictions=[0.1, 0.2], references=[0, 1], fpr=1),
    ]:
        with pytest.raises(ValueError):
            in_memory.compute(**kwargs)
    assert in_memory.compute(**EXAMPLE, fpr=0.34)["tpr"] == 1.0


def test_package_load_path_and_files():
    assert "tpr_at_fpr" in hf_lrdwm.metrics.available()
    assert Path(hf_lrdwm.metrics.path("tpr_at_fpr")) == METRIC_DIR
    for name in ("tpr_at_fpr.py", "core.py", "README.md", "app.py", "requirements.txt"):
        assert (METRIC_DIR / name).is_file(), name  # shipped inside the installed package
    for bad in ("nope", "", "../metrics"):
        with pytest.raises(ValueError, match="unknown hf_lrdwm metric"):
            hf_lrdwm.metrics.path(bad)
    loaded = hf_lrdwm.metrics.load("tpr_at_fpr")
    assert loaded.compute(**EXAMPLE, fpr=[0.34]) == tpr_at_fpr(**EXAMPLE, fpr=[0.34])


def test_card_front_matter_and_examples(metric):
    import yaml

    text = (METRIC_DIR / "README.md").read_text(encoding="utf-8")
    front = yaml.safe_load(text.split("---\n")[1])
    assert front["sdk"] == "gradio" and front["app_file"] == "app.py" and front["title"] and front["emoji"]
    assert front["sdk_version"].split(".")[0] == "6"
    assert {"evaluate", "metric"} <= set(front["tags"])
    for section in ("## Metric Description", "## How to Use", "### Inputs", "### Output Values",
                    "### Examples", "## Limitations and Bias", "## Citation"):  # fmt: skip
        assert section in text, section
    # The doctest-style examples of the card run against the loaded metric.
    examples = "\n".join(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if ">>>" in b)
    stub = types.SimpleNamespace(load=lambda *_a, **_k: metric)
    test = doctest.DocTestParser().get_doctest(examples, {"evaluate": stub}, "README", "README.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0 and runner.tries >= 4


# ---------------------------------------------------------------- the Space app, headless


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword)")  # gradio's queue vs pandas 3
def test_space_app_headless(monkeypatch):
    monkeypatch.setenv("GRADIO_ANALYTICS_ENABLED", "False")
    from gradio_client import Client

    spec = importlib.util.spec_from_file_location("tpr_at_fpr_space_app", METRIC_DIR / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)  # as a Space runs it: a plain file, not a package module
    demo = app.demo  # what `python app.py` launches; app.build_demo() builds a fresh one
    port = _free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        res = client.predict("0.1, 0.4, 0.35, 0.8, 0.9, 0.2", "0 0 1\n1 1 0", "0.34", api_name="/compute")
        assert res == tpr_at_fpr(**EXAMPLE, fpr=0.34)
        res = client.predict(*app.EXAMPLES[1], api_name="/compute")
        assert res["tpr"] == [0.6, 0.6, 0.8] and res["threshold"] == [3.0, 3.0, 2.0]
        with pytest.raises(Exception, match="not 0 or 1"):
            client.predict("0.1, 0.2", "0, 2", "0.1", api_name="/compute")
    finally:
        demo.close()
