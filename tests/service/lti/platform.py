"""A real LTI 1.3 platform for the tests: the third-party `lti1p3platform` library (its
registration, OIDC login, message launch and id_token signing, access tokens, the AGS and
NRPS services with their token and scope checks, Deep Linking response validation), served
over real HTTP by uvicorn in a thread.

Only the glue is ours: the library is framework-agnostic and leaves storage abstract, so
this module gives it a request adapter, an in-memory course (people, line items, scores)
and the routes. Its FastAPI adapter imports ``pkg_resources``, which this environment's
setuptools no longer ships, hence the small subclasses below.

Switches a test uses: `stop()` and `start()` (the platform down, then back, on the same
port), and per-launch knobs in `launch_url` (a token for another tool, one expired, one
signed by a key the platform does not publish).
"""

from __future__ import annotations

import html
import re
import socket
import threading
import time
import typing as t
from dataclasses import dataclass, field
from urllib.parse import urlencode

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jwcrypto.jwk import JWK
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.membership import Context
from lti1p3platform.message_launch import LTIAdvantageMessageLaunchAbstract
from lti1p3platform.oidc_login import OIDCLoginAbstract
from lti1p3platform.registration import Registration
from lti1p3platform.request import Request as LtiRequest
from lti1p3platform.score import UpdateScoreStatus
from lti1p3platform.service_connector import (
    AssignmentsGradesService,
    NamesRoleProvisioningService,
)

LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
INSTRUCTOR = "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"
TA = "http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#TeachingAssistant"
CLIENT_ID = "kernel-grader-tool"
OTHER_CLIENT_ID = "another-tool"
DEPLOYMENT_ID = "deployment-1"
CONTEXT_ID = "course-101"


def _pem_pair() -> tuple[str, str]:
    key = JWK.generate(kty="RSA", size=2048)
    return (key.export_to_pem(private_key=True, password=None).decode(),
            key.export_to_pem().decode())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Config(LTI1P3PlatformConfAbstract):
    """The library's platform configuration around one Registration."""

    def init_platform_config(self, **kwargs: t.Any) -> None:
        self._reg = kwargs["registration"]

    def get_registration_by_params(self, **kwargs: t.Any) -> Registration:
        return self._reg


class _Request(LtiRequest):
    def build_metadata(self, request: t.Any) -> t.Any:
        return request


class _Login(OIDCLoginAbstract):
    def set_lti_message_hint(self, **kwargs: t.Any) -> None:
        self._lti_message_hint = kwargs["hint"]

    def get_redirect(self, url: str) -> str:
        return url


class _Launch(LTIAdvantageMessageLaunchAbstract):
    def get_preflight_response(self) -> dict[str, t.Any]:
        return dict(self._request.get_data)  # type: ignore[union-attr]

    def render_launch_form(self, launch_data: dict[str, t.Any], **kwargs: t.Any) -> str:
        # The library's own template (lti1p3platform/framework/templates/launch.html) with
        # its auto-submitting script; loaded without its pkg_resources-based loader.
        e = html.escape
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>LTI Tool '
                f'Launch</title></head><body><form method="POST" action="{e(launch_data["launch_url"])}"'
                f' id="form"><input type="hidden" name="id_token" value="{e(launch_data["id_token"])}"/>'
                f'<input type="hidden" name="state" value="{e(launch_data["state"])}"/></form>'
                '<script type="text/javascript">document.getElementById("form").submit();</script>'
                '</body></html>')


@dataclass
class Person:
    sub: str
    name: str
    email: str
    roles: list[str]
    status: str = "Active"


@dataclass
class Course:
    """What the platform stores: its people, links, line items and the scores it received."""

    people: dict[str, Person] = field(default_factory=dict)
    links: dict[str, dict[str, t.Any]] = field(default_factory=dict)
    line_items: dict[str, dict[str, t.Any]] = field(default_factory=dict)
    scores: dict[tuple[str, str], dict[str, t.Any]] = field(default_factory=dict)
    score_posts: list[dict[str, t.Any]] = field(default_factory=list)
    line_item_creations: int = 0
    deep_link_items: list[dict[str, t.Any]] = field(default_factory=list)
    roster_reads: int = 0


class Platform:
    """The platform, its course and its HTTP server."""

    def __init__(self, tool_base: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.issuer = self.base
        self.tool_base = tool_base
        self.private_pem, self.public_pem = _pem_pair()
        self.rogue_private_pem, _ = _pem_pair()
        self.course = Course()
        self.tool_key_set: dict[str, t.Any] | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.app = self._build_app()

    # ------------------------------------------------------------------ registration

    def registration(self, *, client_id: str = CLIENT_ID, rogue: bool = False) -> Registration:
        reg = (Registration().set_iss(self.issuer).set_client_id(client_id)
               .set_deployment_id(DEPLOYMENT_ID)
               .set_launch_url(f"{self.tool_base}/lti/launch")
               .set_deeplink_launch_url(f"{self.tool_base}/lti/launch")
               .set_oidc_login_url(f"{self.tool_base}/lti/login")
               .set_platform_public_key(self.public_pem)
               .set_platform_private_key(self.rogue_private_pem if rogue else self.private_pem))
        if self.tool_key_set is not None:
            reg.set_tool_key_set(self.tool_key_set)  # type: ignore[arg-type]
        else:
            reg.set_tool_key_set_url(f"{self.tool_base}/lti/jwks.json")
        return reg

    def config(self, **kwargs: t.Any) -> _Config:
        config = _Config(registration=self.registration(**kwargs))
        config.get_registration()
        return config

    def tool_registration_fields(self) -> dict[str, t.Any]:
        """What staff type into the grader to register this platform."""
        return {"issuer": self.issuer, "client_id": CLIENT_ID, "deployment_ids": [DEPLOYMENT_ID],
                "auth_login_url": f"{self.base}/authorize", "auth_token_url": f"{self.base}/token",
                "keyset_url": f"{self.base}/jwks"}

    # ------------------------------------------------------------------ people, links

    def add_person(self, sub: str, name: str, role: str = LEARNER) -> Person:
        person = Person(sub=sub, name=name, email=f"{sub}@uni.example", roles=[role])
        self.course.people[sub] = person
        return person

    def add_link(self, link_id: str, assignment: str | None) -> None:
        self.course.links[link_id] = {"assignment": assignment}

    def launch_url(self, sub: str, link_id: str = "link-1", *, deep_linking: bool = False,
                   knob: str = "") -> str:
        """Where the LMS sends the browser to start a launch (the tool's login initiation,
        built by the library's OIDC login)."""
        login = _Login(None, self.config())
        hint = f"{link_id}|{'dl' if deep_linking else 'rl'}|{knob}"
        login.set_lti_message_hint(hint=hint)
        return login.initiate_login(sub)

    # ------------------------------------------------------------------ server

    def start(self) -> None:
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the test platform did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(10)
            self._server = None

    # ------------------------------------------------------------------ the routes

    def _lti_request(self, request: Request, *, form: dict[str, t.Any] | None = None,
                     json_body: t.Any = None) -> _Request:
        return _Request({"method": request.method, "form_data": form or {},
                         "get_data": dict(request.query_params), "headers": request.headers,
                         "content_type": request.headers.get("content-type"),
                         "path": request.url.path, "json": json_body})

    def _build_app(self) -> FastAPI:  # noqa: C901 - one route per endpoint
        app = FastAPI()
        platform = self
        course = self.course

        @app.get("/jwks")
        def jwks() -> JSONResponse:
            return JSONResponse(platform.config().get_jwks())

        @app.get("/authorize")
        def authorize(request: Request) -> Response:
            query = dict(request.query_params)
            link_id, kind, knob = query.get("lti_message_hint", "||").split("|")
            person = course.people.get(query.get("login_hint", ""))
            if person is None:
                return HTMLResponse("unknown user", status_code=403)
            config = platform.config(client_id=OTHER_CLIENT_ID if knob == "other_tool"
                                     else CLIENT_ID, rogue=knob == "rogue_key")
            if knob == "other_tool":
                query["client_id"] = OTHER_CLIENT_ID
            launch = _Launch(_Request({"get_data": query, "form_data": {}, "method": "GET",
                                       "headers": {}, "content_type": None, "path": "",
                                       "json": None}), config)
            launch.set_user_data(person.sub, person.roles, full_name=person.name,
                                 email_address=person.email)
            launch.set_launch_context_claim(CONTEXT_ID, context_title="GPU kernels 101")
            launch.set_resource_link_claim(link_id, title=f"link {link_id}")
            assignment = course.links.get(link_id, {}).get("assignment")
            if assignment:
                launch.set_custom_parameters_claim({"assignment": assignment})
            launch.set_ags(lineitems_url=f"{platform.base}/lineitems")
            launch.set_nrps(context_memberships_url=f"{platform.base}/memberships")
            if kind == "dl":
                launch.set_dl(deep_link_return_url=f"{platform.base}/deep_link_return",
                              title="pick", extra_data={"opaque": "x1"})
            if knob == "expired":
                launch.set_id_token_expiration(-600)
            return HTMLResponse(launch.lti_launch())

        @app.post("/token")
        async def token(request: Request) -> Response:
            form = dict((await request.form()).items())
            try:
                answer = platform.config().get_access_token(form)
            except Exception as exc:  # noqa: BLE001 - the library's refusal, as a 400
                return JSONResponse({"error": "invalid_request", "detail": str(exc)},
                                    status_code=400)
            return JSONResponse(answer)

        def _reply(response: t.Any) -> Response:
            if response.result is None:
                return JSONResponse({"message": response.message}, status_code=response.code)
            return JSONResponse(response.result, status_code=response.code,
                                media_type=response.media_type)

        @app.get("/lineitems")
        def get_line_items(request: Request) -> Response:
            service = _Ags(self._lti_request(request), platform.config(), platform)
            return _reply(service.handle_resp(service.handle_get_lineitems))

        @app.post("/lineitems")
        async def post_line_item(request: Request) -> Response:
            service = _Ags(self._lti_request(request, json_body=await request.json()),
                           platform.config(), platform)
            return _reply(service.handle_resp(service.handle_create_lineitem))

        @app.post("/lineitems/{item_id}/scores")
        async def post_score(item_id: str, request: Request) -> Response:
            service = _Ags(self._lti_request(request, json_body=await request.json()),
                           platform.config(), platform,
                           lineitem_url=f"{platform.base}/lineitems/{item_id}")
            return _reply(service.handle_resp(service.handle_update_score,
                                              line_item_id=f"{platform.base}/lineitems/{item_id}"))

        @app.get("/memberships")
        def memberships(request: Request) -> Response:
            course.roster_reads += 1
            service = _Nrps(self._lti_request(request), platform.config(), platform)
            return _reply(service.handle_resp(service.handle_get_members))

        @app.post("/deep_link_return")
        async def deep_link_return(request: Request) -> Response:
            form = dict((await request.form()).items())
            items = platform.config().validate_deeplinking_resp(form)
            course.deep_link_items.extend(items)
            for item in items:
                course.links[f"dl-{len(course.links) + 1}"] = {
                    "assignment": (item.get("custom") or {}).get("assignment")}
            return HTMLResponse(f"<p id='placed'>placed {len(items)} item(s)</p>")

        @app.get("/gradebook")
        def gradebook() -> HTMLResponse:
            rows = "".join(
                f"<tr><td>{html.escape(item.get('label', ''))}</td><td>{html.escape(user)}</td>"
                f"<td class='score'>{score['scoreGiven']:g} / {score['scoreMaximum']:g}</td></tr>"
                for (item_id, user), score in course.scores.items()
                for item in [course.line_items[item_id]])
            return HTMLResponse(f"<!DOCTYPE html><html lang='en'><head><title>Gradebook</title>"
                                f"</head><body><h1>Gradebook</h1><table>{rows}</table></body></html>")

        @app.get("/launch_as/{sub}")
        def launch_as(sub: str, link: str = "link-1") -> Response:
            return RedirectResponse(platform.launch_url(sub, link))

        return app

    # ------------------------------------------------------------------ reads for tests

    def score_of(self, assignment: str, sub: str) -> dict[str, t.Any] | None:
        """The score the platform holds for `sub` on the line item of `assignment`."""
        for item_id, item in self.course.line_items.items():
            if item.get("resourceId") == assignment:
                return self.course.scores.get((item_id, sub))
        return None


class _Ags(AssignmentsGradesService):
    def __init__(self, request: _Request, config: _Config, platform: Platform,
                 lineitem_url: str | None = None) -> None:
        super().__init__(request, config, f"{platform.base}/lineitems", lineitem_url)
        self.course = platform.course
        self.platform = platform

    def find_lineitems(self, page: int = 1, limit: t.Any = None, line_item_id: t.Any = None,
                       resource_link_id: t.Any = None, resource_id: t.Any = None,
                       tag: t.Any = None, **_: t.Any) -> t.Any:
        items = [item for item in self.course.line_items.values()
                 if (resource_id is None or item.get("resourceId") == resource_id)
                 and (tag is None or item.get("tag") == tag)]
        return {"content": items, "has_next": False, "next": None}

    def find_lineitem(self, line_item_id: str) -> t.Any:
        return self.course.line_items[line_item_id]

    def create_lineitem(self, creation_data: t.Any) -> t.Any:
        self.course.line_item_creations += 1
        item_id = f"{self.platform.base}/lineitems/{self.course.line_item_creations}"
        item = {**creation_data, "id": item_id}
        self.course.line_items[item_id] = item
        return item

    def update_lineitem(self, update_data: t.Any) -> t.Any:
        raise NotImplementedError

    def delete_lineitem(self, line_item_id: str) -> None:
        raise NotImplementedError

    def update_score(self, line_item_id: str, score: t.Any) -> UpdateScoreStatus:
        from lti1p3platform.exceptions import LineItemNotFoundException

        if line_item_id not in self.course.line_items:
            raise LineItemNotFoundException
        if score.get("userId") not in self.course.people:
            return UpdateScoreStatus.NOTAPPLIED  # 403: not a member of this course
        self.course.score_posts.append({"line_item": line_item_id, **score})
        key = (line_item_id, score["userId"])
        created = key not in self.course.scores
        self.course.scores[key] = score
        return UpdateScoreStatus.CREATED if created else UpdateScoreStatus.SUCCESS

    def get_results(self, line_item_id: str, page: int = 1, limit: t.Any = None,
                    user_id: t.Any = None) -> t.Any:
        return {"content": [], "has_next": False}


class _Nrps(NamesRoleProvisioningService):
    def __init__(self, request: _Request, config: _Config, platform: Platform) -> None:
        super().__init__(request, config, f"{platform.base}/memberships")
        self.course = platform.course

    def get_member_data_page(self, page: int = 1, limit: t.Any = None, role: t.Any = None,
                             since: t.Any = None, **_: t.Any) -> t.Any:
        members = [{"user_id": p.sub, "roles": p.roles, "name": p.name, "email": p.email,
                    "status": p.status} for p in self.course.people.values()]
        return {"content": members, "has_next": False}

    def get_context_by_id(self) -> Context:
        return Context(id=CONTEXT_ID, label="GPU101", title="GPU kernels 101")


def launch_form(page: str) -> tuple[str, dict[str, str]]:
    """The action and fields of the platform's auto-submitting launch form."""
    action = re.search(r'action="([^"]+)"', page)
    fields = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', page))
    assert action is not None, page
    return html.unescape(action.group(1)), {k: html.unescape(v) for k, v in fields.items()}


__all__ = ["INSTRUCTOR", "LEARNER", "TA", "Platform", "launch_form", "urlencode"]
