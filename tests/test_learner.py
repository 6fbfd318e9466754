"""The learner's path: the README's first commands, the lessons, the pictures.

A newcomer copies the README's commands into a fresh shell and runs the lessons from
wherever they are. These tests hold the README, CI, the lessons and the figures to
that: the README's test command is the one ``.ci/run`` runs; every link resolves;
nothing outside the repository is cited; every lesson says how to run it and keeps its
solution apart; the demo runs from an empty folder outside the repository; the SVG
figures are what the code draws now. (Each lesson runs as a notebook from an empty
folder in ``tutorials/conftest.py``; one runs here through the runner as a script.)
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
LESSONS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.md"))

#: pages other branches add (their owners write them); linked from the README already
def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def fresh_env(tmp_path) -> dict:
    """This checkout first on the path, the tuning database in ``tmp_path``, the engine
    cache wherever the user's is (a fresh compile would cost ~20 s per test)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), WAVEFUSE_CACHE=str(tmp_path / "tune.db"))
    env.pop("NUMBA_BOUNDSCHECK", None)
    return env


def test_readme_is_a_short_page():
    assert len(README.splitlines()) <= 170


def test_readme_test_command_is_what_ci_runs():
    install, *_ = sh_blocks(README)
    assert "pip install ." in install and "wavefuse demo" in install
    test_cmd = sh_blocks(README)[1].strip()
    pip, pytest_cmd = [c.strip() for c in test_cmd.split("&&")]
    ci = (ROOT / ".ci" / "run").read_text()
    assert f'\n{pytest_cmd}\n' in ci                      # the same pytest invocation
    extras = set(re.search(r"\.\[([a-z,]+)\]", pip).group(1).split(","))
    ci_extras = set(re.search(r"pip install '\.\[([a-z,]+)\]'", ci).group(1).split(","))
    assert extras <= ci_extras and "notebooks" in extras


def test_every_link_of_the_readme_and_docs_resolves():
    pages = [ROOT / "README.md", ROOT / "tutorials" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *LESSONS]
    missing = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            path = (page.parent / target).resolve()
            if not path.exists():
                missing.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not missing, missing


def test_nothing_outside_the_repository_is_cited_as_a_path():
    code = [p for pkg in ("gpusim", "compiler", "codegen_hip") for p in (ROOT / pkg).rglob("*.py")]
    for page in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md"),
                 *LESSONS, *code]:
        text = page.read_text()
        assert "../shared" not in text and "shared/HARDWARE" not in text \
            and "shared/DESIGN" not in text and "shared/seeds" not in text, page.name


def test_every_lesson_says_how_to_run_it_and_keeps_its_solution_apart():
    for lesson in LESSONS:
        text = lesson.read_text()
        head = "\n".join(text.splitlines()[:8])
        assert "python -m compiler.lessons.runner tutorials/" + lesson.name in head, lesson.name
        assert "from exercises import" not in text, lesson.name
        if "## Exercise" in text:
            ex, sol = text.index("## Exercise"), text.find("## Solution")
            assert sol > ex, f"{lesson.name}: the solution follows the exercise, apart"
            assert "```python\n" not in text[ex:sol].replace("```python no-run\n", ""), \
                f"{lesson.name}: the exercise section runs nothing; its solution is at the end"


def test_the_readme_lists_every_lesson_in_order():
    listed = re.findall(r"\(tutorials/(\d\d_[a-z_]+\.md)\)", README)
    names = [p.name for p in LESSONS]
    assert listed[:len(names)] == names or [n for n in listed if n in names] == names
    assert listed[-1] == "12_search.md"


def test_lesson_runs_as_a_script_from_an_empty_folder(tmp_path):
    """Lesson 1 through ``python -m compiler.lessons.runner`` in a fresh process whose
    working folder is outside the repository (the checkers ship in the package)."""
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run([sys.executable, "-m", "compiler.lessons.runner",
                        str(ROOT / "tutorials" / "01_coalescing.md")], cwd=work,
                       env=fresh_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ok: " in r.stdout and "PASS" in r.stdout
    assert list(work.iterdir()) == []                  # the lesson leaves nothing behind


def test_runner_refuses_a_missing_lesson(tmp_path, capsys):
    from compiler.lessons.runner import main
    assert main([str(tmp_path / "nope.md")]) == 2
    assert "no lesson file" in capsys.readouterr().err


@pytest.mark.slow
def test_readme_first_command_runs_the_demo_from_an_empty_folder(tmp_path):
    """The README's first command, after its install: ``wavefuse demo`` in a fresh
    process, from an empty folder outside the repository."""
    assert "wavefuse demo" in sh_blocks(README)[0]
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run([sys.executable, "-m", "compiler.cli", "demo"], cwd=work,
                       env=dict(fresh_env(tmp_path), COLUMNS="90"), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    for step in ("graph", "fusion", "tune", "candidates", "timeline", "source"):
        assert step in r.stdout
    assert "bars start at the fastest" in r.stdout
    assert list(work.iterdir()) == []


def test_fuse_explain_hint_names_a_command_that_parses(capsys):
    from compiler import cli
    assert cli.main(["fuse", "softmax", "--explain"]) == 0
    out = capsys.readouterr().out
    hint = re.search(r"`wavefuse (view explain [^`]+)`", " ".join(out.split()))
    assert hint, out[-500:]
    argv = hint.group(1).split()
    assert argv[:3] == ["view", "explain", "softmax"] and "--tune" in argv
    cli.build_parser().parse_args(argv)          # the command the hint names exists


@pytest.mark.slow
def test_figures_regenerate_as_checked_in(tmp_path):
    """``python -m compiler.lessons.figures`` draws exactly the checked-in SVGs."""
    from compiler.lessons.figures import FIGURES, main
    assert main([str(tmp_path)]) == 0
    for name in FIGURES:
        want = (ROOT / "docs" / "figures" / name).read_text()
        assert (tmp_path / name).read_text() == want, \
            f"docs/figures/{name} is stale: run python -m compiler.lessons.figures docs/figures"


def test_a_lesson_becomes_a_notebook_that_runs_and_fails_where_the_lesson_fails(tmp_path):
    pytest.importorskip("jupytext")
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from compiler.lessons.runner import LessonError, execute_notebook, to_notebook, write_notebook

    lesson = tmp_path / "01_t.md"
    lesson.write_text("# t\n\n```python\nimport os\nx = os.getcwd()\n```\n\n"
                      "```python no-run\nraise RuntimeError('shown, not run')\n```\n\n"
                      "```python\nassert x.endswith('work'), x\n```\n")
    nb = to_notebook(str(lesson))
    kinds = [c.cell_type for c in nb.cells]
    assert kinds.count("code") == 2 and "shown, not run" in nb.cells[kinds.index("code") + 1].source
    path = write_notebook(str(lesson), str(tmp_path / "nb"))
    (tmp_path / "work").mkdir()
    execute_notebook(path, str(tmp_path / "work"))          # runs in the given folder
    lesson.write_text(lesson.read_text().replace("endswith('work')", "endswith('elsewhere')"))
    path = write_notebook(str(lesson), str(tmp_path / "nb"))
    with pytest.raises(LessonError, match="elsewhere"):
        execute_notebook(path, str(tmp_path / "work"))
