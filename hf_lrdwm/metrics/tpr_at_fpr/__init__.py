"""The ``tpr_at_fpr`` evaluate metric module (``evaluate.load`` reads ``tpr_at_fpr.py`` in this folder).

The pure, numpy-only computation lives in :mod:`hf_lrdwm.metrics.tpr_at_fpr.core`; importing this package
imports neither ``evaluate`` nor ``gradio``.
"""
