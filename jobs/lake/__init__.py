"""The output: table schemas, the sink (delta-rs or Spark's Delta writer), the run record, the lock on an output,
and the catalog."""
