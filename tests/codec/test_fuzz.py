"""The fuzz harness (``python -m offsets_codec.fuzz``): a bounded, seeded share of its run, and checks that the
harness itself sees escapes, slow inputs and over-allocation, and is reproducible from its seed."""

import io
import json
import time

from offsets_codec import REGISTRY, Batch, DecodeError, decode_key, decode_value, encode_key, fuzz
from offsets_codec.segments import read_segment


def test_a_seeded_share_of_the_fuzzing_escapes_nothing():
    report = fuzz.run(20_000, seed=20_240_611, max_ms=50)
    assert report.escape_count == 0, report.escapes
    assert report.alloc_breach_count == 0, report.alloc_breaches
    assert report.alloc_measured == 20_000  # every input, by default
    # over_bound counts inputs whose fastest of 3 re-timings took over 50 ms of CPU time, 50x the slowest
    # decode seen (< 1 ms): a busy machine delays a decode in wall time, not its CPU time by that much.
    assert report.over_bound == 0, report.slow


def test_the_corpus_covers_every_record_type_and_version_and_decodes_cleanly():
    corpus = fuzz.build_corpus()
    values = {(s.record_type, decode_value(s.record_type, s.data).version) for s in corpus if s.target == "value"}
    assert values == {(t, v) for t, rt in REGISTRY.items() for v in rt.value.versions}
    assert {decode_key(s.data).record_type for s in corpus if s.target == "key"} == set(REGISTRY)
    assert {s.target for s in corpus} == set(fuzz.DECODERS)
    for s in corpus:
        fuzz.DECODERS[s.target](s.record_type, s.data)
        if s.target == "segment":
            assert all(isinstance(item, Batch) for item in read_segment(io.BytesIO(s.data)))


def test_mutations_are_determined_by_the_seed():
    corpus = fuzz.build_corpus()
    first = list(fuzz.mutated_inputs(corpus, 7, 500))
    assert first == list(fuzz.mutated_inputs(corpus, 7, 500))
    assert [data for _, data, _ in first] != [data for _, data, _ in fuzz.mutated_inputs(corpus, 8, 500)]
    assert {op for _, _, ops in first for op in ops} == {m.__name__[1:] for m in fuzz.MUTATORS}
    assert sum(data != s.data for s, data, _ in first) > 450


def test_length_fields_are_found_for_the_huge_length_mutation():
    key = encode_key(1, {"group": "g", "topic": "t", "partition": 0})  # 0001 | 0001 67 | 0001 74 | 00000000
    assert {(2, 2), (5, 2)} <= set(fuzz._length_positions(key))


def _fragile_key(record_type, data):
    if len(data) % 7 == 3:
        raise IndexError("index out of range")
    return decode_key(data)


def test_the_harness_reports_an_escape():
    report = fuzz.run(1_000, seed=5, decoders={**fuzz.DECODERS, "key": _fragile_key})
    assert report.escape_count > 0 and not report.ok
    e = report.escapes[0]
    assert (e["decoder"], e["error"]) == ("key", "IndexError: index out of range")
    assert e["where"].startswith("test_fuzz.py:")  # the innermost frame: where it was raised
    assert len(bytes.fromhex(e["hex"])) % 7 == 3 == e["length"] % 7


def test_a_decode_error_is_accepted_unless_it_wraps_an_internal_error():
    def always_decode_error(record_type, data):
        raise DecodeError("truncated at byte 0 reading int16 type")

    def internal(record_type, data):
        try:
            {}["x"]
        except KeyError as e:
            raise DecodeError(f"internal decoder error: KeyError: {e}") from e

    assert fuzz.run(300, seed=1, decoders=dict.fromkeys(fuzz.DECODERS, always_decode_error)).ok
    report = fuzz.run(300, seed=1, decoders=dict.fromkeys(fuzz.DECODERS, internal))
    assert report.escape_count == 300 and report.escapes[0]["error"] == "KeyError: 'x'"


def test_the_harness_reports_slow_inputs_and_allocation_breaches():
    def slow_or_greedy(record_type, data):
        if data[:1] == b"\x00" and len(data) % 50 == 1:
            busy_until = time.thread_time() + 0.005  # CPU time: the harness does not count sleeping
            while time.thread_time() < busy_until:
                pass
        if len(data) % 50 == 2:
            bytearray(fuzz.ALLOC_BASE + fuzz.ALLOC_PER_BYTE * len(data) + 1)

    report = fuzz.run(400, seed=3, max_ms=2, alloc_every=1, decoders=dict.fromkeys(fuzz.DECODERS, slow_or_greedy))
    assert report.escape_count == 0 and report.alloc_measured == 400
    assert report.over_bound == len(report.slow) > 0 and report.slowest_ms > 2
    assert report.alloc_breach_count > 0 and report.worst_alloc_ratio > 1
    assert all(b["length"] % 50 == 2 for b in report.alloc_breaches)
    assert not report.ok


def test_the_command_prints_one_json_object_and_sets_the_exit_status(capsys, monkeypatch):
    assert fuzz.main(["--inputs", "300", "--seed", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["inputs"], out["seed"], out["escape_count"], out["ok"]) == (300, 4, 0, True)
    monkeypatch.setitem(fuzz.DECODERS, "key", _fragile_key)
    assert fuzz.main(["--inputs", "300", "--seed", "4"]) == 1
    text = capsys.readouterr().out
    assert "IndexError: index out of range" in text and text.rstrip().endswith("FAILED")
