"""One resolved connection to a Kafka cluster, and the bounded, batched cluster calls offsetlake makes.

Every call is bounded by the configured timeout and every failure becomes a one-line BadInput naming the
cause; no message built here carries a secret value (see jobs.base.errors.redact).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from jobs.base.errors import BadInput, redact
from jobs.config import KafkaOptions
from jobs.sources.kafka_config import read_properties, to_librdkafka

OFFSETS_TOPIC = "__consumer_offsets"
LIST_OFFSETS_CHUNK = 1000  # topic-partitions per ListOffsets batch
# librdkafka's own log lines would go straight to stderr and break the one-line error contract; the
# cause of a failure is reported through error_cb instead (see Cluster.last_error).
_QUIET = logging.getLogger("offsetlake.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _require_confluent_kafka() -> None:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        raise BadInput("the kafka source needs confluent-kafka: pip install 'offsetlake[kafka]'") from None


@dataclass
class Cluster:
    """bootstrap servers + client settings (Java names from the file, and their librdkafka mapping)."""

    bootstrap: str
    java: dict[str, str] = field(default_factory=dict)
    librdkafka: dict[str, str] = field(default_factory=dict)
    isolation: str = "read_committed"
    timeout_s: float = 30.0
    origin: str = "--source kafka"
    last_error: str | None = None

    @classmethod
    def open(cls, bootstrap: str, options: KafkaOptions, origin: str) -> "Cluster":
        """Validate the brokers list and load the properties file (no connection is made yet)."""
        _require_confluent_kafka()
        brokers = [b.strip() for b in bootstrap.split(",")]
        if not all(b.rpartition(":")[0] and b.rpartition(":")[2].isdigit() for b in brokers):
            raise BadInput(f"{origin}: expected HOST:PORT[,HOST:PORT...]")
        java = read_properties(options.config_file) if options.config_file else {}
        origin_file = f"--kafka-config {options.config_file}"
        return cls(",".join(brokers), java, to_librdkafka(java, origin_file), options.isolation, options.timeout_s, origin)

    def conf(self, **extra: Any) -> dict[str, Any]:
        """librdkafka settings for a client of this cluster; timeouts follow --kafka-timeout."""
        ms = int(self.timeout_s * 1000)
        conf: dict[str, Any] = {"socket.timeout.ms": max(ms, 10), "socket.connection.setup.timeout.ms": max(ms, 1000)}
        conf.update(self.librdkafka)
        conf.update(extra)
        conf["bootstrap.servers"] = self.bootstrap
        conf["logger"] = _QUIET
        conf["error_cb"] = self._on_error
        return conf

    def _on_error(self, err: Any) -> None:
        self.last_error = err.str()

    def redact(self, text: str) -> str:
        return redact(text, self.java, self.librdkafka)

    def fail(self, what: str, err: Any) -> BadInput:
        """A BadInput for `what` failing with `err` (a KafkaError, KafkaException or text), cause included."""
        kerr = err.args[0] if hasattr(err, "args") and err.args and hasattr(err.args[0], "str") else err
        text = kerr.str() if hasattr(kerr, "str") else str(err)
        name = kerr.name() if hasattr(kerr, "name") else ""
        timed_out = name in ("_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN") or "timed out" in text.lower()
        detail = f"{name}: {text}" if name and name not in text else text
        if timed_out:
            detail = f"no answer within {self.timeout_s:g}s ({detail}"
            detail += f"; last error: {self.last_error})" if self.last_error and self.last_error not in detail else ")"
        return BadInput(self.redact(f"{self.origin}: {what}: {detail}").replace("\n", " "))

    def admin(self) -> Any:
        """An AdminClient; a bad setting in --kafka-config is reported by key, never by value."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        try:
            return AdminClient(self.conf())
        except (KafkaException, ValueError, TypeError) as e:
            raise self.fail("cannot create a client with these settings", e) from None

    def partitions(self, admin: Any, topic: str, optional: bool = False) -> list[int]:
        """The topic's partition ids from a metadata request (which never auto-creates the topic); `optional`:
        none when there is no such topic."""
        from confluent_kafka import KafkaException

        try:
            # All topics, not one by name: a metadata request naming a topic may auto-create it.
            metadata = admin.list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            raise self.fail("cannot reach the brokers", e) from None
        info = metadata.topics.get(topic)
        if info is None and optional:
            return []
        if info is None:
            raise BadInput(f"{self.origin}: topic {topic} does not exist (or this principal may not describe it)")
        if info.error is not None:
            raise self.fail(f"cannot describe topic {topic}", info.error)
        return sorted(info.partitions)

    def list_offsets(self, admin: Any, tps: Iterable[tuple[str, int]], latest: bool, isolation: str,
                     on_error: Callable[[tuple[str, int], Any], None] | None = None) -> dict[tuple[str, int], int]:
        """Earliest or latest offsets of `tps`, LIST_OFFSETS_CHUNK partitions per request.

        A partition's error raises a BadInput unless `on_error` takes it (e.g. to skip a deleted topic).
        """
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        level = IsolationLevel.READ_COMMITTED if isolation == "read_committed" else IsolationLevel.READ_UNCOMMITTED
        spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()
        pending = list(tps)
        out: dict[tuple[str, int], int] = {}
        for i in range(0, len(pending), LIST_OFFSETS_CHUNK):
            chunk = {TopicPartition(t, p): spec for t, p in pending[i:i + LIST_OFFSETS_CHUNK]}
            try:
                futures = admin.list_offsets(chunk, isolation_level=level, request_timeout=self.timeout_s)
            except KafkaException as e:
                raise self.fail("cannot list offsets", e) from None
            for tp, future in futures.items():
                key = (tp.topic, tp.partition)
                try:
                    out[key] = future.result(timeout=self.timeout_s + 5).offset
                except KafkaException as e:
                    if on_error is None:
                        raise self.fail(f"cannot list offsets of {tp.topic}-{tp.partition}", e) from None
                    on_error(key, e.args[0])
                except TimeoutError:
                    raise self.fail(f"cannot list offsets of {tp.topic}-{tp.partition}", "timed out") from None
        return out

