"""Errors as RFC 9457 problem details, each kind with a stable ``type``.

Every refusal of the service is an ``application/problem+json`` body: ``type`` (a URN
that never changes, what a client branches on), ``title`` (the same for every problem
of the type), ``status``, ``detail`` (this occurrence), ``instance`` (the request's
path) and, for a request that does not validate, ``errors``: one entry per problem,
with a JSON ``pointer`` into the body or the query ``parameter`` it is about. Details
never repeat a credential, and never say anything about another tenant's data.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:tulip-memory:problem:"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Kind:
    slug: str
    status: int
    title: str

    @property
    def type(self) -> str:
        return TYPE_PREFIX + self.slug


MALFORMED_BODY = Kind("malformed-body", 400, "The body is not a JSON document")
UNAUTHORIZED = Kind("unauthorized", 401, "No valid credential")
INSUFFICIENT_SCOPE = Kind("insufficient-scope", 403, "The credential's scope does not allow this")
FOREIGN_NAMESPACE = Kind("foreign-namespace", 403, "The namespace is not the credential's tenant's")
NOT_FOUND = Kind("not-found", 404, "Not found")
METHOD_NOT_ALLOWED = Kind("method-not-allowed", 405, "Method not allowed")
UNKNOWN_BASE = Kind("unknown-base", 409, "The base checkpoint is not one of this thread's")
BODY_TOO_LARGE = Kind("body-too-large", 413, "The body is larger than the service accepts")
UNSUPPORTED_MEDIA_TYPE = Kind("unsupported-media-type", 415, "The body must be application/json")
INVALID_REQUEST = Kind("invalid-request", 422, "The request does not validate")
UNAVAILABLE = Kind("unavailable", 503, "A service this one depends on does not answer")
INTERNAL = Kind("internal", 500, "Internal error")
KINDS = (
    MALFORMED_BODY,
    UNAUTHORIZED,
    INSUFFICIENT_SCOPE,
    FOREIGN_NAMESPACE,
    NOT_FOUND,
    METHOD_NOT_ALLOWED,
    UNKNOWN_BASE,
    BODY_TOO_LARGE,
    UNSUPPORTED_MEDIA_TYPE,
    INVALID_REQUEST,
    UNAVAILABLE,
    INTERNAL,
)
_BY_STATUS = {k.status: k for k in KINDS if k is not FOREIGN_NAMESPACE}


class ProblemError(BaseModel):
    """One reason a request does not validate."""

    detail: str
    pointer: str | None = Field(default=None, description="JSON pointer into the body")
    parameter: str | None = Field(default=None, description="the query or path parameter")


class ProblemDetails(BaseModel):
    """RFC 9457 problem details."""

    type: str = Field(description=f"a stable URN, `{TYPE_PREFIX}<kind>`")
    title: str
    status: int
    detail: str
    instance: str
    errors: list[ProblemError] | None = None


class Problem(Exception):
    """A refusal: raised anywhere in a request, answered as problem details."""

    def __init__(
        self,
        kind: Kind,
        detail: str,
        *,
        errors: list[ProblemError] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.errors = errors
        self.headers = headers


def response(
    kind: Kind,
    detail: str,
    instance: str,
    errors: list[ProblemError] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = ProblemDetails(
        type=kind.type,
        title=kind.title,
        status=kind.status,
        detail=detail,
        instance=instance,
        errors=errors,
    )
    return JSONResponse(
        body.model_dump(exclude_none=True),
        status_code=kind.status,
        media_type=PROBLEM_JSON,
        headers=headers,
    )


def documented(*kinds: Kind) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route that may answer ``kinds``, for the OpenAPI document."""
    out: dict[int | str, dict[str, Any]] = {}
    for kind in kinds:
        entry = out.setdefault(
            kind.status,
            {"description": kind.title, "content": {PROBLEM_JSON: {"schema": _REF}}},
        )
        if kind.title not in entry["description"]:
            entry["description"] += f"; {kind.title}"
    return out


_REF = {"$ref": "#/components/schemas/ProblemDetails"}
#: What every route may answer, whatever it does.
COMMON = (MALFORMED_BODY, UNSUPPORTED_MEDIA_TYPE, BODY_TOO_LARGE, INVALID_REQUEST, INTERNAL)

_PAYLOAD_PATH = re.compile(r"payload\.([A-Za-z_]+)((?:\[\d+\]|\.[A-Za-z_]+)*)")
_NS_PART = re.compile(r"namespace\[(\d+)\]")


def event_error(reason: str, *, in_path: frozenset[str] = frozenset()) -> Problem:
    """A refusal of the producer's validation (an ``EventError``'s ``reason``, or a
    ``TypeError``/``ValueError`` text), pointing at the field it names: the reason's
    ``payload.<field>[i]`` is the body's ``#/<field>/i``; a field the route takes from
    its path (``in_path``) is that parameter."""
    match = _PAYLOAD_PATH.search(reason) or _NS_PART.search(reason)
    error = ProblemError(detail=reason)
    if match is not None and match.re is _PAYLOAD_PATH:
        field, rest = match.group(1), match.group(2)
        if field in in_path:
            error.parameter = field
        else:
            steps = re.findall(r"\[(\d+)\]|\.([A-Za-z_]+)", rest)
            tail = "".join(f"/{i or name}" for i, name in steps)
            part = _NS_PART.search(reason) if field == "namespace" and not tail else None
            error.pointer = f"#/{field}{tail}" + (f"/{part.group(1)}" if part else "")
    elif match is not None:
        error.pointer = f"#/namespace/{match.group(1)}"
    return Problem(INVALID_REQUEST, reason, errors=[error])


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` as problem details."""

    async def problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return response(exc.kind, exc.detail, request.url.path, exc.errors, exc.headers)

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = [_validation_error(e) for e in exc.errors()]
        if any(e.get("type") == "json_invalid" for e in exc.errors()):
            return response(MALFORMED_BODY, "the body is not valid JSON", request.url.path)
        detail = "; ".join(
            f"{e.pointer or e.parameter}: {e.detail}" if (e.pointer or e.parameter) else e.detail
            for e in errors
        )
        return response(INVALID_REQUEST, detail, request.url.path, errors)

    async def http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        kind = _BY_STATUS.get(exc.status_code, INTERNAL)
        detail = exc.detail if isinstance(exc.detail, str) else kind.title
        return response(kind, detail, request.url.path, headers=exc.headers)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s failed: %s", request.method, request.url.path, type(exc).__name__)
        return response(INTERNAL, "the service failed; its log says why", request.url.path)

    app.add_exception_handler(Problem, problem)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http)
    app.add_exception_handler(Exception, unexpected)


def _validation_error(error: Any) -> ProblemError:
    """A pydantic error as a problem entry: never the input itself (it may be a
    user's text, or a credential)."""
    loc = [str(p) for p in error.get("loc", ())]
    message = str(error.get("msg", "invalid"))
    if loc and loc[0] == "body":
        return ProblemError(detail=message, pointer="#/" + "/".join(loc[1:]))
    if len(loc) >= 2:
        return ProblemError(detail=message, parameter=loc[1])
    return ProblemError(detail=message)
