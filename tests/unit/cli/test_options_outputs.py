"""The shared checks of a command's output paths in abtest.cli.options (each command's own use
of them is tested through the real entry point in test_bad_input_outputs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from abtest.cli import options as o
from abtest.errors import UserError


def test_check_output_file_passes_a_new_file_in_a_folder(tmp_path: Path) -> None:
    o.check_output_file(tmp_path / "runs.json", "--out")
    assert not (tmp_path / "runs.json").exists()  # checked, nothing made


def test_check_output_file_names_the_path_the_problem_and_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "id.txt"
    with pytest.raises(UserError) as caught:
        o.check_output_file(path, "--run-id-file")
    line = caught.value.one_line()
    assert f"cannot write {path}: folder {path.parent} does not exist" in line
    assert "--run-id-file" in line
