"""submissions/idempotency.py: stored answers are sealed (AES-256-GCM under a key derived
from the Idempotency-Key), so the table never holds a created student's token in clear."""

from __future__ import annotations

import base64

import pytest

from submissions.idempotency import seal, unseal

ANSWER = {"id": 7, "name": "Ada", "token": "tok-4f3c2a1b9e8d7c6b5a4f3e2d1c0b"}


def test_a_sealed_answer_opens_with_its_key_only():
    sealed = seal(ANSWER, key="key-1")
    assert unseal(sealed, key="key-1") == ANSWER
    assert ANSWER["token"] not in sealed and ANSWER["token"].encode() not in base64.b64decode(sealed)
    with pytest.raises(ValueError, match="does not open"):
        unseal(sealed, key="key-2")


def test_an_altered_answer_is_refused():
    raw = bytearray(base64.b64decode(seal(ANSWER, key="key-1")))
    raw[-1] ^= 1
    with pytest.raises(ValueError, match="does not open"):
        unseal(base64.b64encode(bytes(raw)).decode(), key="key-1")


def test_two_seals_of_one_answer_differ():
    """A fresh nonce per seal: equal answers do not give equal stored texts."""
    assert seal(ANSWER, key="key-1") != seal(ANSWER, key="key-1")
