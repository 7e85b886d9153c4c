"""Metrics on hand-checked confusion matrices (expected values worked out in the comments)."""

import pytest

from steadytune.eval.metrics import (
    class_distribution,
    classification_report,
    confusion_matrix,
    format_distribution,
    macro_f1,
    majority_baseline,
    per_class_scores,
    plot_confusion_matrix,
    relative_error_reduction,
)

NAMES = ["消极", "中性", "积极"]
GOLD = [0, 0, 0, 1, 1, 2]
PRED = [0, 0, 1, 1, 2, 2]


def test_confusion_matrix_rows_are_gold():
    # gold 0 -> predicted 0,0,1; gold 1 -> 1,2; gold 2 -> 2
    assert confusion_matrix(GOLD, PRED, 3) == [[2, 1, 0], [0, 1, 1], [0, 0, 1]]
    with pytest.raises(ValueError):
        confusion_matrix([0], [0, 1], 2)


def test_report_by_hand():
    report = classification_report(GOLD, PRED, NAMES)
    assert report["n"] == 6
    assert report["accuracy"] == pytest.approx(4 / 6)
    pc = report["per_class"]
    # 消极: P = 2/2, R = 2/3, F1 = 2*1*(2/3)/(1+2/3) = 0.8
    assert (pc["消极"]["precision"], pc["消极"]["recall"], pc["消极"]["f1"]) == pytest.approx((1.0, 2 / 3, 0.8))
    # 中性: P = 1/2 (one 消极 predicted as 中性), R = 1/2, F1 = 0.5
    assert (pc["中性"]["precision"], pc["中性"]["recall"], pc["中性"]["f1"]) == pytest.approx((0.5, 0.5, 0.5))
    # 积极: P = 1/2, R = 1/1, F1 = 2*0.5/1.5 = 2/3
    assert (pc["积极"]["precision"], pc["积极"]["recall"], pc["积极"]["f1"]) == pytest.approx((0.5, 1.0, 2 / 3))
    assert [pc[n]["support"] for n in NAMES] == [3, 2, 1]
    assert report["macro_f1"] == pytest.approx((0.8 + 0.5 + 2 / 3) / 3)
    assert report["majority_baseline"] == {"label": "消极", "accuracy": 0.5}


def test_macro_f1_skips_classes_absent_from_gold_and_predictions():
    # class 2 never occurs and is never predicted: F1 over classes 0 and 1 only.
    per_class = per_class_scores(confusion_matrix([0, 0, 1, 1], [0, 1, 1, 1], 3), NAMES)
    # class 0: P 1, R 1/2, F1 2/3; class 1: P 2/3, R 1, F1 0.8
    assert macro_f1(per_class) == pytest.approx((2 / 3 + 0.8) / 2)
    assert macro_f1(per_class, only_present=False) == pytest.approx((2 / 3 + 0.8 + 0) / 3)


def test_always_majority_has_baseline_accuracy_and_low_macro_f1():
    gold = [0] * 55 + [1] * 25 + [2] * 20
    report = classification_report(gold, [0] * 100, NAMES)
    assert report["accuracy"] == pytest.approx(0.55) == report["majority_baseline"]["accuracy"]
    # only 消极 has F1 > 0: P 0.55, R 1 -> F1 = 1.1/1.55
    assert report["macro_f1"] == pytest.approx((1.1 / 1.55) / 3)


def test_relative_error_reduction_seed_003():
    # (0.734 - 0.594) / (1 - 0.594) = 0.140 / 0.406
    assert relative_error_reduction(0.734, 0.594) == pytest.approx(0.3448, abs=1e-4)
    assert relative_error_reduction(0.5, 1.0) is None
    assert relative_error_reduction(0.4, 0.5) == pytest.approx(-0.2)


def test_distribution_and_majority():
    assert majority_baseline([], NAMES) == {"label": None, "accuracy": 0.0}
    dist = class_distribution([0, 2, 2, 2], NAMES)
    assert dist["中性"] == {"count": 0, "share": 0.0} and dist["积极"]["share"] == 0.75
    line = format_distribution("test", [0, 2, 2, 2], NAMES)
    assert "4 examples" in line and "积极 3 (75.0%)" in line and "majority baseline 0.750 (always 积极)" in line


def test_confusion_png(tmp_path):
    path = plot_confusion_matrix([[2, 1, 0], [0, 1, 1], [0, 0, 1]], NAMES, tmp_path / "cm.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 1000
