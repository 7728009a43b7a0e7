"""Why a launch, a registration or a call to a platform was refused. Each is a DomainError
with a stable code: the API answers JSON, a page shows it (api/pages/rendering.py)."""

from __future__ import annotations

from submissions.errors import DomainError


class LtiLaunchRefused(DomainError):
    """A launch that signs nobody in (the message says why, in words a person can act on)."""

    code = "lti_launch_refused"
    http_status = 400


class LtiUnknownPlatform(LtiLaunchRefused):
    code = "lti_unknown_platform"


class LtiStateInvalid(LtiLaunchRefused):
    code = "lti_state_invalid"


class LtiStateNotFromThisBrowser(LtiLaunchRefused):
    """The launch's state is valid but the browser posting it does not hold the state's
    cookie: another browser started the login (login CSRF), or cookies are blocked."""

    code = "lti_state_cookie_missing"


class LtiNonceReplayed(LtiLaunchRefused):
    code = "lti_nonce_replayed"


class LtiTokenInvalid(LtiLaunchRefused):
    code = "lti_token_invalid"


class LtiUnknownKey(LtiLaunchRefused):
    code = "lti_unknown_key"


class LtiRoleUnsupported(LtiLaunchRefused):
    code = "lti_role_unsupported"
    http_status = 403


class LtiRegistrationInvalid(DomainError):
    code = "lti_registration_invalid"
    http_status = 422


class LtiRegistrationTaken(DomainError):
    code = "lti_registration_taken"
    http_status = 409


class LtiRegistrationNotFound(DomainError):
    code = "lti_registration_not_found"
    http_status = 404


class LtiPlatformError(Exception):
    """A call to a platform failed (unreachable, refused, an answer we cannot read); the
    message is what staff see beside the student's sync state."""


class LtiSyncRunning(DomainError):
    """A sync with the LMS is running now, in this or another process (its ``lti_sync_run``
    lease: submissions/lti/sync.py ``run_sync_exclusive``); one runs at a time."""

    code = "lti_sync_running"
    http_status = 409
