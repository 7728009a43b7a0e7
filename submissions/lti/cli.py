"""`grader lti register|list|remove|rotate-key|sync|status`: the LMS integration from the
database host (as `grader students` and `grader staff`; docs/lms.md). The same is in the
API (``/api/v1/lti``) and on the ``/lti`` page. Exit code 2 when nothing could be done."""

from __future__ import annotations

import argparse
import sys
from typing import Any

EXIT_OK, EXIT_ERROR = 0, 2


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="grader lti", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    register = commands.add_parser("register", help="register an LMS (an LTI 1.3 platform)")
    register.add_argument("--issuer", required=True, help="the platform's iss")
    register.add_argument("--client-id", required=True)
    register.add_argument("--deployment-id", action="append", required=True,
                          help="a deployment id (repeat for several)")
    register.add_argument("--auth-login-url", required=True)
    register.add_argument("--auth-token-url", required=True)
    register.add_argument("--keyset-url", required=True)
    register.add_argument("--auth-audience")
    commands.add_parser("list", help="list the registered platforms")
    remove = commands.add_parser("remove", help="remove a registration")
    remove.add_argument("registration_id", type=int)
    commands.add_parser("rotate-key", help="a new signing key for the tool (the old one stays "
                        "published for GRADER_LTI_KEY_GRACE_S)")
    commands.add_parser("sync", help="sync every LMS roster and every due score now")
    commands.add_parser("status", help="every student's score sync state")
    args = parser.parse_args(argv)

    from submissions import audit, repository
    from submissions.cli_transaction import run_in_transaction
    from submissions.lti import keys, registrations
    from submissions.models import utc_now
    from submissions.settings import get_settings

    actor = audit.cli_actor()
    settings = get_settings()

    def do_register(session: Any) -> int:
        row = registrations.register(
            session, issuer=args.issuer, client_id=args.client_id,
            deployment_ids=args.deployment_id, auth_login_url=args.auth_login_url,
            auth_token_url=args.auth_token_url, keyset_url=args.keyset_url,
            auth_audience=args.auth_audience, actor=actor, now=utc_now())
        print(f"registration {row.id}: {row.issuer} (client id {row.client_id})")
        return EXIT_OK

    def do_list(session: Any) -> int:
        for row in repository.list_lti_registrations(session):
            print(f"{row.id}\t{row.issuer}\t{row.client_id}\t{','.join(row.deployment_ids)}\t"
                  f"{row.auth_login_url}\t{row.auth_token_url}\t{row.keyset_url}")
        return EXIT_OK

    def do_remove(session: Any) -> int:
        registrations.unregister(session, registration_id=args.registration_id, actor=actor,
                                 now=utc_now())
        print(f"registration {args.registration_id} removed")
        return EXIT_OK

    def do_rotate(session: Any) -> int:
        now = utc_now()
        kid = keys.rotate(session, settings=settings, now=now)
        audit.record(session, actor=actor, action="lti.rotate_key", now=now,
                     target_type="lti_key", target_id=kid)
        print(f"new signing key {kid}")
        return EXIT_OK

    def do_status(session: Any) -> int:
        names = {s.id: s.name for s in repository.list_students(session)}
        for row in repository.list_lti_score_syncs(session):
            print(f"{row.context_row_id}\t{row.assignment}\t{names.get(row.student_id, '?')}\t"
                  f"{row.state}\t{row.score_given:g}/{row.score_maximum:g}\t"
                  f"attempts {row.attempts}\t{row.last_error or ''}")
        return EXIT_OK

    if args.command == "sync":
        return _sync(settings)
    actions = {"register": do_register, "list": do_list, "remove": do_remove,
               "rotate-key": do_rotate, "status": do_status}
    return run_in_transaction(actions[args.command])


def _sync(settings: Any) -> int:
    from submissions.db import create_session_factory, engine_from_settings
    from submissions.lti import sync
    from submissions.lti.errors import LtiSyncRunning
    from submissions.migrations import upgrade_to_head
    from submissions.models import utc_now

    upgrade_to_head(database_url=settings.database_url)
    engine = engine_from_settings(settings)
    try:
        run = sync.run_sync_exclusive(create_session_factory(engine), settings=settings, now=utc_now(),
                                      rosters=True)
    except LtiSyncRunning as exc:
        print(f"error ({exc.code}): {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        engine.dispose()
    for context_id, changes in run.rosters.items():
        print(f"course {context_id}: added {len(changes.added)}, rejoined "
              f"{len(changes.rejoined)}, dropped {len(changes.dropped)}, kept {changes.kept}")
    for context_id, error in run.roster_errors.items():
        print(f"course {context_id}: roster sync failed: {error}", file=sys.stderr)
    print(f"scores: {run.push.sent} sent, {len(run.push.failed)} failed")
    for row_id, reason in run.push.failed.items():
        print(f"  sync {row_id}: {reason}", file=sys.stderr)
    return EXIT_ERROR if run.push.failed or run.roster_errors else EXIT_OK
