"""librdkafka's mock cluster as a test fixture: a real Kafka-protocol broker on localhost, no JVM.

confluent-kafka does not expose the mock cluster's handle, so this holds its own rd_kafka_t, made through
ctypes on the wheel's bundled librdkafka, and uses librdkafka's mock API for what the protocol cannot do
here (create a topic with N partitions: the mock has no controller for CreateTopics; inject errors).
"""
from __future__ import annotations

import ctypes
import glob
from pathlib import Path

import confluent_kafka

_c = ctypes.c_void_p


def _library() -> ctypes.CDLL:
    libs = Path(confluent_kafka.__file__).resolve().parents[1] / "confluent_kafka.libs"
    found = glob.glob(str(libs / "librdkafka-*.so*"))
    if not found:
        raise RuntimeError(f"no bundled librdkafka under {libs}")
    lib = ctypes.CDLL(found[0])
    lib.rd_kafka_conf_new.restype = _c
    lib.rd_kafka_conf_set.argtypes = [_c, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_new.restype = _c
    lib.rd_kafka_new.argtypes = [ctypes.c_int, _c, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_handle_mock_cluster.restype = _c
    lib.rd_kafka_handle_mock_cluster.argtypes = [_c]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [_c]
    lib.rd_kafka_mock_topic_create.argtypes = [_c, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_topic_set_error.argtypes = [_c, ctypes.c_char_p, ctypes.c_int]
    lib.rd_kafka_mock_partition_delete_records.argtypes = [_c, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int64]
    lib.rd_kafka_mock_push_request_errors_array.argtypes = [_c, ctypes.c_int16, ctypes.c_size_t,
                                                             ctypes.POINTER(ctypes.c_int)]
    lib.rd_kafka_destroy.argtypes = [_c]
    return lib


class MockCluster:
    """One mock broker; `bootstrap` is "127.0.0.1:PORT" for any confluent-kafka client. Call close()."""

    def __init__(self, brokers: int = 1) -> None:
        self._lib = _library()
        err = ctypes.create_string_buffer(512)
        conf = self._lib.rd_kafka_conf_new()
        for key, value in (("test.mock.num.brokers", str(brokers)), ("log_level", "3")):
            if self._lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), err, len(err)) != 0:
                raise RuntimeError(err.value.decode())
        self._rk = self._lib.rd_kafka_new(0, conf, err, len(err))  # 0 = a producer handle: holds the cluster
        if not self._rk:
            raise RuntimeError(err.value.decode())
        self._mc = self._lib.rd_kafka_handle_mock_cluster(self._rk)
        self.bootstrap: str = self._lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()

    def create_topic(self, topic: str, partitions: int) -> None:
        rc = self._lib.rd_kafka_mock_topic_create(self._mc, topic.encode(), partitions, 1)
        if rc != 0:
            raise RuntimeError(f"rd_kafka_mock_topic_create({topic}): error {rc}")

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """The partition's records before offset `before` are gone (its log start moves there), as retention or
        kafka-delete-records.sh leave it; the mock has no DeleteRecords request for clients to send."""
        rc = self._lib.rd_kafka_mock_partition_delete_records(self._mc, topic.encode(), partition, before)
        if rc != 0:
            raise RuntimeError(f"rd_kafka_mock_partition_delete_records({topic}-{partition}): error {rc}")

    def set_topic_error(self, topic: str, error_code: int) -> None:
        """Every metadata response reports `error_code` for `topic` (0 clears it)."""
        self._lib.rd_kafka_mock_topic_set_error(self._mc, topic.encode(), error_code)

    def fail_requests(self, api_key: int, *error_codes: int) -> None:
        """The next len(error_codes) requests of `api_key` (1 = Fetch) fail with these codes, in order."""
        errors = (ctypes.c_int * len(error_codes))(*error_codes)
        self._lib.rd_kafka_mock_push_request_errors_array(self._mc, api_key, len(error_codes), errors)

    def close(self) -> None:
        if self._rk:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None


def produce_rows(bootstrap: str, topic: str, rows: list[tuple]) -> None:
    """Produce OffsetsLog rows (key, value, topic, partition, offset, timestamp_ms, type, batch metadata...) in
    order, each to its partition with its CreateTime; offsets then match the rows' offsets in an empty
    partition. Batch metadata is not produced (a consumer never sees it)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                         "linger.ms": 5})
    failed: list = []
    for key, value, _topic, partition, _offset, ts, *_ in rows:
        producer.produce(topic, key=key, value=value, partition=partition, timestamp=ts,
                         on_delivery=lambda err, _msg: err is not None and failed.append(err))
        producer.poll(0)
    if producer.flush(30) != 0 or failed:
        raise RuntimeError(f"produce failed: {failed[:1] or 'not finished in 30s'}")


def produce_data(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    """`counts[p]` plain records into partition p of an ordinary topic (so it has end offsets)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic, value=b"x%d" % i, partition=partition)
    if producer.flush(30) != 0:
        raise RuntimeError("produce did not finish in 30s")


