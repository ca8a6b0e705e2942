"""Canonical state bytes, refusal of what JSON cannot carry, and framed objects."""

from __future__ import annotations

import math
import zlib
from datetime import datetime
from typing import Any

import pytest

from tulip_memory.delta import CorruptCheckpointError, StateNotSerializableError
from tulip_memory.delta.codec import KIND_HEAD, KIND_LOG, decode_frame, encode_frame, encode_state


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"metadata": {"when": datetime(2024, 1, 1)}}, "state.metadata.when"),
        ({"metadata": {"x": math.nan}}, "state.metadata.x"),
        ({"metadata": {"x": [1, math.inf]}}, "state.metadata.x[1]"),
        ({"metadata": {"pair": (1, 2)}}, "state.metadata.pair"),
        ({"tool_executions": {1: "int key"}}, "state.tool_executions"),
        ({"metadata": {"s": {1, 2}}}, "state.metadata.s"),
    ],
)
def test_states_json_cannot_carry_exactly_are_refused_with_a_path(
    data: dict[str, Any], path: str
) -> None:
    with pytest.raises(StateNotSerializableError) as e:
        encode_state(data)
    assert e.value.path == path
    assert isinstance(e.value, TypeError)


def test_canonical_bytes_do_not_depend_on_key_order() -> None:
    a = encode_state({"b": 1, "a": {"y": 2, "x": 1}})
    b = encode_state({"a": {"x": 1, "y": 2}, "b": 1})
    assert a.raw == b.raw and a.digest == b.digest
    assert encode_state({"a": 1}).digest != encode_state({"a": 1.0}).digest


def test_lone_surrogates_survive() -> None:
    assert encode_state({"s": "a\ud800b"}).data == {"s": "a\ud800b"}


def test_every_truncation_and_flip_of_a_frame_is_detected() -> None:
    frame = encode_frame(KIND_LOG, [zlib.compress(b'{"a":1}'), zlib.compress(b"[]")])
    assert len(decode_frame("k", frame, KIND_LOG)) == 2
    for cut in range(len(frame)):
        with pytest.raises(CorruptCheckpointError, match="'k'"):
            decode_frame("k", frame[:cut], KIND_LOG)
    for i in range(len(frame)):
        flipped = bytearray(frame)
        flipped[i] ^= 0x40
        with pytest.raises(CorruptCheckpointError):
            decode_frame("k", bytes(flipped), KIND_LOG)
    with pytest.raises(CorruptCheckpointError, match="kind"):
        decode_frame("k", frame, KIND_HEAD)
    with pytest.raises(CorruptCheckpointError):
        decode_frame("k", frame + b"x", KIND_LOG)
