"""Every program, report and analysis module the study side names follows its declared
interface (verify.studies.interfaces): generated from grids.PROGRAMS and the study files, so a
new program or analysis is held to it without a line here."""

import pytest

from verify.cli import UsageError
from verify.studies import grids
from verify.studies.interfaces import StudyAnalysis, StudyProgram, StudyReport


@pytest.mark.parametrize("name", sorted(grids.PROGRAMS))
def test_every_program_and_its_report_follow_their_protocols(name):
    program = grids.PROGRAMS[name]
    if name == "verify.images.train":
        pytest.importorskip("diffusers")
    assert isinstance(program.load(), StudyProgram)
    assert isinstance(program.report_module(), StudyReport)
    # A program that runs in packs says which grids it cannot pack.
    assert callable(getattr(program.load(), "check_pack_grid", None)) == program.packs


def test_the_sgd_program_refuses_to_pack_a_grid_of_several_students_a_run():
    program = grids.PROGRAMS["verify.sgd"].load()
    program.check_pack_grid([{"shapes": ["custom"], "widths": [8, 8]}, {"student": "transformer"}])
    with pytest.raises(UsageError, match="trains 2 students of different shapes"):
        program.check_pack_grid([{"shapes": ["custom"]}, {"shapes": ["matched", "balanced"]}])


@pytest.mark.parametrize("study", grids.study_names())
def test_every_study_names_a_known_program_and_an_analysis_that_follows_its_protocol(study):
    assert grids.study_program(study) in grids.PROGRAMS
    analysis = grids.study_analysis(study)
    assert analysis is None or isinstance(analysis, StudyAnalysis)


def test_width_vs_m_is_analysed_by_the_width_module():
    from verify.studies import width

    assert grids.study_analysis("width-vs-M") is width


@pytest.mark.parametrize("analysis, message", [
    ("numpy", "names a module of this project"),
    ("verify.no_such_module", "does not import"),
    ("verify.cli", "lacks analyse_runs or format_analysis"),
])
def test_a_bad_analysis_is_refused_before_any_run(tmp_path, analysis, message):
    path = tmp_path / "bad.yaml"
    path.write_text(f"method: grid\nname: bad\nanalysis: {analysis}\nparameters:\n  M: {{value: 4}}\n")
    with pytest.raises(UsageError, match=message):
        grids.expand(str(path), "paper")
