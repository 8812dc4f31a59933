import pytest

from sheetcheck.errors import InputFileError, StateError
from sheetcheck.files import read_json_file


def test_reads_json(tmp_path):
    p = tmp_path / "a.json"
    p.write_text('{"x": [1, 2]}')
    assert read_json_file(p, what="thing") == {"x": [1, 2]}


def test_missing_file_names_it(tmp_path):
    with pytest.raises(InputFileError, match=r"cannot read thing .*nope\.json.*Check the path"):
        read_json_file(tmp_path / "nope.json", what="thing")


def test_syntax_error_gives_line_and_column_and_its_own_class(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{\n  "a": 1,\n  oops\n}')
    with pytest.raises(StateError, match=r"bad\.json is not valid JSON \(line 3, column 3"):
        read_json_file(p, what="state file", parse_error=StateError)
