"""A resumed replay with the history (jobs.replay.resume, jobs.sources.replay_state) on small Arrow logs: the replay
of a log's first part keeps its state (_replay_state, _group_fold, _history_state); the replay of the rest with that
state gives the history rows of the rest only, and with the first part's rows, every output of one replay of the
whole log. The kernel the runners call (jobs.pipeline._replay_kernel), without files or Delta."""
from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from offsets_log import MINUTE, T0, random_log

from jobs.base.tables import FOLD_STATE, HISTORY_STATE, REPLAY_STATE
from jobs.pipeline import _replay_kernel
from jobs.replay.chunk import OUTPUTS as CHUNK_OUTPUTS, cutoff_us, read_chunk
from jobs.replay.duplicates import spans
from jobs.replay.partition import OUTPUTS as REPLAY_OUTPUTS, ReplaySettings
from jobs.replay.records import records
from jobs.replay.share_state import OUTPUTS as SHARE_OUTPUTS
from jobs.replay.transactions import folded_transactions
from jobs.sources.replay_state import ReplayState, replayed
from offsets_codec.registry import OFFSETS_TOPIC

OUTPUTS = {**REPLAY_OUTPUTS, **SHARE_OUTPUTS}
STARTED = datetime.fromtimestamp((T0 + 400 * MINUTE) / 1000, tz=timezone.utc)
HISTORY = ("offset_commits", "group_events")  # rows of the first part's replay and the rest's
STATE = ("committed_offsets", "expired_offsets", "consumer_groups", "pending_transactions", "quarantine",
         "commit_windows", "consume_rates", "share_state")  # the rest's alone
KINDS = ["commit", "commit", "commit", "commit", "tombstone", "marker", "marker", "group", "group_tombstone",
         "consumer_member", "consumer_leave", "share", "modern"]


def moment(minutes: int) -> datetime:
    return datetime.fromtimestamp((T0 + minutes * MINUTE) / 1000, tz=timezone.utc)


def replay(raw: pa.Table, as_of: datetime, keep_log: bool, earlier: dict[str, pa.Table] | None = None,
           through: dict[int, int] | None = None) -> dict[str, pa.Table]:
    """Every output of a source task over `raw` and the replay of what it gives (with `earlier`: a state's tables)."""
    chunks: dict[str, list[pa.Table]] = {}
    for name, table in read_chunk([raw], STARTED, as_of, fold=False):
        chunks.setdefault(name, []).append(table)
    inputs = {name: pa.concat_tables(chunks.get(name, [CHUNK_OUTPUTS[name].empty_table()]))
              for name in ("log", "share_log")}
    settings = ReplaySettings(as_of, 20 * 60_000, True, 3, 5 * 60_000, keep_log, through)
    found: dict[str, list[pa.Table]] = {}
    for name, table in _replay_kernel({**inputs, **(earlier or {})}, settings, cutoff_us(STARTED, as_of)):
        found.setdefault(name, []).append(table)
    return {name: pa.concat_tables(found.get(name, [OUTPUTS[name].empty_table()])) for name in OUTPUTS}


def rows(table: pa.Table) -> list[str]:
    return sorted(repr(r) for r in table.to_pylist())


operation = st.tuples(st.integers(0, 1), st.sampled_from(KINDS), st.sampled_from(("g0", "g1")),
                      st.sampled_from("ab"), st.integers(0, 1), st.sampled_from([-1, -1, 201, 202]),
                      st.sampled_from(["COMMIT", "COMMIT", "ABORT"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=st.lists(operation, min_size=2, max_size=60), cut=st.floats(0.05, 0.95),
       first=st.floats(0.1, 1.0), later=st.floats(0.0, 0.5))
def test_the_rest_of_a_log_replayed_from_the_state_of_its_first_part_gives_one_replays_outputs(operations, cut,
                                                                                               first, later):
    log = random_log(operations)
    raw = log.table(batch_metadata=True)
    at = max(1, min(raw.num_rows - 1, int(raw.num_rows * cut)))
    one_as_of = moment(int(len(operations) * first))
    as_of = moment(int(len(operations) * (first + later)))
    one = replay(raw.slice(0, at), one_as_of, keep_log=True)
    state = one[REPLAY_STATE]
    through, deferred = replayed(state, one_as_of)
    resumed = ReplayState("one", {}, state.num_rows, pa.table({}), folded_transactions(state), one_as_of, through,
                          deferred)
    rest = raw.slice(at)
    assume(resumed.refusal(spans(records(rest.filter(pc.equal(rest.column("topic"), OFFSETS_TOPIC)))), as_of) is None)
    two = replay(rest, as_of, keep_log=True, earlier={REPLAY_STATE: state, FOLD_STATE: one[FOLD_STATE],
                                                      HISTORY_STATE: one[HISTORY_STATE]}, through=through)
    whole = replay(raw, as_of, keep_log=False)
    for name in HISTORY:
        assert rows(pa.concat_tables([one[name], two[name]])) == rows(whole[name]), name
    for name in STATE:
        assert rows(two[name]) == rows(whole[name]), name
    whole_rows = whole["group_rows"]
    assert rows(two["group_rows"]) == rows(whole_rows.filter(pc.not_equal(whole_rows.column("kind"), "event")))
