"""The contract's raw-record frame, which every source produces (the schema of Spark's Kafka source)."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.errors import BadInput

REQUIRED = {
    "key": (T.BinaryType,),
    "value": (T.BinaryType,),
    "partition": (T.IntegerType, T.ShortType, T.LongType, T.ByteType),
    "offset": (T.LongType, T.IntegerType),
    "timestamp": (T.TimestampType, T.TimestampNTZType, T.LongType, T.IntegerType),
}
# Batch metadata that segment and live sources may add (used by transactional replay).
OPTIONAL = {
    "topic": "string",
    "timestampType": "int",
    "producer_id": "bigint",
    "producer_epoch": "smallint",
    "is_transactional": "boolean",
    "is_control": "boolean",
}


def normalise(df: DataFrame, origin: str) -> DataFrame:
    """Check the input columns and return key, value, partition, offset, timestamp (+ optional metadata).

    The timestamp may be a timestamp or a bigint of epoch milliseconds; unknown extra columns are dropped.
    """
    fields = {f.name: f.dataType for f in df.schema}
    missing = [c for c in REQUIRED if c not in fields]
    if missing:
        raise BadInput(
            f"{origin}: missing required column(s) {', '.join(missing)} "
            f"(found: {', '.join(fields) or 'none'}); expected key, value, partition, offset, timestamp"
        )
    for name, allowed in REQUIRED.items():
        if not isinstance(fields[name], allowed):
            raise BadInput(f"{origin}: column {name} has type {fields[name].simpleString()}, expected "
                           + " or ".join(t().simpleString() for t in allowed))
    ts = F.col("timestamp")
    if isinstance(fields["timestamp"], (T.LongType, T.IntegerType)):
        ts = F.timestamp_millis(ts)
    columns = [
        F.col("key"),
        F.col("value"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("bigint").alias("offset"),
        ts.cast("timestamp").alias("timestamp"),
    ]
    columns += [F.col(name).cast(dtype).alias(name) for name, dtype in OPTIONAL.items() if name in fields]
    return df.select(columns)
