"""Idempotent creation: the ``Idempotency-Key`` of ``POST /api/v1/students`` and
``POST /api/v1/submissions``.

A client sends one key (1 to 200 printable ASCII characters; the CLI sends a random UUID)
per logical request and the same key on every retry of it. The first request to arrive
claims the key (`claim`), does its work and records its answer (`record`) in the same
transaction as the row it created, so a key with an answer always has its row and a rolled
back request leaves neither. A retry with the same key:

- and the same request (the same fingerprint: method, route and content) gets the first
  answer again, with its status code (201 with the same token, 202 with the same
  submission id) and the header ``Idempotent-Replayed: true``; nothing new is created and
  no rate limit or submission count is charged again;
- and a different request gets 422 ``idempotency_key_reused``.

Only successful answers are stored: a request refused with an error leaves no row, so its
retry is decided afresh. Keys belong to the caller (their scope: one student, one staff
member, or the bootstrap instructor) and expire ``idempotency_ttl_s`` (24 h) after the first
request; an expired key is a new key.

Storage: the key's sha256 (never the key) and the answer sealed with AES-256-GCM under a key
derived from the idempotency key (HKDF-SHA256; the ``cryptography`` package, not our own
cipher), because a created student's answer
holds their token, which the service otherwise keeps only as a hash: reading the table does
not give the token to anyone who does not hold the idempotency key.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from submissions import repository
from submissions.errors import IdempotencyKeyReused
from submissions.models import IdempotencyKey

_SEAL_CONTEXT = b"kernel-grader idempotency answer v1"
_NONCE_BYTES = 12  # AES-GCM's standard nonce, random per sealed answer


@dataclass(frozen=True)
class StoredAnswer:
    """The first answer to a request with this key: replay it."""

    status_code: int
    body: Any


@dataclass(frozen=True)
class Claim:
    """A key claimed by this request (its row, and the key that seals the answer)."""

    row: IdempotencyKey
    key: str


def fingerprint(*parts: str | bytes) -> str:
    """sha256 (hex) of the parts, each length-prefixed (so ``("ab", "c")`` and ``("a",
    "bc")`` differ): the identity of a request for `claim`."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    """`value` as JSON with sorted keys and no spaces (for `fingerprint`)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _key_sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _seal_key(key: str) -> bytes:
    """A 256-bit AES key derived from the idempotency key (HKDF-SHA256, this module's context)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_SEAL_CONTEXT).derive(key.encode())


def seal(body: Any, *, key: str) -> str:
    """`body` as JSON, encrypted and authenticated (AES-256-GCM, ``cryptography``) with a key
    derived from `key`; base64 of nonce + ciphertext."""
    nonce = os.urandom(_NONCE_BYTES)
    cipher = AESGCM(_seal_key(key)).encrypt(nonce, canonical_json(body).encode(), _SEAL_CONTEXT)
    return base64.b64encode(nonce + cipher).decode()


def unseal(sealed: str, *, key: str) -> Any:
    """The body `seal` sealed with `key`.

    Raises:
        ValueError: `sealed` was not sealed with `key`, or was altered.
    """
    raw = base64.b64decode(sealed)
    nonce, cipher = raw[:_NONCE_BYTES], raw[_NONCE_BYTES:]
    try:
        plain = AESGCM(_seal_key(key)).decrypt(nonce, cipher, _SEAL_CONTEXT)
    except InvalidTag:
        raise ValueError("the stored answer does not open with this key") from None
    return json.loads(plain)


def claim(session: Session, *, scope: str, key: str, request_sha256: str, now: dt.datetime,
          ttl_s: float) -> Claim | StoredAnswer:
    """Claim `key` for this request, or return the answer stored for it.

    Deletes `scope`'s expired keys first. Runs in the request's transaction; the insert is
    in a savepoint, so losing a race on PostgreSQL leaves that transaction usable.

    Raises:
        IdempotencyKeyReused: the key was used (and not expired) for another request.
    """
    key_sha256 = _key_sha256(key)
    repository.delete_expired_idempotency_keys(
        session, scope=scope, before=now - dt.timedelta(seconds=ttl_s))
    for _attempt in range(2):
        existing = repository.find_idempotency_key(session, scope=scope, key_sha256=key_sha256)
        if existing is not None:
            if existing.request_sha256 != request_sha256:
                raise IdempotencyKeyReused(
                    "this Idempotency-Key was already used for a different request; send a "
                    "new key for a new request")
            if existing.status_code is not None and existing.response_body is not None:
                return StoredAnswer(existing.status_code,
                                    unseal(existing.response_body, key=key))
            # A committed claim without an answer cannot come from `record`'s callers; drop it.
            repository.delete_idempotency_key(session, row=existing)
        try:
            with session.begin_nested():
                row = repository.insert_idempotency_key(
                    session, scope=scope, key_sha256=key_sha256, request_sha256=request_sha256,
                    now=now)
            return Claim(row=row, key=key)
        except IntegrityError:
            continue  # another request with this key committed first: read its answer
    raise IdempotencyKeyReused("this Idempotency-Key is being used by another request; "
                               "retry it later")


def record(session: Session, *, claim_: Claim, status_code: int, body: Any) -> None:
    """Store the answer of a claimed key, in the transaction that created what it
    describes."""
    repository.store_idempotent_answer(session, row=claim_.row, status_code=status_code,
                                       sealed_body=seal(body, key=claim_.key))
