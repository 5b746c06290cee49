"""The output: the sink (delta-rs or Spark's Delta writer), the run record, the lock on an output, the catalog
and upkeep. The schemas and storage it writes with are the ground floor's (jobs.base)."""
