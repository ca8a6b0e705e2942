"""Tenant A's credential cannot read, write, load or query tenant B's data, on any
endpoint, and learns nothing about it; keys are refused when revoked, forged,
malformed or out of scope, and only the operators can make one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import asyncpg
import httpx
import pytest

from tests.service.conftest import KEY_CACHE_SECONDS, Stack, problem
from tests.support.services import Postgres
from tulip_ops.dev.embedded import run_async
from tulip_service import keys


def _session(ns: list[str], text: str) -> dict[str, object]:
    return {"namespace": ns, "thread_id": "t", "messages": [{"role": "user", "content": text}]}


def test_no_endpoint_lets_one_tenant_reach_another(stack: Stack) -> None:
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    ns_b = [b, "users", "u1"]
    thread = "ticket-8912-refund"
    with stack.client(stack.key(b)) as owner:
        posted = owner.post("/v1/sessions", json=_session(ns_b, "My favourite colour is teal."))
        event_b = posted.json()["event_id"]
        saved = owner.post(
            f"/v1/threads/{thread}/checkpoints",
            json={"state": {"messages": [{"role": "user", "content": "B's secret"}]}},
        ).json()
        assert stack.wait_done(owner, event_b) == "applied"
        assert stack.wait_done(owner, saved["event_id"]) == "applied"
    with stack.client(stack.key(a)) as intruder:
        # Writes into B's namespace: refused before anything is published.
        problem(intruder.post("/v1/sessions", json=_session(ns_b, "x")), 403, "foreign-namespace")
        # Reads of B's namespace: refused the same way, whether B has data or not.
        for path in ("/v1/memories", "/v1/turns"):
            refused = intruder.get(path, params={"namespace": ns_b, "q": "colour"})
            body = problem(refused, 403, "foreign-namespace")
            empty = intruder.get(path, params={"namespace": ["nobody", "x"], "q": "colour"})
            assert problem(empty, 403, "foreign-namespace")["detail"] == body["detail"]
        # B's thread id names A's own thread: not found, and B's base is unknown to A.
        problem(intruder.get(f"/v1/threads/{thread}"), 404, "not-found")
        at = {"checkpoint_id": saved["checkpoint_id"]}
        problem(intruder.get(f"/v1/threads/{thread}", params=at), 404, "not-found")
        appended = intruder.post(
            f"/v1/threads/{thread}/checkpoints",
            json={"base": saved["checkpoint_id"], "messages": [{"role": "user", "content": "x"}]},
        )
        problem(appended, 409, "unknown-base")
        # B's event ids: the answer of an id nobody published.
        for event_id in (event_b, saved["event_id"]):
            status = intruder.get(f"/v1/events/{event_id}").json()
            assert status == {"event_id": event_id, "state": "unknown", "reason": None,
                              "memories": None, "erased": None, "erased_at": None}  # fmt: skip
        # A's own save of the same thread id is A's thread, and B's is untouched.
        mine = intruder.post(
            f"/v1/threads/{thread}/checkpoints",
            json={"state": {"messages": [{"role": "user", "content": "A's own"}]}},
        )
        assert mine.status_code == 202
        assert intruder.get(f"/v1/threads/{thread}").json()["messages"][0]["content"] == "A's own"
    with stack.client(stack.key(b)) as owner:
        assert owner.get(f"/v1/threads/{thread}").json()["messages"][0]["content"] == "B's secret"


def test_scopes_are_enforced(stack: Stack, tenant: str) -> None:
    ns = [tenant, "u"]
    with stack.client(stack.key(tenant, "read")) as reader:
        problem(reader.post("/v1/sessions", json=_session(ns, "hi")), 403, "insufficient-scope")
        problem(
            reader.post("/v1/threads/t/checkpoints", json={"state": {}}), 403, "insufficient-scope"
        )
        assert reader.get("/v1/memories", params={"namespace": ns}).status_code == 200
    with stack.client(stack.key(tenant, "write")) as writer:
        assert writer.post("/v1/sessions", json=_session(ns, "hi")).status_code == 202
        for path in ("/v1/threads/t", "/v1/events/" + "0" * 32):
            problem(writer.get(path), 403, "insufficient-scope")
        problem(writer.get("/v1/memories", params={"namespace": ns}), 403, "insufficient-scope")


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer not-a-key",
        "Bearer tulip_",
        "Bearer tulip_0123456789abcdef.ZGVtbw.short",
        "Bearer eyJhbGciOiJub25lIn0.eyJ0ZW5hbnQiOiJkZW1vIn0.",  # alg none, no JWT configured
    ],
)
def test_missing_and_malformed_credentials_are_refused(stack: Stack, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    for method, path in (("GET", "/v1/memories?namespace=demo"), ("POST", "/v1/sessions")):
        response = httpx.request(method, stack.url + path, headers=headers, json={})
        body = problem(response, 401, "unauthorized")
        assert response.headers["www-authenticate"].startswith("Bearer")
        if header is not None and len(header) > 7:
            assert header[7:] not in body["detail"]  # a credential is never repeated


def test_a_forged_tenant_part_and_a_wrong_secret_are_refused(stack: Stack, tenant: str) -> None:
    key = stack.key(tenant)
    key_id, _, secret = key.removeprefix(keys.PREFIX).split(".")
    other = keys.new_key("someone-else")[0].split(".")[1]
    forged = f"{keys.PREFIX}{key_id}.{other}.{secret}"  # the real secret, another tenant
    wrong = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    for bad in (forged, wrong):
        with stack.client(bad) as client:
            problem(client.get("/v1/memories", params={"namespace": tenant}), 401, "unauthorized")
    with stack.client(key) as client:
        assert client.get("/v1/memories", params={"namespace": tenant}).status_code == 200


def test_a_revoked_key_is_refused_and_keys_are_listed_without_secrets(
    stack: Stack, tenant: str
) -> None:
    cli = [sys.executable, "-m", "tulip_ops.cli", "keys"]
    admin = {**os.environ, "TULIP_DATABASE_ADMIN_URL": stack.admin_dsn}  # never on argv
    made = subprocess.run(
        [*cli, "create", "--tenant", tenant, "--scope", "read", "--name", "ui"],
        capture_output=True, text=True, check=True, timeout=60, env=admin,
    )  # fmt: skip
    key = made.stdout.strip()
    key_id = key.removeprefix(keys.PREFIX).split(".")[0]
    assert "shown once" in made.stderr
    with stack.client(key) as client:
        assert client.get("/v1/memories", params={"namespace": tenant}).status_code == 200
        listed = subprocess.run(
            [*cli, "list", "--tenant", tenant],
            capture_output=True,
            text=True,
            check=True,
            env=admin,
        ).stdout
        assert key_id in listed and "scope read" in listed and "'ui'" in listed
        assert key.split(".")[-1] not in listed
        subprocess.run(
            [*cli, "revoke", key_id], check=True, capture_output=True, timeout=60, env=admin
        )
        deadline = time.monotonic() + KEY_CACHE_SECONDS + 10
        ask = {"namespace": tenant}
        while (status := client.get("/v1/memories", params=ask)).status_code == 200:
            assert time.monotonic() < deadline, "the revoked key still works"
            time.sleep(0.1)
        problem(status, 401, "unauthorized")
    assert (
        "revoked"
        in subprocess.run(
            [*cli, "list", "--tenant", tenant],
            capture_output=True,
            text=True,
            check=True,
            env=admin,
        ).stdout
    )
    gone = subprocess.run([*cli, "revoke", "0" * 16], capture_output=True, text=True, env=admin)
    assert gone.returncode == 1 and "no API key" in gone.stderr


def test_the_application_role_cannot_mint_or_revoke_keys(postgres: Postgres) -> None:
    """Whoever holds the application DSN reads keys of the tenant it pins, and can
    neither insert a key row (for any tenant, its own included) nor revoke one."""

    async def go() -> None:
        conn = await asyncpg.connect(postgres.app_dsn)
        try:
            await conn.execute("SELECT set_config('tulip.tenant', 'victim', false)")
            _, parsed = keys.new_key("victim")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(
                    f"INSERT INTO {keys.TABLE} (key_id, tenant, scope, secret_sha256) "
                    "VALUES ($1, 'victim', 'all', $2)",
                    parsed.key_id,
                    parsed.secret_sha256,
                )
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(f"UPDATE {keys.TABLE} SET revoked_at = NULL")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(f"DELETE FROM {keys.TABLE}")
        finally:
            await conn.close()

    run_async(go())
