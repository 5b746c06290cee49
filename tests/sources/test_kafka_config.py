"""Kafka client settings (--kafka-config), secrets, and the options built for Spark's own Kafka source."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from jobs.base.errors import BadInput, redact
from jobs.config import KafkaOptions
from jobs.derive.end_offsets import Snapshots, history_rows
from jobs.derive.lag import consumer_lag
from jobs.sources.kafka import Slice
from jobs.sources.kafka_client import Cluster
from jobs.sources.kafka_config import parse_properties, to_librdkafka
from jobs.sources.kafka_spark import SPARK_KAFKA_CLASS, choose_reader, source_options, spark_kafka_options

SECRET = "pa55-w0rd=;x"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required \\\n'
        '    username="alice" \\\n    password="pa55-w0rd=;x";')


def test_properties_follow_java_util_properties():
    text = f"""# a comment
! another
security.protocol = SASL_SSL
sasl.mechanism:PLAIN
client.id offsetlake\\u002dtest
sasl.jaas.config={JAAS}
ssl.endpoint.identification.algorithm=
key\\=with\\:seps = v
"""
    props = parse_properties(text)
    assert props == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "client.id": "offsetlake-test",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="alice" password="pa55-w0rd=;x";',
        "ssl.endpoint.identification.algorithm": "", "key=with:seps": "v",
    }


def test_java_settings_map_to_librdkafka():
    java = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "client.id": "c",
            "sasl.jaas.config": JAAS.replace("\\\n", "").replace("plain.PlainLoginModule", "scram.ScramLoginModule"),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/ca.pem",
            "ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/etc/me.p12", "ssl.keystore.password": "kp",
            "ssl.endpoint.identification.algorithm": "", "ssl.protocol": "TLSv1.3"}
    assert to_librdkafka(java) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "client.id": "c",
        "sasl.username": "alice", "sasl.password": SECRET, "ssl.ca.location": "/etc/ca.pem",
        "ssl.keystore.location": "/etc/me.p12", "ssl.keystore.password": "kp",
        "ssl.endpoint.identification.algorithm": "none",
    }
    kerberos = 'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k.tab" principal="kafka/h@R";'
    assert to_librdkafka({"sasl.jaas.config": kerberos}) == {"sasl.kerberos.principal": "kafka/h@R",
                                                             "sasl.kerberos.keytab": "/k.tab"}


@pytest.mark.parametrize("java, fragment", [
    ({"ssl.truststore.location": "/t.jks"}, "ssl.truststore.location: librdkafka cannot read JKS"),
    ({"ssl.keystore.location": "/k.jks"}, "ssl.keystore.location: librdkafka cannot read JKS key stores"),
    ({"bootstrap.servers": "b:9092"}, "bootstrap.servers is set by offsetlake (give the brokers with --source"),
    ({"isolation.level": "read_uncommitted"}, "use --kafka-isolation"),
    ({"sasl.login.callback.handler.class": "com.x.Y"}, "names a Java class"),
    ({"sasl.jaas.config": "com.x.CustomLoginModule required secret=\"" + SECRET + "\";"}, "login module CustomLoginModule"),
    ({"sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required password=\"" + SECRET + "\";"},
     "PlainLoginModule needs username and password"),
])
def test_unmappable_settings_are_rejected_by_key_never_by_value(java, fragment):
    with pytest.raises(BadInput) as e:
        to_librdkafka(java, "--kafka-config c.properties")
    assert fragment in str(e.value) and SECRET not in str(e.value) and "\n" not in str(e.value)


def test_secret_values_are_redacted_from_any_text():
    java = parse_properties(f"sasl.jaas.config={JAAS}\nclient.id=c\n")
    rd = to_librdkafka(java)
    cluster = Cluster("h:1", java, rd)
    text = f"auth failed for alice with {SECRET} (client c)"
    assert redact(text, java, rd) == "auth failed for alice with *** (client c)"
    assert SECRET not in str(cluster.fail("cannot reach the brokers", text))


def test_spark_kafka_source_options_read_exactly_the_plan():
    cluster = Cluster("b1:9092,b2:9092", {"security.protocol": "SASL_SSL", "sasl.jaas.config": "J"},
                      {"security.protocol": "SASL_SSL"}, "read_committed", 12.5)
    slices = [Slice(0, 3, 10), Slice(1, 0, 0), Slice(2, 5, 7)]
    options = spark_kafka_options(cluster, slices)
    assert json.loads(options.pop("assign")) == {"__consumer_offsets": [0, 1, 2]}
    assert json.loads(options.pop("startingOffsets")) == {"__consumer_offsets": {"0": 3, "1": 0, "2": 5}}
    assert json.loads(options.pop("endingOffsets")) == {"__consumer_offsets": {"0": 10, "1": 0, "2": 7}}
    assert options == {
        "kafka.bootstrap.servers": "b1:9092,b2:9092", "kafka.isolation.level": "read_committed",
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": "J",  # Java names, as Spark wants
        "kafka.request.timeout.ms": "12500", "kafka.default.api.timeout.ms": "12500",
        "kafkaConsumer.pollTimeoutMs": "12500", "failOnDataLoss": "true", "includeHeaders": "false",
    }
    uncommitted = Cluster("b:1", isolation="read_uncommitted")
    assert spark_kafka_options(uncommitted, slices)["kafka.isolation.level"] == "read_uncommitted"
    python = source_options(cluster, slices)
    assert python["isolation"] == "read_committed" and python["kafka.security.protocol"] == "SASL_SSL"
    assert "kafka.sasl.jaas.config" not in python  # the Python reader gets librdkafka's names
    assert json.loads(python["slices"])[2] == {"partition": 2, "start": 5, "end": 7, "topic": "__consumer_offsets"}
    # The share coordinator's topic, when the cluster has it, is read in the same query.
    both = spark_kafka_options(cluster, [*slices, Slice(1, 4, 9, "__share_group_state")])
    assert json.loads(both["assign"]) == {"__consumer_offsets": [0, 1, 2], "__share_group_state": [1]}
    assert json.loads(both["endingOffsets"])["__share_group_state"] == {"1": 9}


def test_reader_choice_follows_the_classpath(spark):
    from jobs.runtime.classpath import has_jvm_class

    assert not has_jvm_class(spark, SPARK_KAFKA_CLASS)  # no spark-sql-kafka jar in this environment
    assert choose_reader(spark, "auto") == "python" and choose_reader(spark, "python") == "python"
    with pytest.raises(BadInput, match="--kafka-reader spark: Spark's Kafka source is not on the classpath"):
        choose_reader(spark, "spark")


def test_kafka_options_are_validated(tmp_path):
    assert KafkaOptions.build() == KafkaOptions(None, "read_committed", 30.0, "auto")
    with pytest.raises(BadInput, match="--kafka-config .*nope: no such file"):
        KafkaOptions.build(str(tmp_path / "nope"))
    with pytest.raises(BadInput, match="--kafka-isolation 'dirty'"):
        KafkaOptions.build(isolation="dirty")


def test_lag_flags_offsets_below_the_log_start():
    as_of = datetime(2026, 1, 1, tzinfo=timezone.utc)
    committed = pa.table({"group_id": ["g", "g"], "topic": ["t", "t"], "partition": pa.array([0, 1], pa.int32()),
                          "committed_offset": pa.array([5, 50], pa.int64()),
                          "as_of": pa.array([as_of, as_of], pa.timestamp("us", tz="UTC"))})
    fetched = datetime(2026, 1, 2, tzinfo=timezone.utc)
    live = pa.table({"topic": ["t", "t"], "partition": pa.array([0, 1], pa.int32()),
                     "offset": pa.array([100, 100], pa.int64()), "log_start_offset": pa.array([10, None], pa.int64()),
                     "fetched_at": pa.array([fetched, fetched], pa.timestamp("us", tz="UTC"))})

    def lag(ends: pa.Table) -> dict:  # a single snapshot, current whenever it was taken (read with as_of None)
        table = consumer_lag(committed, Snapshots.of(history_rows(ends, as_of), None), None, None)
        return {r["partition"]: r for r in table.to_pylist()}

    rows = lag(live)
    assert (rows[0]["lag"], rows[0]["log_start_offset"], rows[0]["below_log_start"],
            rows[0]["end_offsets_fetched_at"]) == (95, 10, True, fetched)
    assert (rows[1]["lag"], rows[1]["below_log_start"]) == (50, None)  # log start unknown
    from_file = lag(live.select(["topic", "partition", "offset"]))
    assert {(r["below_log_start"], r["log_start_offset"], r["end_offsets_fetched_at"]) for r in from_file.values()} == {
        (None, None, None)}


def test_client_secrets_stay_out_of_query_plans(spark, capsys):
    from jobs.sources.kafka_spark import SOURCE_NAME, OffsetsTopicSource

    spark.dataSource.register(OffsetsTopicSource)
    cluster = Cluster("h:1", {}, to_librdkafka({"sasl.jaas.config": JAAS.replace("\\\n", "")}))
    df = spark.read.format(SOURCE_NAME).options(**source_options(cluster, [Slice(0, 0, 1)])).load()
    df.explain(True)
    plan = capsys.readouterr().out
    assert "offsetlake_kafka" in plan and SECRET not in plan
