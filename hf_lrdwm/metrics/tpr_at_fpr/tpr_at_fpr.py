"""TPR@FPR: true-positive rate at a fixed false-positive rate (and ROC AUC) for detection scores."""

import datasets
import evaluate

from .core import tpr_at_fpr

_CITATION = """\
@inproceedings{kirchenbauer2023watermark,
  title     = {A Watermark for Large Language Models},
  author    = {Kirchenbauer, John and Geiping, Jonas and Wen, Yuxin and Katz, Jonathan and Miers, Ian
               and Goldstein, Tom},
  booktitle = {Proceedings of the 40th International Conference on Machine Learning},
  year      = {2023}
}
@article{hanley1982auc,
  title   = {The meaning and use of the area under a receiver operating characteristic (ROC) curve},
  author  = {Hanley, James A. and McNeil, Barbara J.},
  journal = {Radiology},
  volume  = {143},
  number  = {1},
  pages   = {29--36},
  year    = {1982}
}
"""

_DESCRIPTION = """\
TPR@FPR measures a detector (e.g. a text-watermark detector) at a fixed false-positive budget: the
threshold is set on the scores of the negatives (human-written texts) so that at most a target share of
them is flagged, and the metric reports the share of positives (watermarked texts) flagged at that
threshold. A text is flagged when its score is strictly greater than the threshold; among all thresholds
whose false-positive rate is at most the target, the one chosen gives the largest true-positive rate.
The ROC AUC (Mann-Whitney, ties counted as 1/2) is reported as well.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `float`): detection scores; higher means more likely watermarked. Must be finite.
    references (`list` of `int`): 1 for watermarked (positive), 0 for human-written (negative). Both
        classes must be present.
    fpr (`float` or `list` of `float`, defaults to 0.01): target false-positive rate(s), each in (0, 1).

Returns:
    tpr (`float` or `list` of `float`): share of positives with score > threshold.
    threshold (`float` or `list` of `float`): the smallest negative score whose achieved FPR is <= fpr.
    fpr (`float` or `list` of `float`): achieved false-positive rate (share of negatives > threshold).
    true_positives (`int` or `list` of `int`): positives with score > threshold.
    false_positives (`int` or `list` of `int`): negatives with score > threshold.
    roc_auc (`float`): area under the ROC curve, ties counted as 1/2.
    num_positives (`int`): number of references equal to 1.
    num_negatives (`int`): number of references equal to 0.
    Lists are returned, one entry per target, when `fpr` is a list.

Examples:
    With `metric = evaluate.load("path/to/tpr_at_fpr")` (the folder holding this script),
    `metric.compute(predictions=..., references=..., fpr=...)` returns the same dict as the pure
    function `tpr_at_fpr` (from `core.py`, next to this script) that it calls:

    >>> results = tpr_at_fpr(
    ...     predictions=[0.1, 0.4, 0.35, 0.8, 0.9, 0.2], references=[0, 0, 1, 1, 1, 0], fpr=0.34
    ... )
    >>> results["tpr"], results["threshold"], results["fpr"]
    (1.0, 0.2, 0.3333333333333333)
    >>> tpr_at_fpr([0.1, 0.4, 0.35, 0.8, 0.9, 0.2], [0, 0, 1, 1, 1, 0], fpr=[0.34, 0.9])["tpr"]
    [1.0, 1.0]
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TprAtFpr(evaluate.Metric):
    """True-positive rate at a target false-positive rate, with the threshold, achieved FPR and ROC AUC."""

    def _info(self):
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("float64"), "references": datasets.Value("int32")}
            ),
            reference_urls=["https://en.wikipedia.org/wiki/Receiver_operating_characteristic"],
        )

    def _compute(self, predictions, references, fpr=0.01):
        return tpr_at_fpr(predictions, references, fpr=fpr)
