"""pytest plugin: every tutorials/NN_name.md lesson is one test item.

With the ``notebooks`` extra installed (jupytext, nbclient, ipykernel) the item is the
learner's path: the lesson is converted to a notebook and every cell runs in a fresh
Python kernel whose working folder is an empty temporary folder outside the repository,
so a lesson that leans on the repository's folder or on an earlier test fails here.
Without the extra, the lesson's blocks run in this process (``compiler.lessons.runner``).
"""
from __future__ import annotations

import importlib.util
import os

import pytest

from compiler.lessons.runner import LESSON_NAME, LessonError, execute_notebook, run_lesson, write_notebook

NOTEBOOKS = all(importlib.util.find_spec(m) for m in ("jupytext", "nbclient", "ipykernel"))


def pytest_collect_file(parent, file_path):
    if file_path.suffix == ".md" and LESSON_NAME.match(file_path.name) \
            and file_path.parent.name == "tutorials":
        return LessonFile.from_parent(parent, path=file_path)
    return None


class LessonFile(pytest.File):
    def collect(self):
        yield LessonItem.from_parent(self, name="notebook" if NOTEBOOKS else "lesson")


class LessonItem(pytest.Item):
    """Runs all the lesson's python blocks in order in one namespace."""

    def runtest(self):
        if not NOTEBOOKS:
            run_lesson(str(self.path))
            return
        tmp = self.config._tmp_path_factory.mktemp(self.path.stem)
        nb = write_notebook(str(self.path), str(tmp / "notebooks"))
        work = tmp / "work"
        work.mkdir()
        # a learner's environment: the tests' NUMBA_BOUNDSCHECK=1 would make every
        # kernel compile the engine again, uncached (~20 s each)
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_BOUNDSCHECK"}
        execute_notebook(nb, str(work), env=env)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, LessonError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, f"lesson {self.path.name}"
