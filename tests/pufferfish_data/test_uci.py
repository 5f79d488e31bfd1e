import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pufferfish_data import (
    DatasetError,
    adult_education_num,
    load_adult,
    load_bank_full,
    load_student_por,
)
from pufferfish_data.uci import DATA_DIR, SHA256

# module-scoped fixtures below: one worker process runs this module (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("test_uci")


@pytest.fixture(scope="module")
def adult():
    return load_adult()


def test_row_counts(adult):
    # UCI: 32,561 + 16,281 adult rows; 649 students; 45,211 bank clients.
    assert len(adult) == 48_842
    assert len(load_student_por()) == 649
    assert len(load_bank_full()) == 45_211


def test_adult_parse(adult):
    assert adult.rows[0][:4] == ("39", "State-gov", "77516", "Bachelors")
    # first adult.test row comes right after the 32,561 adult.data rows, label without '.'
    assert adult.rows[32_561][3] == "11th"
    assert adult.rows[32_561][-1] == "<=50K"
    assert set(adult.column("income")) == {"<=50K", ">50K"}
    # published UCI class counts for the 48,842 rows
    assert Counter(adult.column("income")) == {"<=50K": 37_155, ">50K": 11_687}


def test_adult_education_num(adult):
    edu = adult_education_num()
    assert edu.dtype == np.int64
    assert edu.shape == (48_842,)
    assert edu[:3].tolist() == [13, 13, 9]
    assert edu.min() == 1 and edu.max() == 16
    # education-num is a relabelling of education: one number per name
    pairs = set(zip(adult.column("education"), edu.tolist(), strict=True))
    assert len(pairs) == 16


def test_student_and_bank_parse():
    student = load_student_por()
    assert student.columns[0] == "school" and student.columns[-1] == "G3"
    assert student.rows[0][:3] == ("GP", "F", "18")
    assert student.rows[0][-3:] == ("0", "11", "11")  # G1, G2 quoted in the file, G3 bare
    assert set(student.column("romantic")) == {"no", "yes"}
    bank = load_bank_full()
    assert bank.columns[:3] == ("age", "job", "marital")
    assert bank.rows[0][:3] == ("58", "management", "married")
    assert Counter(bank.column("marital"))["divorced"] == 5_207
    assert set(bank.column("marital")) == {"married", "single", "divorced"}


def test_unknown_column_is_clear_error():
    with pytest.raises(DatasetError, match="unknown column"):
        load_student_por().column("nope")


def _copy(tmp_path: Path) -> Path:
    for name in SHA256:
        shutil.copy(DATA_DIR / name, tmp_path / name)
    return tmp_path


def test_clean_copy_loads(tmp_path):
    assert len(load_student_por(_copy(tmp_path))) == 649


def test_corrupted_copy_fails_checksum(tmp_path):
    d = _copy(tmp_path)
    raw = bytearray((d / "student-por.csv").read_bytes())
    raw[-3] = ord("9") if raw[-3] != ord("9") else ord("8")  # one digit of the last G3
    (d / "student-por.csv").write_bytes(bytes(raw))
    with pytest.raises(DatasetError, match="sha256 mismatch") as info:
        load_student_por(d)
    assert info.value.field == "student-por.csv"
    assert isinstance(info.value, ValueError)


def test_corrupted_adult_test_fails(tmp_path):
    d = _copy(tmp_path)
    with open(d / "adult.test", "ab") as fh:
        fh.write(b"junk\n")
    with pytest.raises(DatasetError, match="adult.test"):
        load_adult(d)


def test_missing_file_is_clear_error(tmp_path):
    with pytest.raises(DatasetError, match="cannot read") as info:
        load_bank_full(tmp_path)
    assert info.value.field == "bank-full.csv"
