"""LTI 1.3 Advantage, the tool side (docs/lms.md).

- `registrations`: the platforms staff trust (issuer, client id, deployment ids, endpoints).
- `keys`: the tool's RSA signing keys, the published JWKS, rotation.
- `launch`: OIDC third-party login initiation and the id_token's verification; who the
  launch signs in (learner -> student; instructor -> instructor; TA -> ta) and where it lands.
- `platform`: the tool's calls to a platform: its JWKS, the service token (client
  credentials with a signed JWT assertion), NRPS memberships, AGS line items and scores.
- `sync`: the roster sync (NRPS) and the score sync (AGS), each student's state kept.

Libraries: PyJWT with cryptography for every JWT and JWK (signing, verification, the JWKS);
httpx for HTTP. pylti1p3 was not used: it is built around framework adapters (Django, Flask)
and its own cookie and cache services, and it keeps no per-student sync state; the protocol
steps it would save are the few below, while the crypto stays in PyJWT.
"""
