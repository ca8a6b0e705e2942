"""The CLI as a newcomer meets it: a version, plain help on every option, and for each
mistake one line on stderr that names the variable or option, and a non-zero exit."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.openai_server import FakeOpenAI
from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.embeddings import embedder_from_env
from tulip_ops.cli import _parser, version

CLI = [sys.executable, "-m", "tulip_ops.cli"]
UNSET = ("TULIP_DATABASE_URL", "TULIP_DATABASE_ADMIN_URL", "TULIP_BROKER_URL", "OPENAI_API_KEY")


def run(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in UNSET}
    return subprocess.run(
        [*CLI, *argv], capture_output=True, text=True, timeout=120, check=False,
        env={**base, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env},
    )  # fmt: skip


def dsns(postgres: Postgres) -> dict[str, str]:
    return {"TULIP_DATABASE_URL": postgres.app_dsn, "TULIP_DATABASE_ADMIN_URL": postgres.admin_dsn}


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "\x1b" not in done.stderr and "Traceback" not in done.stderr
    return lines[0]


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _parsers(child)
    return found


def test_version() -> None:
    done = run("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"tulip-memory {version()}" and version() != "unknown"


def test_every_option_has_plain_help() -> None:
    for parser in _parsers(_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                continue
            assert action.help and action.help != argparse.SUPPRESS, (parser.prog, action.dest)
        text = parser.format_help()
        assert "``" not in text and ":class:" not in text, parser.prog


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["worker", "extract", "--shards"], {}, "--shards: expected at least one argument"),
        (["worker", "extract", "--shards", "7"], {"TULIP_EXTRACT_SHARDS": "2"}, "--shards 7 out"),
        (["worker", "extract"], {"TULIP_EXTRACT_SHARDS": "four"}, "TULIP_EXTRACT_SHARDS"),
        (["reindex", "--status"], {}, "TULIP_DATABASE_URL is not set"),
        (["reindex"], {}, "--model NEW is needed"),
        (["dlq", "list"], {}, "TULIP_DATABASE_ADMIN_URL"),
        (["provision"], {}, "TULIP_DATABASE_ADMIN_URL"),
        (["graphs"], {}, "TULIP_DATABASE_ADMIN_URL"),
        (["graphs", "--most", "-1"], {"TULIP_DATABASE_ADMIN_URL": "postgresql://x"}, "--most"),
        (["graphs"], {"TULIP_DATABASE_ADMIN_URL": "postgresql://x"}, "TULIP_DATABASE_URL"),
        (["nonsense"], {}, "invalid choice: 'nonsense'"),
        (["dev", "--shards", "0"], {}, "--shards: must be at least 1, got 0"),
        (["metrics", "--port", "70000"], {}, "--port: must be a port in 1..65535, got 70000"),
        (["dlq", "list", "--limit", "0"], {}, "--limit: must be at least 1, got 0"),
        (
            ["graphs"],
            {"TULIP_BROKER_URL": "redis://:change-me@redis:6379/0"},
            "TULIP_BROKER_URL holds the placeholder 'change-me' of .env.example",
        ),
        (
            ["graphs"],
            {"TULIP_REDIS_URL": "redis://:a/b+c@redis:6379/0"},
            "TULIP_REDIS_URL is not a valid URL",
        ),
    ],
)
def test_configuration_errors_are_one_line(
    argv: list[str], env: dict[str, str], expected: str
) -> None:
    line = one_error_line(run(*argv, **env))
    assert expected in line and "error: " in line, line
    assert "/" not in line.split("error: ")[-1].split(" ")[0], "a value was echoed"


def test_a_missing_admin_dsn_is_asked_for_in_the_environment_never_on_argv() -> None:
    for argv in (["dlq", "list"], ["keys", "list"]):
        line = one_error_line(run(*argv))
        assert line.startswith("error: TULIP_DATABASE_ADMIN_URL is not set"), line
        assert "export TULIP_DATABASE_ADMIN_URL=" in line and "--database-url" not in line
    for parser in _parsers(_parser()):
        assert not any("url" in opt for a in parser._actions for opt in a.option_strings)


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "argv",
    [["dlq", "list"], ["keys", "list"], ["reindex", "--status", "--tenant", "acme"], ["graphs"]],
)
def test_an_unreachable_database_names_its_variable_and_host_and_no_secret(
    argv: list[str],
) -> None:
    """Each DSN points somewhere nobody answers (a closed port, the socket directory of
    a stopped stack, as a stale tulip.env does); the line names the one tried."""
    for where in ("port", "socket"):
        env: dict[str, str] = {}
        for variable in ("TULIP_DATABASE_URL", "TULIP_DATABASE_ADMIN_URL"):
            if where == "port":
                env[variable] = f"postgresql://tulip:s3cret@127.0.0.1:{_closed_port()}/tulip"
            else:
                gone = f"/tmp/gone-{uuid.uuid4().hex[:8]}"  # short: a socket path's limit
                env[variable] = f"postgresql://tulip:s3cret@/tulip?host={gone}"
        line = one_error_line(run(*argv, **env))
        assert line.startswith("error: cannot reach Postgres at postgresql://***@"), line
        assert "s3cret" not in line, line
        reason = "Connect call failed" if where == "port" else "no server socket there"
        assert reason in line, line
        tried = [v for v in env if env[v].split("@", 1)[1] in line]
        assert len(tried) == 1 and f"({tried[0]})" in line, line


async def test_a_reader_on_an_unreachable_database_says_where() -> None:
    from tulip_memory.errors import DatabaseUnreachable
    from tulip_memory.store import PgMemory
    from tulip_producer import Reader

    port = _closed_port()
    reader = Reader(PgMemory(f"postgresql://app:s3cret@127.0.0.1:{port}/tulip"))
    try:
        with pytest.raises(DatabaseUnreachable) as caught:
            reader.recall(("acme", "u"), "anything")
    finally:
        reader.close()
    assert isinstance(caught.value, ConnectionError)
    message = str(caught.value)
    assert message.startswith(f"cannot reach Postgres at postgresql://***@127.0.0.1:{port}/tulip")
    assert "s3cret" not in message


def test_reindex_hints_are_commands_that_reach_the_same_job() -> None:
    from tulip_ops.reindex_cli import _again

    assert _again("acme", "--finalize") == "tulip-memory reindex --finalize --tenant acme"
    assert _again("a b", "--resume") == "tulip-memory reindex --resume --tenant 'a b'"
    assert _again(None, "--status") == "tulip-memory reindex --status"


def test_namespaces_print_as_the_tuples_applications_name_them() -> None:
    from tulip_memory.reindex.graphs import Graph

    graph = Graph("memories", "acme", "acme\x1fusers\x1fmaya", "embedding")
    assert str(graph) == "memories of namespace ('acme', 'users', 'maya') (embedding)"


def test_an_unknown_provider_is_one_line_without_litellm_banners(postgres: Postgres) -> None:
    line = one_error_line(
        run("reindex", "--model", "nosuchprovider/xyz", "--tenant", "acme", **dsns(postgres))
    )
    assert line.count("unknown embedding model 'nosuchprovider/xyz'") == 1, line
    assert "Provider List" not in line and "Give Feedback" not in line


def test_a_missing_api_key_is_refused_before_any_request(
    postgres: Postgres, fake_openai: FakeOpenAI
) -> None:
    line = one_error_line(
        run("reindex", "--model", "openai/text-embedding-3-small", "--tenant", "acme",
            "--api-base", fake_openai.url, **dsns(postgres))
    )  # fmt: skip
    assert "OPENAI_API_KEY is not set" in line
    assert fake_openai.requests == []  # refused, not retried


async def test_status_without_a_job_is_not_an_error(postgres: Postgres) -> None:
    table = f"cli_{uuid.uuid4().hex[:8]}"
    # The table, migrated as its owner, with the embedder the CLI builds from the env.
    store = app_store(postgres.app_dsn, table=table, embedder=embedder_from_env({}))
    try:
        assert await store.get(("acme", "users"), "nothing") is None
    finally:
        await store.close()
    done = run("reindex", "--status", "--tenant", "acme", TULIP_MEMORY_TABLE=table,
               **dsns(postgres))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "no reindex job for tenant 'acme'; `tulip-memory reindex --model NEW --tenant acme` "
        "starts one"
    )


async def test_graphs_builds_and_drops_a_namespaces_own_graph(
    postgres: Postgres, tmp_path: Path
) -> None:
    table = f"cli_{uuid.uuid4().hex[:8]}"
    store = app_store(postgres.app_dsn, table=table, embedder=embedder_from_env({}))
    try:
        await store.put_batch([(("acme", "users"), f"k{i}", f"note {i}", None) for i in range(12)])
        # Three more namespaces under --min-rows: "users" is a third of the table.
        for other in ("a", "b", "c"):
            await store.put_batch([(("acme", other), f"k{i}", "a note", None) for i in range(9)])
    finally:
        await store.close()
    env = {"TULIP_MEMORY_TABLE": table, **dsns(postgres)}
    beat = tmp_path / "graphs.ok"
    built = run("graphs", "--min-rows", "10", "--heartbeat", str(beat), **env)
    assert built.returncode == 0, built.stderr
    assert beat.exists()  # the compose healthcheck's file
    assert built.stdout.splitlines() == [
        "built memories of namespace ('acme', 'users') (embedding)",
        "namespace graphs: 1 built, 0 dropped, 0 kept",
    ]
    again = run("graphs", "--min-rows", "10", **env)
    assert again.stdout.strip() == "namespace graphs: 0 built, 0 dropped, 1 kept", again.stderr
    dropped = run("graphs", "--most", "0", **env)
    assert dropped.stdout.splitlines()[-1] == "namespace graphs: 0 built, 1 dropped, 0 kept"
    # Two at once: one builds, the other waits for it and finds the graph there.
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda _: run("graphs", "--min-rows", "10", **env), range(2)))
    assert sorted(d.stdout.splitlines()[-1] for d in both) == [
        "namespace graphs: 0 built, 0 dropped, 1 kept",
        "namespace graphs: 1 built, 0 dropped, 0 kept",
    ], [d.stderr for d in both]
