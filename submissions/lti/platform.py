"""The tool's calls to a platform (no database here): its JWKS, the service token, NRPS
memberships, AGS line items and scores. Every failure is an `LtiPlatformError` whose message
says what failed in words staff can act on.

Service token (IMS Security Framework 1.0, section 4.1): a client-credentials grant whose
client assertion is a JWT signed by the tool's key (iss = sub = client id, aud = the token
URL or the registration's ``auth_audience``, a fresh ``jti``, five minutes of life).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import jwt

from submissions.lti.errors import LtiPlatformError
from submissions.lti.keys import SigningKey
from submissions.models import LtiRegistration

SCOPE_LINEITEM = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem"
SCOPE_LINEITEM_READONLY = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem.readonly"
SCOPE_SCORE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
SCOPE_RESULT_READONLY = "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly"
SCOPE_NRPS = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
#: Every scope the tool asks for (docs/lms.md lists them for Canvas and Moodle).
TOOL_SCOPES = (SCOPE_LINEITEM, SCOPE_LINEITEM_READONLY, SCOPE_SCORE, SCOPE_RESULT_READONLY,
               SCOPE_NRPS)
#: The tag of every line item this tool creates; with resourceId = the assignment's name it
#: is how the tool finds its own line item again.
LINE_ITEM_TAG = "kernel-grader"

LINEITEM_TYPE = "application/vnd.ims.lis.v2.lineitem+json"
LINEITEMS_TYPE = "application/vnd.ims.lis.v2.lineitemcontainer+json"
SCORE_TYPE = "application/vnd.ims.lis.v1.score+json"
MEMBERSHIPS_TYPE = "application/vnd.ims.lti-nrps.v2.membershipcontainer+json"


def _describe(exc: Exception, what: str) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"{what}: the LMS did not answer in time"
    if isinstance(exc, httpx.TransportError):
        return f"{what}: the LMS could not be reached ({type(exc).__name__}: {exc})"
    return f"{what}: {exc}"


def _check(response: httpx.Response, what: str) -> httpx.Response:
    if response.status_code >= 400:
        body = response.text[:300].replace("\n", " ")
        raise LtiPlatformError(f"{what}: the LMS answered {response.status_code} {body}".strip())
    return response


def _json(response: httpx.Response, what: str) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise LtiPlatformError(f"{what}: the LMS's answer is not JSON") from exc


# ----------------------------------------------------------------------- platform JWKS

_jwks_cache: dict[str, tuple[float, dict[str, Any]]] = {}
_jwks_lock = threading.Lock()
#: How long a platform's key set is reused before it is fetched again (an unknown kid
#: fetches it at once: the platform rotated).
JWKS_CACHE_S = 300.0


def platform_key(keyset_url: str, kid: str | None, *, timeout_s: float) -> Any | None:
    """The platform's public key `kid` from its JWKS (cached; fetched again once when the kid
    is not in the cached copy). None when the platform does not publish that key.

    Raises:
        LtiPlatformError: the key set could not be fetched or read.
    """
    for refresh in (False, True):
        with _jwks_lock:
            cached = _jwks_cache.get(keyset_url)
        if refresh or cached is None or cached[0] + JWKS_CACHE_S < time.monotonic():
            what = f"fetching the LMS's keys from {keyset_url}"
            try:
                response = httpx.get(keyset_url, timeout=timeout_s)
            except httpx.HTTPError as exc:
                raise LtiPlatformError(_describe(exc, what)) from exc
            document = _json(_check(response, what), what)
            with _jwks_lock:
                _jwks_cache[keyset_url] = cached = (time.monotonic(), document)
        keys = [k for k in cached[1].get("keys", []) if isinstance(k, dict)]
        for key in keys:
            if kid is None or key.get("kid") == kid:
                try:
                    return jwt.PyJWK.from_dict(key).key
                except jwt.PyJWTError as exc:
                    raise LtiPlatformError(f"the LMS's key {kid} cannot be read: {exc}") from exc
        if refresh:
            return None
    return None


# ---------------------------------------------------------------------- service token

_tokens: dict[tuple[int, str, str], tuple[float, str]] = {}
_tokens_lock = threading.Lock()


def forget_tokens() -> None:
    """Drop every cached service token (tests; a registration changed)."""
    with _tokens_lock:
        _tokens.clear()


@dataclass
class PlatformClient:
    """Calls to one registered platform, authenticated with a service token for `scopes`."""

    registration: LtiRegistration
    key: SigningKey
    timeout_s: float

    def _assertion(self) -> str:
        now = int(time.time())
        client_id = self.registration.client_id
        claims = {"iss": client_id, "sub": client_id,
                  "aud": self.registration.auth_audience or self.registration.auth_token_url,
                  "iat": now, "exp": now + 300, "jti": secrets.token_urlsafe(16)}
        return jwt.encode(claims, self.key.private_key, algorithm="RS256",
                          headers={"kid": self.key.kid})

    def token(self, scopes: tuple[str, ...]) -> str:
        """A bearer token for `scopes` (cached until a minute before it expires)."""
        scope = " ".join(scopes)
        cache_key = (self.registration.id, self.registration.auth_token_url, scope)
        with _tokens_lock:
            cached = _tokens.get(cache_key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        what = f"getting a service token from {self.registration.auth_token_url}"
        data = {"grant_type": "client_credentials",
                "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                "client_assertion": self._assertion(), "scope": scope}
        try:
            response = httpx.post(self.registration.auth_token_url, data=data,
                                  timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise LtiPlatformError(_describe(exc, what)) from exc
        body = _json(_check(response, what), what)
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise LtiPlatformError(f"{what}: the answer has no access_token")
        expires_in = float(body.get("expires_in") or 3600)
        with _tokens_lock:
            _tokens[cache_key] = (time.monotonic() + max(0.0, expires_in - 60), token)
        return token

    def _request(self, method: str, url: str, what: str, *, scopes: tuple[str, ...],
                 accept: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token(scopes)}", "Accept": accept,
                   **kwargs.pop("headers", {})}
        try:
            response = httpx.request(method, url, headers=headers, timeout=self.timeout_s,
                                     **kwargs)
        except httpx.HTTPError as exc:
            raise LtiPlatformError(_describe(exc, what)) from exc
        return _check(response, what)

    # ---------------------------------------------------------------------- NRPS

    def memberships(self, url: str) -> list[dict[str, Any]]:
        """Every member of a context (following the ``Link: rel="next"`` pages)."""
        members: list[dict[str, Any]] = []
        next_url: str | None = url
        pages = 0
        while next_url and pages < 1000:
            pages += 1
            response = self._request("GET", next_url, "reading the LMS roster",
                                     scopes=(SCOPE_NRPS,), accept=MEMBERSHIPS_TYPE)
            body = _json(response, "reading the LMS roster")
            members.extend(m for m in body.get("members", []) if isinstance(m, dict))
            link = response.links.get("next")
            next_url = link.get("url") if link else None
        return members

    # ----------------------------------------------------------------------- AGS

    def find_line_item(self, lineitems_url: str, *, resource_id: str) -> str | None:
        """The URL of the line item this tool made for `resource_id`, or None."""
        what = "looking for the assignment's line item"
        url = httpx.URL(lineitems_url).copy_merge_params({"resource_id": resource_id})
        response = self._request("GET", str(url), what,
                                 scopes=(SCOPE_LINEITEM, SCOPE_LINEITEM_READONLY),
                                 accept=LINEITEMS_TYPE)
        items = _json(response, what)
        if isinstance(items, dict):  # some platforms wrap the list
            items = items.get("lineItems") or items.get("content") or []
        for item in items if isinstance(items, list) else []:
            if (isinstance(item, dict) and item.get("resourceId") == resource_id
                    and item.get("tag", LINE_ITEM_TAG) == LINE_ITEM_TAG and item.get("id")):
                return str(item["id"])
        return None

    def create_line_item(self, lineitems_url: str, *, resource_id: str, label: str,
                         score_maximum: float) -> str:
        """Create the line item; returns its URL."""
        what = "creating the assignment's line item"
        response = self._request(
            "POST", lineitems_url, what, scopes=(SCOPE_LINEITEM,), accept=LINEITEM_TYPE,
            json={"scoreMaximum": score_maximum, "label": label, "resourceId": resource_id,
                  "tag": LINE_ITEM_TAG},
            headers={"Content-Type": LINEITEM_TYPE})
        body = _json(response, what)
        if not isinstance(body, dict) or not body.get("id"):
            raise LtiPlatformError(f"{what}: the answer has no id")
        return str(body["id"])

    def post_score(self, lineitem_url: str, *, user_id: str, score_given: float,
                   score_maximum: float, timestamp: str) -> None:
        """Send one student's score (a score replaces the student's previous one: a retry
        of the same score changes nothing)."""
        parts = urlsplit(lineitem_url)
        scores_url = urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/scores"))
        self._request(
            "POST", scores_url, "sending the score", scopes=(SCOPE_SCORE,), accept="*/*",
            json={"userId": user_id, "scoreGiven": score_given, "scoreMaximum": score_maximum,
                  "activityProgress": "Completed", "gradingProgress": "FullyGraded",
                  "timestamp": timestamp},
            headers={"Content-Type": SCORE_TYPE})
