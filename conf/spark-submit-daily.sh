#!/usr/bin/env bash
# A daily cron run of offsetlake on a Spark cluster: rebuild the tables from the offsets topic, keep the day's
# state in DIR/snapshots (partitioned by as_of), and register the tables in the cluster's metastore.
#
#   15 0 * * *  /opt/offsetlake/conf/spark-submit-daily.sh >> /var/log/offsetlake-daily.log 2>&1
#
# Needs: the offsetlake wheel installed (pip install 'offsetlake[kafka]') in a Python environment that every
# node has at the same path (OFFSETLAKE_VENV), and Spark's Delta, so that Spark writes the tables and
# registers them as Delta tables. The exit status is offsetlake's: 0, 1 (a failure) or 2 (bad arguments or
# input); both failures print one line naming the problem.
# tests/cli/test_deploy_examples.py checks that every flag after the entry is an option of `offsetlake rebuild`.
set -euo pipefail

VENV=${OFFSETLAKE_VENV:-/opt/offsetlake/venv}
SOURCE=${OFFSETLAKE_SOURCE:-kafka:broker1:9092,broker2:9092}
KAFKA_CONFIG=${OFFSETLAKE_KAFKA_CONFIG:-/etc/offsetlake/client.properties}
OUTPUT=${OFFSETLAKE_OUTPUT:-hdfs:///lake/offsetlake}
DATABASE=${OFFSETLAKE_DATABASE:-offsetlake}
# The Delta release for your Spark, as delta-spark's configure_spark_with_delta_pip names it:
# io.delta:delta-spark_<Spark major.minor>_2.13:<delta-spark version>.
DELTA=${OFFSETLAKE_DELTA_PACKAGE:-io.delta:delta-spark_4.2_2.13:4.4.1}
# Today 00:00 UTC: the state at midnight, and a rerun the same day replaces the same snapshot.
AS_OF=$(date -u +%Y-%m-%dT00:00:00Z)
# The wheel's spark-submit entry, jobs/__main__.py of the installed package: the options of `offsetlake rebuild`.
ENTRY=$("$VENV/bin/python" -c 'import importlib.util; print(importlib.util.find_spec("jobs.__main__").origin)')

exec spark-submit \
  --master yarn \
  --deploy-mode client \
  --driver-memory 4g \
  --packages "$DELTA" \
  --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \
  --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \
  --conf spark.pyspark.python="$VENV/bin/python" \
  "$ENTRY" \
  --source "$SOURCE" \
  --kafka-config "$KAFKA_CONFIG" \
  --output "$OUTPUT" \
  --as-of "$AS_OF" \
  --end-offsets kafka \
  --snapshot \
  --catalog-database "$DATABASE"
