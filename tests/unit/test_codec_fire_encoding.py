"""The fire path's encoding (`codec.encode_run`, `codec.pack_encoded`) writes the bytes the
json.dumps forms (`run_body` + `encode_packed`) write, so the wire is unchanged."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from scheduler_core.codec import (
    decode_message,
    encode_packed,
    encode_run,
    pack_encoded,
    run_body,
    run_header,
    run_header_json,
)

texts = st.text()  # every code point, quotes, backslashes and control characters included
headers = st.builds(
    run_header,
    job_code=texts,
    biz_code=texts,
    handler=texts,
    params=texts,
    item_total=st.integers(1, 100_000),
    timeout=st.integers(0, 10**9).map(lambda ms: timedelta(milliseconds=ms)),
    max_retry=st.integers(0, 100),
    epoch=st.integers(0, 2**62),
    attempt=st.integers(0, 100),
)
items = st.lists(st.tuples(st.integers(0, 100_000), texts), min_size=1, max_size=5)


@given(headers, st.integers(1, 2**62), st.integers(0, 2**45), items, st.booleans(), st.booleans())
def test_encode_run_writes_the_bytes_of_run_body(
    header: dict[str, Any], trigger_id: int, ms: int, its: list[tuple[int, str]], page_record: bool, shadow: bool
) -> None:
    expected = encode_packed([run_body(header, trigger_id, ms, its, page_record=page_record, shadow=shadow)])
    got = encode_run(run_header_json(header), trigger_id, ms, its, page_record=page_record, shadow=shadow)
    assert got == expected


@given(headers, st.lists(st.tuples(st.integers(1, 2**40), st.integers(0, 2**45), items), min_size=1, max_size=4))
def test_pack_encoded_writes_the_bytes_of_encode_packed(
    header: dict[str, Any], runs: list[tuple[int, int, list[tuple[int, str]]]]
) -> None:
    bodies = [run_body(header, t, ms, its) for t, ms, its in runs]
    encoded = [encode_run(run_header_json(header), t, ms, its) for t, ms, its in runs]
    assert pack_encoded(encoded) == encode_packed(bodies)
    assert len(decode_message(pack_encoded(encoded))) == len(runs)
