"""Evaluation as a library: label scoring and generation for classification, metrics (accuracy, macro-F1,
confusion matrix, baselines), BLEU/ROUGE of generated text, and the label-map sanity checks. The `eval` recipe
(evaluate.py), the demo, training's periodic evaluation and `serve` call it.
"""
