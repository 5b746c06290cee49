"""The tables' Arrow schemas as Spark sees them (Spark's own conversion, one place)."""
from __future__ import annotations

from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from jobs.base.tables import arrow_schema


def spark_schema(table: str) -> StructType:
    """Table `table`'s schema for Spark."""
    return from_arrow_schema(arrow_schema(table))
