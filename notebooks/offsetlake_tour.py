# Databricks notebook source
# MAGIC %md
# MAGIC # offsetlake: a tour
# MAGIC Rebuild consumer-group state from a `__consumer_offsets` dump and query it with SQL.
# MAGIC Runs on Databricks (attach the repo; Delta is built in) and locally:
# MAGIC `.venv/bin/python notebooks/offsetlake_tour.py` from the repository root.

# COMMAND ----------

import os
import sys
from pathlib import Path

ROOT = Path(os.getcwd())
while not (ROOT / "jobs").is_dir() and ROOT != ROOT.parent:  # notebooks run from notebooks/ or the repo root
    ROOT = ROOT.parent
sys.path.insert(0, str(ROOT))

from jobs.config import RebuildConfig  # noqa: E402
from jobs.pipeline import run  # noqa: E402
from jobs.sample import write_sample  # noqa: E402
from jobs.session import get_spark  # noqa: E402
from jobs.views import register_tables  # noqa: E402

WORK = Path(os.environ.get("OFFSETLAKE_TOUR_DIR", ROOT / "sample" / "tour"))
spark = get_spark()

# COMMAND ----------

# MAGIC %md ## 1. A sample dump (on a real cluster: `spark.read.format("kafka")` with read_committed, then `.write.parquet`)

# COMMAND ----------

stats = write_sample(WORK / "dump", records=int(os.environ.get("OFFSETLAKE_TOUR_RECORDS", "20000")),
                     end_offsets=WORK / "end-offsets.txt")
print(stats)

# COMMAND ----------

# MAGIC %md ## 2. Rebuild every table as of the newest record

# COMMAND ----------

summary = run(spark, RebuildConfig.build(source=f"parquet:{WORK / 'dump'}", output=str(WORK / "tables"),
                                         end_offsets=str(WORK / "end-offsets.txt")))
print(summary)
register_tables(spark, WORK / "tables")

# COMMAND ----------

# MAGIC %md ## 3. Groups by type and state

# COMMAND ----------

spark.sql("""
  SELECT coalesce(protocol_type, '(simple)') AS protocol_type, state, count(*) AS groups, sum(offset_count) AS offsets
  FROM consumer_groups GROUP BY 1, 2 ORDER BY 1, 2
""").show()

# COMMAND ----------

# MAGIC %md ## 4. Offsets that retention will delete within a day, and the worst lag

# COMMAND ----------

spark.sql("""
  SELECT group_id, topic, partition, committed_offset, expires_at
  FROM committed_offsets WHERE expires_at < as_of + INTERVAL 1 DAY ORDER BY expires_at LIMIT 10
""").show(truncate=False)

spark.sql("""
  SELECT group_id, sum(lag) AS total_lag, max(lag) AS max_partition_lag
  FROM consumer_lag GROUP BY group_id ORDER BY total_lag DESC LIMIT 10
""").show(truncate=False)

# COMMAND ----------

# MAGIC %md ## 5. Who consumes what, and what could not be decoded

# COMMAND ----------

spark.sql("""
  SELECT m.group_id, m.member_id, m.client_host, size(m.assigned_partitions) AS partitions, m.subscribed_topics
  FROM group_members m JOIN consumer_groups g USING (group_id) WHERE g.state = 'Stable' ORDER BY partitions DESC LIMIT 10
""").show(truncate=False)

spark.sql("SELECT coordinator_partition, record_offset, error FROM quarantine").show(truncate=False)

# COMMAND ----------

# MAGIC %md ## 6. Transactions still open: offsets an exactly-once application has written but not yet committed
# MAGIC They are not committed offsets; they keep their partition's offset from expiring and their group alive.

# COMMAND ----------

spark.sql("""
  SELECT group_id, topic, partition, producer_id, offset AS pending_offset, record_offset
  FROM pending_transactions ORDER BY group_id, topic, partition
""").show(truncate=False)
