"""The tool's signing keys (RSA 2048, RS256) and the JWKS it publishes at
``/lti/jwks.json``.

The newest unretired key signs (service-token assertions, Deep Linking responses).
`rotate` adds a key and retires the others; a retired key stays published for
``lti_key_grace_s`` (a platform caches the tool's JWKS) and is then left out. The private
halves are stored PEM-encrypted under a key derived from the deployment secret, so a copy
of the database alone does not sign as this tool.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from sqlalchemy.orm import Session

from submissions import repository
from submissions.settings import Settings


@dataclass(frozen=True)
class SigningKey:
    """The key that signs now: its ``kid`` and private key object."""

    kid: str
    private_key: rsa.RSAPrivateKey


def _password(settings: Settings) -> bytes:
    secret = settings.deployment_seed.get_secret_value().encode("utf-8")
    return hmac.new(secret, b"kernel-grader lti tool key v1", hashlib.sha256).hexdigest().encode()


def _new_key(session: Session, *, settings: Settings, now: dt.datetime) -> SigningKey:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.BestAvailableEncryption(_password(settings)))
    kid = secrets.token_hex(12)
    repository.insert_lti_tool_key(session, kid=kid, private_key_pem=pem.decode("ascii"), now=now)
    return SigningKey(kid=kid, private_key=private)


#: Decrypted keys by (PEM digest, password digest): decrypting one takes ~0.1 s (the PEM's
#: key derivation), and the JWKS endpoint and every sync need them.
_loaded: dict[tuple[str, str], rsa.RSAPrivateKey] = {}
_loaded_lock = threading.Lock()


def _load(pem: str, settings: Settings) -> rsa.RSAPrivateKey:
    password = _password(settings)
    cache_key = (hashlib.sha256(pem.encode()).hexdigest(), hashlib.sha256(password).hexdigest())
    with _loaded_lock:
        cached = _loaded.get(cache_key)
    if cached is not None:
        return cached
    key = serialization.load_pem_private_key(pem.encode("ascii"), password=password)
    assert isinstance(key, rsa.RSAPrivateKey)  # noqa: S101 - only RSA keys are stored
    with _loaded_lock:
        _loaded[cache_key] = key
    return key


def signing_key(session: Session, *, settings: Settings, now: dt.datetime) -> SigningKey:
    """The newest unretired key; the first one is made on first use."""
    for row in repository.list_lti_tool_keys(session):
        if row.retired_at is None:
            return SigningKey(kid=row.kid, private_key=_load(row.private_key_pem, settings))
    return _new_key(session, settings=settings, now=now)


def rotate(session: Session, *, settings: Settings, now: dt.datetime) -> str:
    """A new signing key; every other is retired (published for the grace period). Returns
    the new kid."""
    key = _new_key(session, settings=settings, now=now)
    repository.retire_lti_tool_keys(session, keep_kid=key.kid, now=now)
    return key.kid


def jwks(session: Session, *, settings: Settings, now: dt.datetime) -> dict[str, Any]:
    """The published key set: the signing key and the keys retired within the grace
    period (public halves only)."""
    signing_key(session, settings=settings, now=now)
    grace = dt.timedelta(seconds=settings.lti_key_grace_s)
    keys = []
    for row in repository.list_lti_tool_keys(session):
        if row.retired_at is not None and row.retired_at + grace < now:
            continue
        public = _load(row.private_key_pem, settings).public_key()
        jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
        jwk.update(kid=row.kid, alg="RS256", use="sig")
        keys.append(jwk)
    return {"keys": keys}
