"""The solved-case library (doctor/similar.py): the nearest case by TF-IDF over the mined pastes, used as the likely
reading where no rule reads a paste and as a pointer beside a rule's reading."""

from __future__ import annotations

import time

import pytest

from steadytune.doctor import similar
from steadytune.doctor.case_files import Case
from steadytune.doctor.cases import score_case
from steadytune.doctor.diagnose import diagnose_text, report_findings
from steadytune.doctor.similar import LIKELY_SIMILARITY, Library, library, nearest_case


def _case(number: int, paste: str, cause: str = "arch-missing", fix: str = "the fix", tool: str = "torch") -> Case:
    return Case(f"https://github.com/example/repo/issues/{number}", tool, paste, cause, fix, ("fix",), "2025-01-02")


FROBS = [
    _case(1, "frobnicator qzx wobble lattice refused the spindle", "driver", "reload the spindle module"),
    _case(2, "kettle teapot brewing overflow in the saucer", "precision", "use a larger saucer"),
    _case(3, "lantern wick glows dim under the umbrella", "device-access", "add the user to the lantern group"),
]


def test_the_nearest_case_is_the_one_sharing_the_rare_words():
    found = Library(FROBS).nearest("today the frobnicator wobble happened again, lattice gone")
    assert found is not None and found.case is FROBS[0]
    assert 0 < found.score < 1
    assert "issues/1" in found.line() and "similarity" in found.line()


def test_an_identical_paste_scores_one_and_a_case_is_never_its_own_neighbour():
    lib = Library(FROBS)
    assert lib.nearest(FROBS[1].paste).score == pytest.approx(1.0)
    found = lib.nearest(FROBS[1].paste, exclude_source=FROBS[1].source)
    assert found is None or found.case is not FROBS[1]


def test_chinese_is_read_in_character_pairs():
    lib = Library(FROBS + [_case(4, "4张3090微调Qwen7B爆显存", "out-of-memory", "lower cutoff_len")])
    found = lib.nearest("两张4090 微调 Qwen14B 又爆显存了")
    assert found is not None and found.case.cause == "out-of-memory"


def test_nothing_in_common_gives_no_case():
    assert Library(FROBS).nearest("zzzz yyyy xxxx") is None
    assert Library(FROBS).nearest("") is None


def test_the_library_holds_no_held_out_case():
    cases = library().cases
    assert len(cases) > 100
    assert all(c.part == "train" for c in cases)


def test_a_real_paste_reworded_finds_a_case_of_its_family():
    found = nearest_case("tensorflow-rocm is ignoring my visible gpu device: AMDGPU version gfx1031 is not in the "
                         "supported AMDGPU versions gfx1030, gfx900, gfx906")
    assert found is not None and found.case.cause == "arch-missing"
    assert "gfx1031" in found.case.paste or "gfx103" in found.case.paste


def test_a_paste_no_rule_reads_gets_its_nearest_case_as_a_pointer_not_a_diagnosis(monkeypatch):
    monkeypatch.setattr(similar, "library", lambda: Library(FROBS))
    report = diagnose_text("the frobnicator wobble came back after a reboot, lattice refused\n"
                           "FrobError: spindle lost")
    assert report.by_likeness and report.similar.case is FROBS[0]
    assert report.top is None   # a likeness named the right cause 12 times in 49 on unseen pastes: never the cause
    findings = report_findings(report, "paste")
    [pointer] = [f for f in findings if f.check == "similar-case"]
    assert pointer.severity == "warning" and FROBS[0].source in pointer.what and "not a diagnosis" in pointer.why
    assert "reload the spindle module" in pointer.fix
    assert not any(f.check == "diagnosis" for f in findings)
    # the error line is still named: a likeness explains no line
    assert any(f.check == "unrecognised-error" and "FrobError" in f.what for f in findings)


def test_a_complaint_no_rule_reads_and_no_thread_resembles_says_so_with_the_next_step(monkeypatch):
    monkeypatch.setattr(similar, "library", lambda: Library(FROBS))
    report = diagnose_text("[Bug]: my zeppelin is sad and nobody knows why")
    assert report.complains and report.top is None and not report.unrecognised
    [said] = [f for f in report_findings(report, "paste") if f.check == "not-read"]
    assert said.severity == "warning" and said.fix.startswith("run and paste: ")
    assert not [f for f in report_findings(diagnose_text("all good, training finished"), "paste")
                if f.check == "not-read"]   # a paste that complains of nothing gets no such finding


def test_a_feature_request_or_a_question_in_chinese_is_a_complaint_said_to_be_unread(monkeypatch):
    monkeypatch.setattr(similar, "library", lambda: Library(FROBS))
    for text in ("[Feature]: please support my zeppelin board", "请问为何zeppelin只有一张在工作？",
                 "能否增加zeppelin的适配"):
        report = diagnose_text(text)
        assert report.complains, text
        assert [f for f in report_findings(report, "paste") if f.check == "not-read"], text
    assert not diagnose_text("训练完成，zeppelin 一切正常。").complains


def test_common_words_alone_are_no_likeness():
    lib = Library([_case(i, f"AttributeError: module has no attribute, tool{i} thing{i}") for i in range(40)])
    found = lib.nearest("AttributeError: module 'numpy' has no attribute 'float'")
    assert found is not None and found.rare_shared == 0 and not found.likely
    assert lib.nearest("AttributeError: module tool7 has no attribute").likely


def test_a_weak_likeness_is_not_a_reading(monkeypatch):
    monkeypatch.setattr(similar, "library", lambda: Library(FROBS))
    report = diagnose_text("the umbrella of words: " + " ".join(f"word{i}" for i in range(400)) + " lantern")
    assert report.similar is not None and report.similar.score < LIKELY_SIMILARITY
    assert not report.by_likeness and report.top is None


def test_a_paste_that_complains_of_nothing_gets_no_reading_by_likeness(monkeypatch):
    monkeypatch.setattr(similar, "library", lambda: Library(FROBS))
    report = diagnose_text("kettle teapot brewing finished, the saucer is fine")
    assert report.similar.case is FROBS[1] and not report.by_likeness and report.top is None
    assert diagnose_text("[Bug]: kettle teapot brewing overflow again").by_likeness   # a tracker's title complains


def test_a_rule_reading_keeps_first_place_and_a_close_case_is_a_pointer():
    paste = ("rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: Illegal seek for GPU arch : "
             "gfx1032")
    report = diagnose_text(paste)
    assert not report.by_likeness and report.top.family == "arch-missing" and "10.3.0" in report.top.fix
    pointers = [f for f in report_findings(report, "paste") if f.check == "similar-case"]
    assert len(pointers) == 1 and pointers[0].severity == "info" and "github.com" in pointers[0].what


def test_the_scorer_never_lets_a_case_answer_itself(monkeypatch):
    own = _case(7, "frobnicator qzx wobble lattice refused the spindle\nFrobError: no spindle", "driver",
                "reload the spindle module")
    own = Case(own.source, own.tool, own.paste, own.cause, own.fix, ("spindle",))
    monkeypatch.setattr(similar, "library", lambda: Library([own]))
    assert diagnose_text(own.paste, exclude_case=own.source).similar is None
    monkeypatch.setattr(similar, "library", lambda: Library([own, FROBS[0]]))
    report = diagnose_text(own.paste, exclude_case=own.source)
    assert report.similar.case is FROBS[0] and report.by_likeness   # another thread may be pointed to
    assert not score_case(own).solved   # but a likeness is a pointer, never a reading that solves a case


def test_a_huge_paste_is_read_in_bounded_time():
    start = time.perf_counter()
    nearest_case("HIP error: invalid device function\n" * 400_000)
    assert time.perf_counter() - start < 5



def test_words_of_trouble_make_a_complaint_that_is_said_to_be_unread(monkeypatch):
    """Round 11: 16 of 153 new pastes got no finding at all; they said their trouble in words no reading uses."""
    monkeypatch.setattr(similar, "library", lambda: Library(FROBS))
    for text in ("Zeppelin failing to load the widget after idle time",
                 "ZEPPELIN_DEVICES=0,1 not respected by the launcher",
                 "zeppelin board: performance degradation for AllToAll",
                 "half-precision zeppelin training, hidden outputs overflowing to inf",
                 "zeppelin 加载插件的时候报错", "ZEPPELIN_DEVICES=0,1 无效",
                 "Is it possible to get a build for the zeppelin board? thanks"):
        report = diagnose_text(text)
        assert report.complains, text
        assert [f for f in report_findings(report, "paste") if f.check == "not-read"], text
    for calm in ("zeppelin 0.3 installed; the run finished in 41 minutes",
                 "the overflow guard is on: zeppelin loss scale 65536", "训练完成，loss 0.41"):
        assert not [f for f in report_findings(diagnose_text(calm), "paste") if f.check == "not-read"], calm
