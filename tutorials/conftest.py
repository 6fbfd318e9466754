"""pytest plugin: every tutorials/NN_name.md lesson is one test item (see lesson_runner)."""
from __future__ import annotations

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lesson_runner import LessonError, run_lesson  # noqa: E402


def pytest_collect_file(parent, file_path):
    if file_path.suffix == ".md" and re.match(r"^\d\d[a-z]?_", file_path.name) \
            and file_path.parent.name == "tutorials":
        return LessonFile.from_parent(parent, path=file_path)
    return None


class LessonFile(pytest.File):
    def collect(self):
        yield LessonItem.from_parent(self, name="lesson")


class LessonItem(pytest.Item):
    """Runs all the lesson's python blocks in order in one namespace."""

    def runtest(self):
        run_lesson(str(self.path))

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, LessonError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, f"lesson {self.path.name}"
