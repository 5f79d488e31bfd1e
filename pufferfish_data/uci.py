"""Loaders for the UCI files shipped in ``pufferfish_data/uci/`` (CC BY 4.0, see ATTRIBUTION.md).

Every loader checks the file's sha256 before parsing, so a truncated or edited copy
fails loudly instead of silently shifting the paper's numbers.
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pufferfish_core.errors import PufferfishError

DATA_DIR = Path(__file__).resolve().parent / "uci"

SHA256: dict[str, str] = {
    "adult.data": "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
    "adult.test": "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
    "student-por.csv": "a7594a11d7771c0efe1a740824e0e833da9c4cad07c39a9766a874575563fb3f",
    "bank-full.csv": "d1513ec63b385506f7cfce9f2c5caa9fe99e7ba4e8c3fa264b3aaf0f849ed32d",
}

ADULT_COLUMNS: tuple[str, ...] = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
    "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
    "hours-per-week", "native-country", "income",
)

ADULT_TEST_FIRST_LINE = "|1x3 Cross validator"


class DatasetError(PufferfishError, ValueError):
    """A shipped data file is missing, corrupt or malformed; ``field`` names the file."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Table:
    """Rows of strings exactly as in the file; ``column`` picks one column."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def __len__(self) -> int:
        return len(self.rows)

    def column(self, name: str) -> np.ndarray:
        if name not in self.columns:
            raise DatasetError("column", f"unknown column {name!r}; have {list(self.columns)}")
        k = self.columns.index(name)
        return np.array([row[k] for row in self.rows], dtype=object)

    def int_column(self, name: str) -> np.ndarray:
        return np.array([int(v) for v in self.column(name)], dtype=np.int64)


def _read_verified(name: str, data_dir: Path | None) -> str:
    path = (data_dir if data_dir is not None else DATA_DIR) / name
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetError(name, f"cannot read {path}: {exc.strerror}") from None
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SHA256[name]:
        raise DatasetError(
            name, f"sha256 mismatch for {path} (got {digest}, expected {SHA256[name]}): "
            "the file is corrupt or not the UCI original",
        )
    return raw.decode("utf-8")


def _parse_adult_lines(name: str, text: str, label_suffix: str) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        values = line.split(", ")
        if len(values) != len(ADULT_COLUMNS):
            raise DatasetError(name, f"line {lineno}: expected 15 values, got {len(values)}")
        if label_suffix:
            if not values[-1].endswith(label_suffix):
                raise DatasetError(name, f"line {lineno}: label {values[-1]!r} lacks '.'")
            values[-1] = values[-1][: -len(label_suffix)]
        rows.append(tuple(values))
    return rows


def load_adult(data_dir: Path | None = None) -> Table:
    """adult.data then adult.test (48,842 rows); test labels lose their trailing '.'."""
    train = _read_verified("adult.data", data_dir)
    test = _read_verified("adult.test", data_dir)
    first, _, rest = test.partition("\n")
    if first != ADULT_TEST_FIRST_LINE:
        raise DatasetError("adult.test", f"unexpected first line {first!r}")
    rows = _parse_adult_lines("adult.data", train, "") + _parse_adult_lines("adult.test", rest, ".")
    return Table(ADULT_COLUMNS, tuple(rows))


def _load_semicolon_csv(name: str, data_dir: Path | None) -> Table:
    text = _read_verified(name, data_dir)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=";", quotechar='"')
    header = tuple(next(reader))
    rows: list[tuple[str, ...]] = []
    for lineno, values in enumerate(reader, start=2):
        if not values:
            continue
        if len(values) != len(header):
            raise DatasetError(name, f"line {lineno}: expected {len(header)} values")
        rows.append(tuple(values))
    return Table(header, tuple(rows))


def load_student_por(data_dir: Path | None = None) -> Table:
    """student-por.csv (649 rows, 33 columns)."""
    return _load_semicolon_csv("student-por.csv", data_dir)


def load_bank_full(data_dir: Path | None = None) -> Table:
    """bank-full.csv (45,211 rows, 17 columns)."""
    return _load_semicolon_csv("bank-full.csv", data_dir)


def adult_education_num(data_dir: Path | None = None) -> np.ndarray:
    """The ``education-num`` column (1..16) of adult.data then adult.test, as int64."""
    return load_adult(data_dir).int_column("education-num")
