"""Micro-benchmark of the decode hot path: ``python -m offsets_codec.bench [--records N] [--repeat R]``.

Reports µs per record for ``decode_key`` + ``decode_value`` on offset-commit v3 records and on
group-metadata v3 records (three consumer members with realistic subscription and assignment bytes).
The records differ from one another, as in a real dump; the best of ``--repeat`` runs is reported.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

from .consumer_protocol import encode_assignment, encode_subscription
from .records import decode_key, decode_value, encode_key, encode_value
from .registry import REGISTRY

_TYPE_IDS = {rt.name: t for t, rt in REGISTRY.items()}
OFFSET_COMMIT = _TYPE_IDS["OffsetCommit"]
GROUP_METADATA = _TYPE_IDS["GroupMetadata"]


def offset_commit_records(n: int) -> list[tuple[bytes, bytes]]:
    return [
        (
            encode_key(OFFSET_COMMIT, {"group": f"payments-consumer-{i % 97}", "topic": f"orders.v{i % 13}", "partition": i % 48}),
            encode_value(OFFSET_COMMIT, 3, {"offset": 1_000_000 + i, "leaderEpoch": 17, "metadata": "",
                                            "commitTimestamp": 1_700_000_000_000 + i}),
        )
        for i in range(n)
    ]


def group_metadata_records(n: int, members: int = 3) -> list[tuple[bytes, bytes]]:
    topics = ["orders.v1", "payments.v2", "refunds.v1"]
    records = []
    for i in range(n):
        member_list = []
        for m in range(members):
            member_id = f"consumer-{i}-{m}-6f1c2a9e-0d7b-4f4c-9a51-3c1e8a2b7d90"
            sub = encode_subscription({"version": 3, "topics": topics, "userData": None,
                                       "ownedPartitions": [{"topic": t, "partitions": [m, m + 3]} for t in topics],
                                       "generationId": 41, "rackId": None})
            asg = encode_assignment({"version": 3, "assignedPartitions": [{"topic": t, "partitions": [m, m + 3]} for t in topics],
                                     "userData": None})
            member_list.append({"memberId": member_id, "groupInstanceId": None, "clientId": f"consumer-{m}",
                                "clientHost": f"/10.0.{m}.{i % 250}", "rebalanceTimeout": 300000, "sessionTimeout": 45000,
                                "subscription": sub, "assignment": asg})
        records.append((
            encode_key(GROUP_METADATA, {"group": f"payments-consumer-{i % 97}"}),
            encode_value(GROUP_METADATA, 3, {"protocolType": "consumer", "generation": 41, "protocol": "range",
                                             "leader": member_list[0]["memberId"], "currentStateTimestamp": 1_700_000_000_000 + i,
                                             "members": member_list}),
        ))
    return records


def time_per_record(records: list[tuple[bytes, bytes]], repeat: int) -> float:
    """Best-of-``repeat`` µs per record for decode_key + decode_value."""
    dk: Callable = decode_key
    dv: Callable = decode_value
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for key, value in records:
            dv(dk(key).record_type, value)
        best = min(best, time.perf_counter() - start)
    return best / len(records) * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    oc = offset_commit_records(args.records)
    gm = group_metadata_records(max(1, args.records // 10))
    print(f"offset-commit v3   decode_key+decode_value: {time_per_record(oc, args.repeat):6.2f} µs/record "
          f"({len(oc)} records, {sum(len(k) + len(v) for k, v in oc) / len(oc):.0f} bytes each)")
    print(f"group-metadata v3  decode_key+decode_value: {time_per_record(gm, args.repeat):6.2f} µs/record "
          f"({len(gm)} records, 3 members, {sum(len(k) + len(v) for k, v in gm) / len(gm):.0f} bytes each)")


if __name__ == "__main__":
    main()
