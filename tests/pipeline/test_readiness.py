"""A worker with a bad database setting says so and is never ready (real shard and
reindex workers).

Unreachable (a socket directory that does not exist, a port nobody listens on): one
line at once naming TULIP_DATABASE_URL and where it points, credentials stripped, then
one every few seconds, and no "ready" until Postgres answers. Refused (a database
that does not exist): the line, then the worker exits non-zero.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.pipeline.conftest import Pipeline
from tests.pipeline.test_poison import wait_for
from tests.support.workers import WorkerProcess, worker_env

SECRET = "hunter2-db-secret"


def wrong_database(dsn: str) -> str:
    """``dsn`` with a password and a database that does not exist."""
    parts = urlsplit(dsn)
    netloc = f"{parts.username or 'app'}:{SECRET}@{parts.netloc.rsplit('@', 1)[-1]}"
    return urlunsplit(parts._replace(netloc=netloc, path="/no_such_database"))


def start(
    pipeline: Pipeline, name: str, dsn: str, tmp_path: Path, *, reindex: bool = False
) -> WorkerProcess:
    """A shard worker (solo), or with ``reindex`` a reindex worker (prefork, as the
    supervisor runs it), on ``dsn``; not waited for."""
    env = worker_env(**pipeline.env(TULIP_DATABASE_URL=dsn))
    queue, pool = ("memory.reindex", "prefork") if reindex else ("memory.extract.0", "solo")
    worker = WorkerProcess(name, [queue], env, tmp_path / f"{name}.log", pool=pool)
    pipeline.workers.started.append(worker)
    return worker.start(wait=False)


def test_an_unreachable_database_is_named_again_and_again_and_never_ready(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    no_dir = tmp_path / "no-such-socket-dir"
    wrong = {
        "socket-dir": (f"postgresql://app:{SECRET}@/tulip?host={no_dir}", str(no_dir)),
        "port": (f"postgresql://app:{SECRET}@127.0.0.1:1/tulip", "127.0.0.1:1"),
    }
    workers = {
        kind: start(pipeline, f"bad-{kind}", dsn, tmp_path) for kind, (dsn, _) in wrong.items()
    }
    for kind, worker in workers.items():
        where = re.escape(wrong[kind][1])
        line = re.compile(rf"cannot reach Postgres at \S*{where}\S* \(TULIP_DATABASE_URL\)")
        wait_for(
            f"two attempts of {kind} logged",
            lambda w=worker, pattern=line: len(pattern.findall(w.output())) >= 2,
            timeout=90,
        )
        output = worker.output()
        assert SECRET not in output
        assert " ready." not in output
        assert worker.proc is not None and worker.proc.poll() is None  # still waiting


def test_a_database_that_refuses_the_worker_stops_it_with_one_line(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    worker = start(pipeline, "bad-database", wrong_database(pipeline.database_url), tmp_path)
    assert worker.proc is not None
    wait_for("the worker exits", lambda: worker.proc.poll() is not None, timeout=90)
    output = worker.output()
    assert worker.proc.returncode != 0
    assert "refused this worker" in output and "(TULIP_DATABASE_URL)" in output
    assert "no_such_database" in output
    assert SECRET not in output and " ready." not in output


def test_a_reindex_worker_waits_for_its_database_too(pipeline: Pipeline, tmp_path: Path) -> None:
    """Unreachable: named again and again, never ready; the same worker on the right
    database is ready."""
    no_dir = tmp_path / "no-such-socket-dir"
    bad = start(
        pipeline,
        "reindex-bad",
        f"postgresql://app:{SECRET}@/tulip?host={no_dir}",
        tmp_path,
        reindex=True,
    )
    line = re.compile(
        rf"cannot reach Postgres at \S*{re.escape(str(no_dir))}\S* \(TULIP_DATABASE_URL\)"
    )
    wait_for("two attempts logged", lambda: len(line.findall(bad.output())) >= 2, timeout=90)
    assert SECRET not in bad.output() and " ready." not in bad.output()
    assert bad.proc is not None and bad.proc.poll() is None  # still waiting
    good = start(pipeline, "reindex-good", pipeline.database_url, tmp_path, reindex=True)
    good.wait_ready(90)
    assert "Postgres at" in good.output() and "answers" in good.output()


def test_a_worker_that_calls_a_model_loads_its_client_before_it_is_ready(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """The litellm import (seconds) happens before "ready", not in its first events."""
    env = worker_env(
        **pipeline.env(
            TULIP_EXTRACT_MODEL="openai/test-model",
            TULIP_EXTRACT_API_BASE="http://127.0.0.1:9/v1",  # never called here
            TULIP_EXTRACT_API_KEY="test",
            TULIP_EXTRACT_CLIENT="litellm",  # else the OpenAI SDK: no litellm to load
        )
    )
    worker = WorkerProcess("llm-ready", ["memory.extract.0"], env, tmp_path / "llm.log")
    pipeline.workers.started.append(worker)
    worker.start(wait=False).wait_ready(180)
    output = worker.output()
    loaded = output.find("model client (litellm) loaded")
    assert 0 <= loaded < output.find(" ready."), output[-2000:]
