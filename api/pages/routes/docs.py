"""The API reference, Swagger UI at ``/docs`` and Redoc at ``/redoc``, served from the assets
vendored into this package (api/pages/static/vendor, scripts/vendor_assets.py): no CDN, so
they work on an offline lab network."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse

router = APIRouter(include_in_schema=False, tags=["pages"])

VENDOR = "/static/vendor"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"
#: This origin only: the browser never fetches from elsewhere (Redoc's footer would load its
#: logo from a CDN; it hides the image when the load fails). FastAPI's Swagger UI page starts
#: the UI from an inline script, and both UIs inject inline styles; Redoc's search runs in a
#: blob: worker.
DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' "
            "'unsafe-inline'; img-src 'self' data:; worker-src 'self' blob:; "
            "object-src 'none'; base-uri 'none'; frame-ancestors 'none'")


def _local_only(response: HTMLResponse, *, extra_css: str | None = None) -> HTMLResponse:
    """`response` with the CSP above, ``lang="en"`` on its <html> (FastAPI's pages have none;
    screen readers need it), and optionally one more stylesheet."""
    html = bytes(response.body).decode("utf-8").replace("<html>", '<html lang="en">', 1)
    if extra_css:
        html = html.replace("</head>", f'<link rel="stylesheet" href="{extra_css}">\n</head>', 1)
    return HTMLResponse(html, headers={"Content-Security-Policy": DOCS_CSP})


@router.get("/docs")
def read_swagger_ui(request: Request) -> HTMLResponse:
    app = request.app
    return _local_only(get_swagger_ui_html(
        openapi_url=app.openapi_url, title=f"{app.title}: API reference",
        swagger_js_url=f"{VENDOR}/swagger-ui-dist/swagger-ui-bundle.js",
        swagger_css_url=f"{VENDOR}/swagger-ui-dist/swagger-ui.css",
        swagger_favicon_url=f"{VENDOR}/swagger-ui-dist/favicon-32x32.png",
        oauth2_redirect_url=OAUTH2_REDIRECT,
        # FastAPI turns deep links on: each operation's path becomes a link inside the button
        # that opens it, a control nested in a control (axe: nested-interactive, serious).
        swagger_ui_parameters={"deepLinking": False}), extra_css="/static/docs-a11y.css")


@router.get(OAUTH2_REDIRECT)
def read_swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
def read_redoc(request: Request) -> HTMLResponse:
    app = request.app
    return _local_only(get_redoc_html(
        openapi_url=app.openapi_url, title=f"{app.title}: API reference (Redoc)",
        redoc_js_url=f"{VENDOR}/redoc/redoc.standalone.js",
        redoc_favicon_url=f"{VENDOR}/swagger-ui-dist/favicon-32x32.png",
        with_google_fonts=False))
