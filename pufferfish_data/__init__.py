"""The UCI data sets used by the paper's experiments (CC BY 4.0, see ATTRIBUTION.md)."""

from pufferfish_data.uci import (
    DatasetError,
    Table,
    adult_education_num,
    load_adult,
    load_bank_full,
    load_student_por,
)

__all__ = [
    "DatasetError",
    "Table",
    "adult_education_num",
    "load_adult",
    "load_bank_full",
    "load_student_por",
]
