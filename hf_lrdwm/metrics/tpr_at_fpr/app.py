"""Gradio 6 Space for the ``tpr_at_fpr`` evaluate metric.

Written by hand: ``evaluate.utils.launch_gradio_widget`` (evaluate 0.4.6) uses ``gr.inputs``, which
gradio 6 removed. Run with ``python app.py`` (as a Space does); the endpoint is ``/compute``.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import evaluate
import gradio as gr

HERE = Path(__file__).resolve().parent
_SPLIT = re.compile(r"[\s,;]+")

EXAMPLES = [
    ["0.1, 0.4, 0.35, 0.8, 0.9, 0.2", "0, 0, 1, 1, 1, 0", "0.34"],
    ["1 2 2 3 3 3 4 4 5 6", "0 0 1 0 1 0 1 1 0 1", "0.2, 0.5, 0.7"],
]


@functools.lru_cache(maxsize=1)
def _metric():
    # The script path, not the folder: a Space's folder is not named after the metric.
    return evaluate.load(str(HERE / "tpr_at_fpr.py"))


def _tokens(text: str, what: str) -> list[str]:
    items = [t for t in _SPLIT.split(text or "") if t]
    if not items:
        raise ValueError(f"{what} is empty")
    return items


def _floats(text: str, what: str) -> list[float]:
    out = []
    for t in _tokens(text, what):
        try:
            out.append(float(t))
        except ValueError:
            raise ValueError(f"{what}: {t!r} is not a number") from None
    return out


def _labels(text: str) -> list[int]:
    out = []
    for t in _tokens(text, "references"):
        if t not in {"0", "1"}:
            raise ValueError(f"references: {t!r} is not 0 or 1")
        out.append(int(t))
    return out


def compute(predictions: str, references: str, fpr: str) -> dict:
    """Parse the text boxes (numbers separated by commas, spaces or new lines) and compute the metric."""
    try:
        targets = _floats(fpr, "fpr")
        return _metric().compute(
            predictions=_floats(predictions, "predictions"),
            references=_labels(references),
            fpr=targets[0] if len(targets) == 1 else targets,
        )
    except ValueError as err:
        raise gr.Error(str(err)) from None


def _card() -> str:
    """The metric card without its Space front matter."""
    try:
        text = (HERE / "README.md").read_text(encoding="utf-8")
    except OSError:
        return ""
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end != -1:
            text = text[end + 4 :]
    return text.strip()


def build_demo() -> gr.Blocks:
    with gr.Blocks(title="TPR@FPR") as demo:
        gr.Markdown(
            "# TPR@FPR\nTrue-positive rate of a detector at a fixed false-positive rate, with the threshold "
            "that achieves it and the ROC AUC. Higher score = more likely watermarked; a text is flagged "
            "when its score is **strictly greater** than the threshold."
        )
        with gr.Row():
            with gr.Column():
                predictions = gr.Textbox(
                    label="predictions (detection scores)", lines=3, placeholder="0.1, 0.4, 0.35, 0.8"
                )
                references = gr.Textbox(
                    label="references (1 = watermarked, 0 = human)", lines=3, placeholder="0, 0, 1, 1"
                )
                fpr = gr.Textbox(label="target fpr (one value or several)", value="0.01")
                button = gr.Button("Compute", variant="primary")
            with gr.Column():
                result = gr.JSON(label="result")
        gr.Examples(EXAMPLES, inputs=[predictions, references, fpr], cache_examples=False)
        button.click(compute, inputs=[predictions, references, fpr], outputs=result, api_name="compute")
        card = _card()
        if card:
            with gr.Accordion("Metric card", open=False):
                gr.Markdown(card)
    return demo


demo = build_demo()

if __name__ == "__main__":
    demo.launch()
