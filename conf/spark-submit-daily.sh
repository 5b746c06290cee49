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
#
# Every setting is a variable with the value above as its default, e.g. on a standalone cluster, without
# Spark's Delta (delta-rs writes the tables) and without client settings:
#   OFFSETLAKE_MASTER=spark://spark-master:7077 OFFSETLAKE_DELTA_PACKAGE= OFFSETLAKE_KAFKA_CONFIG= \
#   OFFSETLAKE_OUTPUT=/lake/offsetlake conf/spark-submit-daily.sh
# An empty OFFSETLAKE_DELTA_PACKAGE leaves out --packages and Delta's settings; an empty OFFSETLAKE_KAFKA_CONFIG
# leaves out --kafka-config. tests/cli/test_cluster.py runs it against a standalone cluster that way;
# tests/cli/test_deploy_examples.py checks that every flag after the entry is an option of `offsetlake rebuild`.
set -euo pipefail

VENV=${OFFSETLAKE_VENV:-/opt/offsetlake/venv}
SOURCE=${OFFSETLAKE_SOURCE:-kafka:broker1:9092,broker2:9092}
KAFKA_CONFIG=${OFFSETLAKE_KAFKA_CONFIG-/etc/offsetlake/client.properties}
OUTPUT=${OFFSETLAKE_OUTPUT:-hdfs:///lake/offsetlake}
DATABASE=${OFFSETLAKE_DATABASE:-offsetlake}
SPARK_SUBMIT=${OFFSETLAKE_SPARK_SUBMIT:-spark-submit}
MASTER=${OFFSETLAKE_MASTER:-yarn}
DEPLOY_MODE=${OFFSETLAKE_DEPLOY_MODE:-client}
DRIVER_MEMORY=${OFFSETLAKE_DRIVER_MEMORY:-4g}
# The Delta release for your Spark, as delta-spark's configure_spark_with_delta_pip names it:
# io.delta:delta-spark_<Spark major.minor>_2.13:<delta-spark version>.
DELTA=${OFFSETLAKE_DELTA_PACKAGE-io.delta:delta-spark_4.2_2.13:4.4.1}
# Today 00:00 UTC: the state at midnight, and a rerun the same day replaces the same snapshot.
AS_OF=$(date -u +%Y-%m-%dT00:00:00Z)
# The wheel's spark-submit entry, jobs/__main__.py of the installed package: the options of `offsetlake rebuild`.
ENTRY=$("$VENV/bin/python" -c 'import importlib.util; print(importlib.util.find_spec("jobs.__main__").origin)')

DELTA_OPTIONS=()
if [[ -n $DELTA ]]; then
  DELTA_OPTIONS=(--packages "$DELTA"
    --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension
    --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog)
fi
KAFKA_OPTIONS=()
if [[ -n $KAFKA_CONFIG ]]; then
  KAFKA_OPTIONS=(--kafka-config "$KAFKA_CONFIG")
fi

exec "$SPARK_SUBMIT" \
  --master "$MASTER" \
  --deploy-mode "$DEPLOY_MODE" \
  --driver-memory "$DRIVER_MEMORY" \
  "${DELTA_OPTIONS[@]}" \
  --conf spark.pyspark.python="$VENV/bin/python" \
  "$ENTRY" \
  --source "$SOURCE" \
  "${KAFKA_OPTIONS[@]}" \
  --output "$OUTPUT" \
  --as-of "$AS_OF" \
  --end-offsets kafka \
  --snapshot \
  --catalog-database "$DATABASE"
