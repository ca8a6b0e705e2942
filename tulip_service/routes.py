"""The ``/v1`` API: each route checks its caller's scope and tenant, then makes one
call of the Python producer or reader.

The tenant is the credential's (:class:`~tulip_service.auth.Principal`): a thread or
an event id is looked up in that tenant only (another tenant's is "not found", or
``unknown``), and a namespace whose first part is another tenant is refused with
``403`` before anything is read or written. Adding a route is a function here: take
the caller with ``Depends(reader)`` or ``Depends(writer)``, check a namespace with
:func:`own_namespace`, make the call, translate the producer's refusals with
:func:`refusals`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.security import HTTPBearer
from pydantic import AwareDatetime
from starlette.convertors import StringConvertor, register_url_convertor

from tulip_memory.state import AgentState
from tulip_memory.store.validation import validate_namespace
from tulip_producer.reader import MAX_RECALL_LIMIT
from tulip_service import models
from tulip_service.auth import Principal
from tulip_service.backend import Backend
from tulip_service.problems import (
    COMMON,
    FOREIGN_NAMESPACE,
    INSUFFICIENT_SCOPE,
    INVALID_REQUEST,
    NOT_FOUND,
    UNAUTHORIZED,
    UNKNOWN_BASE,
    UNSUPPORTED_MEDIA_TYPE,
    Kind,
    Problem,
    ProblemError,
    documented,
    event_error,
)


class _ThreadId(StringConvertor):
    """A thread id in a path: any text, ``/`` and line breaks included (Starlette's
    ``path`` stops at a line break); what a thread id may be is the producer's to say."""

    regex = r"[\s\S]*"


register_url_convertor("thread", _ThreadId())

_BEARER = HTTPBearer(auto_error=False, bearerFormat="API key (tulip_...) or JWT")
#: What every authenticated route may answer besides its own (``404``: a path that
#: names no route, an event id holding a ``/`` say).
_AUTHED = (UNAUTHORIZED, INSUFFICIENT_SCOPE, NOT_FOUND, *COMMON)
_PATH_THREAD = frozenset({"thread_id"})

router = APIRouter(prefix="/v1", dependencies=[Depends(_BEARER)])


def backend(request: Request) -> Backend:
    found: Backend = request.app.state.backend
    return found


async def _caller(request: Request) -> Principal:
    return await backend(request).auth.principal(request.headers.get("authorization"))


async def reader(who: Annotated[Principal, Depends(_caller)]) -> Principal:
    """The caller of a route that reads: a credential of scope ``read`` or ``all``."""
    who.require("read")
    return who


async def writer(request: Request, who: Annotated[Principal, Depends(_caller)]) -> Principal:
    """The caller of a route that writes: a credential of scope ``write`` or ``all``,
    sending JSON."""
    who.require("write")
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise Problem(UNSUPPORTED_MEDIA_TYPE, "send the body as application/json")
    return who


Reader = Annotated[Principal, Depends(reader)]
Writer = Annotated[Principal, Depends(writer)]
Namespace = Annotated[
    list[models.Part],
    Query(
        min_length=1,
        max_length=models.NAMESPACE_PARTS,
        description="namespace parts, repeated; the first is your tenant",
    ),
]
Text = Annotated[str, Query(max_length=models.QUERY_CHARS)]


def responses(*kinds: Kind) -> dict[int | str, dict[str, Any]]:
    return documented(*_AUTHED, *kinds)


def own_namespace(who: Principal, parts: Sequence[str], *, where: str) -> tuple[str, ...]:
    """``parts`` as a namespace of the caller's tenant, else a refusal (``422`` for a
    namespace that is not one, ``403`` for another tenant's, whoever that is)."""
    with refusals():
        namespace = validate_namespace(tuple(parts))
    if namespace[0] != who.tenant:
        error = ProblemError(detail="namespace[0] must be your credential's tenant")
        if where == "body":
            error.pointer = "#/namespace/0"
        else:
            error.parameter = "namespace"
        raise Problem(FOREIGN_NAMESPACE, error.detail, errors=[error])
    return namespace


@contextmanager
def refusals(in_path: frozenset[str] = frozenset()) -> Iterator[None]:
    """The producer's and reader's refusals of bad input (``EventError``, which is a
    ``ValueError``, ``TypeError``, ``ValueError``) as ``422`` problem details naming
    the field."""
    try:
        yield
    except (TypeError, ValueError) as e:
        reason = getattr(e, "reason", None) or str(e)
        raise event_error(reason, in_path=in_path) from None


def _accepted(response: Response, event_id: str) -> None:
    response.headers["Location"] = f"/v1/events/{event_id}"


@router.post("/sessions", status_code=202, responses=responses(FOREIGN_NAMESPACE), tags=["events"])
async def session_ended(
    body: models.SessionEnded, request: Request, response: Response, who: Writer
) -> models.Accepted:
    """A session ended: its messages go to memory extraction (``Producer.session_ended``)."""
    namespace = own_namespace(who, body.namespace, where="body")
    messages = [m.model_dump(exclude_unset=True) for m in body.messages]
    with refusals():
        event_id = await backend(request).producer.session_ended(
            namespace, body.thread_id, messages, body.metadata
        )
    _accepted(response, event_id)
    return models.Accepted(event_id=event_id)


@router.post(
    "/threads/{thread_id:thread}/checkpoints",
    status_code=202,
    responses=responses(UNKNOWN_BASE),
    tags=["threads"],
)
async def checkpoint_saved(
    thread_id: str,
    body: models.CheckpointSaved,
    request: Request,
    response: Response,
    who: Writer,
) -> models.CheckpointAccepted:
    """Save a thread's state: the whole ``state``, or the ``messages`` appended since
    checkpoint ``base`` (``Producer.checkpoint_saved``; read your writes at once)."""
    service = backend(request)
    state = await _new_state(service, thread_id, body, who.tenant)
    with refusals(_PATH_THREAD):
        saved = await service.producer.checkpoint_saved(thread_id, state, tenant=who.tenant)
    _accepted(response, saved.event_id)
    return models.CheckpointAccepted(event_id=saved.event_id, checkpoint_id=saved.checkpoint_id)


async def _new_state(
    service: Backend, thread_id: str, body: models.CheckpointSaved, tenant: str
) -> dict[str, Any]:
    """The state to save: the body's, or the base's with the body's additions."""
    extra = ("messages", "iterations", "metadata", "tool_executions")
    if (body.state is None) == (body.base is None):
        both = [_at("state"), _at("base")]
        raise Problem(INVALID_REQUEST, "give exactly one of state and base", errors=both)
    if body.state is not None:
        if given := [f for f in extra if getattr(body, f) is not None]:
            raise Problem(
                INVALID_REQUEST, f"{', '.join(given)} go inside state", errors=[_at(given[0])]
            )
        return body.state.model_dump(exclude_unset=True)
    assert body.base is not None
    with refusals(_PATH_THREAD):
        base = await service.reader.load(thread_id, body.base, tenant=tenant)
    if base is None:
        raise Problem(
            UNKNOWN_BASE, "no checkpoint of this thread has that id", errors=[_at("base")]
        )
    data = base.to_checkpoint()
    data["messages"] += [m.model_dump(exclude_unset=True) for m in body.messages or ()]
    for field in extra[1:]:
        if (value := getattr(body, field)) is not None:
            data[field] = value
    return data


def _at(field: str) -> ProblemError:
    return ProblemError(detail=f"see {field}", pointer=f"#/{field}")


@router.get("/threads/{thread_id:thread}", responses=responses(), tags=["threads"])
async def load_thread(
    thread_id: str,
    request: Request,
    who: Reader,
    checkpoint_id: Annotated[str | None, Query(min_length=1, max_length=1024)] = None,
    view: Annotated[models.View, Query()] = "full",
) -> models.Thread:
    """A thread's state (``Reader.load``): its newest save, applied or not, or the one
    ``checkpoint_id`` names; ``view=compacted`` as a model would be shown it."""
    with refusals(_PATH_THREAD):
        state = await backend(request).reader.load(
            thread_id, checkpoint_id, view, tenant=who.tenant
        )
    if state is None:
        raise Problem(NOT_FOUND, "no such thread (or checkpoint) of your tenant")
    return _thread(thread_id, state)


def _thread(thread_id: str, state: AgentState) -> models.Thread:
    data = state.to_checkpoint()
    return models.Thread(
        thread_id=thread_id,
        messages=data["messages"],
        iterations=data["iterations"],
        metadata=data["metadata"],
        tool_executions=data["tool_executions"],
    )


@router.get("/memories", responses=responses(FOREIGN_NAMESPACE), tags=["recall"])
async def recall(
    request: Request,
    who: Reader,
    namespace: Namespace,
    q: Annotated[str | None, Query(max_length=models.QUERY_CHARS)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_RECALL_LIMIT)] = 10,
) -> models.Memories:
    """The memories of ``namespace`` most relevant to ``q`` (the newest without one),
    across every memory type (``Reader.recall``)."""
    ns = own_namespace(who, namespace, where="query")
    with refusals():
        found = await backend(request).reader.recall(ns, q, limit)
    return models.Memories(
        memories=[
            models.Memory(type=m.type.value, key=m.key, content=m.content, metadata=m.metadata)
            for m in found
        ]
    )


@router.get("/turns", responses=responses(FOREIGN_NAMESPACE), tags=["recall"])
async def recall_turns(
    request: Request,
    who: Reader,
    namespace: Namespace,
    q: Text,
    top_k: Annotated[int, Query(ge=1, le=MAX_RECALL_LIMIT)] = 5,
    threshold: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    since: Annotated[AwareDatetime | None, Query()] = None,
    until: Annotated[AwareDatetime | None, Query()] = None,
) -> models.Turns:
    """The completed turns of ``namespace`` most relevant to ``q`` whose time is in
    ``[since, until)`` (``Reader.recall_turns``)."""
    ns = own_namespace(who, namespace, where="query")
    with refusals():
        hits = await backend(request).reader.recall_turns(
            ns, q, top_k, threshold, since=since, until=until
        )
    return models.Turns(
        turns=[
            models.Turn(
                score=h.score,
                turn=h.turn,
                turn_index=h.turn_index,
                text=h.text,
                metadata=h.metadata,
            )
            for h in hits
        ]
    )


@router.get("/events/{event_id}", responses=responses(), tags=["events"])
async def event_status(event_id: str, request: Request, who: Reader) -> models.EventStatus:
    """How an event of your tenant went (``Reader.status``): ``pending``, ``applied``,
    ``superseded``, ``dead`` (with its redacted reason), or ``unknown``."""
    status = await backend(request).reader.status(event_id, tenant=who.tenant)
    return models.EventStatus(
        event_id=status.event_id,
        state=status.state,
        reason=status.reason,
        memories=status.memories,
        erased=None if status.erased is None else dict(status.erased),
        erased_at=status.erased_at,
    )


@router.post("/forget", status_code=202, responses=responses(FOREIGN_NAMESPACE), tags=["events"])
async def forget(
    body: models.Forget, request: Request, response: Response, who: Writer
) -> models.Accepted:
    """Erase a namespace, some of its messages, a thread or the whole tenant from every
    store, in order with its other events (``Producer.forget``, ``forget_messages``,
    ``forget_thread``, ``forget_tenant``); the event's status carries the receipt."""
    given = [f for f in ("namespace", "thread_id") if getattr(body, f) is not None]
    given += ["tenant"] if body.tenant else []
    if len(given) != 1 or (body.message_ids is not None and given != ["namespace"]):
        errors = [_at(f) for f in given or ("namespace", "thread_id", "tenant")]
        detail = "give exactly one of namespace, thread_id and tenant: true (message_ids "
        raise Problem(INVALID_REQUEST, detail + "goes with namespace)", errors=errors)
    producer = backend(request).producer
    with refusals():
        if body.thread_id is not None:
            event_id = await producer.forget_thread(body.thread_id, tenant=who.tenant)
        elif body.tenant:
            event_id = await producer.forget_tenant(who.tenant)
        else:
            namespace = own_namespace(who, body.namespace or (), where="body")
            if body.message_ids is not None:
                event_id = await producer.forget_messages(namespace, body.message_ids)
            else:
                event_id = await producer.forget(namespace)
    _accepted(response, event_id)
    return models.Accepted(event_id=event_id)
