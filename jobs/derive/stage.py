"""What each coordinator partition's replayed state becomes once the run knows what spans partitions: topic
names (gathered from every partition) and end offsets (a file, the history of earlier runs, or a live fetch made
after the replay): its members named, its lag, and Burrow's verdict on its offsets."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterator

import pyarrow as pa

from jobs.base.tables import arrow_schema
from jobs.derive.end_offsets import Snapshots
from jobs.derive.lag import consumer_lag
from jobs.derive.members import member_tables
from jobs.derive.status import group_status
from jobs.replay.share_state import share_lag_rows

# The replay's outputs each partition's derivation reads (jobs.replay.partition.OUTPUTS, and share_state.OUTPUTS:
# a `__share_group_state` partition's state, which shares nothing with the offsets partition of its number).
INPUTS = ("committed_offsets", "group_rows", "commit_windows", "consume_rates", "share_state")
OUTPUTS = {t: arrow_schema(t) for t in ("group_members", "group_target_assignments", "streams_topologies",
                                        "consumer_lag", "group_status", "share_partition_state")}


@dataclass(frozen=True)
class DeriveSettings:
    as_of: datetime
    names: dict[str, str]  # topic id -> name (jobs.derive.members.topic_names)
    lag: Snapshots | None  # the end offsets lag subtracts; None: no end offsets, no lag
    # Live end offsets are fetched after as_of: lag then reads them unfiltered, at each offset's as_of.
    lag_as_of: datetime | None
    status: Snapshots | None  # the end offsets Burrow's rules read (None: no lag is known)
    history: bool = True  # group_status (and consume rates) need the commit history
    status_window: int = 10
    rate_window_ms: int = 15 * 60_000


def derive_partition(inputs: dict[str, pa.Table], settings: DeriveSettings) -> Iterator[tuple[str, pa.Table]]:
    """(output name, table) of one coordinator partition's replay outputs INPUTS."""
    yield from member_tables(inputs["group_rows"], settings.names, settings.as_of).items()
    share = inputs.get("share_state")
    if share is not None and share.num_rows:
        share = share.set_column(share.schema.get_field_index("topic"), "topic",
                                 pa.array([settings.names.get(t) for t in share.column("topic_id").to_pylist()],
                                          pa.string()))
        yield "share_partition_state", share
    if settings.lag is not None:
        rates = inputs.get("consume_rates") if settings.history and settings.lag_as_of is not None else None
        yield "consumer_lag", consumer_lag(inputs["committed_offsets"], settings.lag, settings.lag_as_of, rates,
                                           settings.rate_window_ms)
        if share is not None and share.num_rows:
            yield "consumer_lag", consumer_lag(share_lag_rows(share), settings.lag, settings.lag_as_of, None,
                                               settings.rate_window_ms, progress="share_start_offset")
    if settings.history:
        yield "group_status", group_status(inputs["commit_windows"], settings.status, settings.as_of,
                                           settings.status_window)
