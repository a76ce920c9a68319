"""The executor's result encoding (`codec.encode_envelope_results`) writes the bytes the
json.dumps form of `_envelope_result_to_wire` writes, so the wire is unchanged, and they
decode back to the same per-item updates."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from scheduler_core.codec import (
    WIRE_VERSION,
    EnvelopeResult,
    _envelope_result_to_wire,
    decode_results,
    encode_envelope_results,
)
from scheduler_core.item_states import RESULT_STATES
from scheduler_core.model import CommandId

texts = st.text()  # every code point, quotes, backslashes and control characters included
LETTERS = "".join(s.value for s in RESULT_STATES)  # the letters a result may carry


@st.composite
def results(draw: st.DrawFn) -> EnvelopeResult:
    n = draw(st.integers(1, 6))
    first = draw(st.integers(0, 100_000))
    contiguous = draw(st.booleans())
    indices = (
        list(range(first, first + n))
        if contiguous
        else draw(st.lists(st.integers(0, 100_000), min_size=n, max_size=n, unique=True))
    )
    offsets = draw(st.none() | st.lists(st.integers(0, 10**6), min_size=n, max_size=n) | st.just([0] * n))
    said = draw(st.booleans())  # a message, exceptions or log lines: the json.dumps path
    return EnvelopeResult(
        trigger_id=draw(st.integers(1, 2**62)),
        scheduled_ms=draw(st.integers(0, 2**45)),
        page_id=draw(st.none() | st.text(min_size=1).map(CommandId)),  # (an empty one is None on the wire)
        indices=indices,
        letters="".join(draw(st.sampled_from(LETTERS)) for _ in range(n)),
        received_ms=draw(st.integers(0, 2**45)),
        started_ms=draw(st.none() | st.integers(0, 2**45)),
        finished_ms=draw(st.integers(0, 2**45)),
        start_offsets_ms=offsets,
        message=draw(texts) if said else "",
        exceptions=draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 9), texts), max_size=2))
        if said
        else [],
        logs=draw(st.lists(st.tuples(st.sampled_from(indices), st.integers(0, 9), texts, st.booleans()), max_size=2))
        if said
        else [],
        executor=draw(st.none() | st.text(min_size=1)),
    )


@given(st.lists(results(), min_size=1, max_size=4))
def test_encode_envelope_results_writes_the_bytes_of_json_dumps(rs: list[EnvelopeResult]) -> None:
    expected = json.dumps(
        {"v": WIRE_VERSION, "e": [_envelope_result_to_wire(r) for r in rs]}, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")
    assert encode_envelope_results(rs) == expected


@given(st.lists(results(), min_size=1, max_size=4))
def test_encoded_results_decode_to_the_same_updates(rs: list[EnvelopeResult]) -> None:
    assert decode_results(encode_envelope_results(rs)) == [u for r in rs for u in r.updates()]
