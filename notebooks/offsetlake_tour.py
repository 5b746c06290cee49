# Databricks notebook source
# MAGIC %md
# MAGIC # offsetlake: a tour
# MAGIC Rebuild consumer-group state from a `__consumer_offsets` dump and query it with SQL.
# MAGIC Runs on Databricks (attach the repo; Delta is built in) and locally:
# MAGIC `.venv/bin/python notebooks/offsetlake_tour.py` from the repository root.

# COMMAND ----------

# MAGIC %md On Databricks, install the package's dependencies on the cluster first (the next cell; Spark and Delta are
# MAGIC the runtime's), or install the wheel (`python -m build --wheel`) as a cluster library. Locally, `bash .ci/setup`
# MAGIC has installed them.

# COMMAND ----------

# MAGIC %pip install "deltalake>=1.1,<2" "cramjam>=2.8" "crc32c>=2.4" "click>=8.1,<9" "vl-convert-python>=1.6" "prometheus-client>=0.20" matplotlib

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
from jobs.tools.sample import write_sample  # noqa: E402
from jobs.runtime.session import get_spark  # noqa: E402
from jobs.readers.views import register_tables  # noqa: E402

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

# The local runner on a laptop, Spark's tasks on Databricks (jobs.engine.choose_runner decides).
summary = run(RebuildConfig.build(source=f"parquet:{WORK / 'dump'}", output=str(WORK / "tables"),
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

# COMMAND ----------

# MAGIC %md ## 7. Burrow's verdict at as_of: who stalled, who stopped, who was rewound
# MAGIC `group_status` applies Burrow's rules to each partition's last commits (`--status-window`); the
# MAGIC group's status is the worst of its partitions. Any `--as-of` backtests an alert rule.

# COMMAND ----------

spark.sql("""
  SELECT group_id, group_status, topic, partition, status, rule, window_commits
  FROM group_status WHERE group_status != 'OK' ORDER BY group_id, topic, partition
""").show(truncate=False)

# COMMAND ----------

# MAGIC %md ## 8. Rebalances: how often, and who left
# MAGIC One `group_events` row per group-level change (a classic rebalance or move to Empty, a modern epoch
# MAGIC or membership change), compared with the change before it.

# COMMAND ----------

spark.sql("""
  SELECT e.group_id, count(*) AS rebalances_last_day, max(e.event_timestamp) AS last_rebalance,
         sum(size(e.members_left)) AS members_left
  FROM group_events e JOIN consumer_groups g USING (group_id)
  WHERE e.event = 'rebalanced' AND e.event_timestamp > g.as_of - INTERVAL 1 DAY
  GROUP BY e.group_id ORDER BY rebalances_last_day DESC LIMIT 5
""").show(truncate=False)

# COMMAND ----------

# MAGIC %md ## 9. Lag in time, and whether the group is catching up
# MAGIC `lag_seconds` interpolates when the log end passed the committed offset from the end-offset
# MAGIC snapshots (`end_offsets_history`); the rates are offsets per second over `--rate-window-minutes`.

# COMMAND ----------

spark.sql("""
  SELECT group_id, topic, partition, lag, round(lag_seconds, 1) AS lag_seconds,
         round(consume_rate, 3) AS consume_rate, round(produce_rate, 3) AS produce_rate, catch_up_seconds
  FROM consumer_lag WHERE lag_seconds IS NOT NULL ORDER BY lag_seconds DESC LIMIT 10
""").show(truncate=False)

# COMMAND ----------

# MAGIC %md ## 10. A group over time: committed offset, lag, and its rebalance timeline
# MAGIC The plots are shown, and saved as PNG images beside the tables.

# COMMAND ----------

import matplotlib  # noqa: E402

if "DATABRICKS_RUNTIME_VERSION" not in os.environ and not os.environ.get("DISPLAY"):
    matplotlib.use("Agg")  # no screen: draw into files only
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

PLOTS = WORK / "plots"
PLOTS.mkdir(parents=True, exist_ok=True)
GROUP, TOPIC, PARTITION = "stall-app", "lagging-0", 0

commits = spark.sql(f"""
  SELECT commit_timestamp, committed_offset FROM offset_commits
  WHERE group_id = '{GROUP}' AND topic = '{TOPIC}' AND partition = {PARTITION} AND committed_offset IS NOT NULL
  ORDER BY record_offset
""").toPandas()
ends = spark.sql(f"""
  SELECT observed_at, log_end_offset FROM end_offsets_history
  WHERE topic = '{TOPIC}' AND partition = {PARTITION} ORDER BY observed_at
""").toPandas()
# The lag at each commit: the log end interpolated between the snapshots around it, minus the commit.
seconds = lambda ts: ts.astype("datetime64[ns]").astype("int64") / 1e9  # noqa: E731
commits["lag"] = np.interp(seconds(commits["commit_timestamp"]), seconds(ends["observed_at"]),
                           ends["log_end_offset"]) - commits["committed_offset"]

fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
top.step(commits["commit_timestamp"], commits["committed_offset"], where="post", label="committed offset")
top.plot(ends["observed_at"], ends["log_end_offset"], "o--", label="log end offset (snapshots)")
top.set_ylabel("offset")
top.legend()
bottom.plot(commits["commit_timestamp"], commits["lag"], color="tab:red")
bottom.set_ylabel("lag (offsets)")
fig.suptitle(f"{GROUP} on {TOPIC}-{PARTITION}")
fig.savefig(PLOTS / "offset_and_lag.png", dpi=90)
plt.show()

events = spark.sql("""
  SELECT event_timestamp, event, member_count FROM group_events
  WHERE group_id = 'flapping-app' ORDER BY event_timestamp, record_offset
""").toPandas()
fig, ax = plt.subplots(figsize=(9, 3))
for event, rows in events.groupby("event"):
    ax.scatter(rows["event_timestamp"], rows["member_count"], label=event, s=18)
ax.set_ylabel("members after the event")
ax.set_title("flapping-app: rebalance timeline")
ax.legend()
fig.savefig(PLOTS / "rebalances.png", dpi=90)
plt.show()
print("plots:", sorted(p.name for p in PLOTS.glob("*.png")))
