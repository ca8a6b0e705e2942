"""Save p50 on S3 (moto) with and without the conditional head write, beside LangGraph's
``PostgresSaver``, the same turns interleaved in one run.

- **tagged**: :class:`~tulip_memory.delta.S3DeltaStorage` as shipped: a save onto the
  head this process wrote is one ``PutObject`` with ``If-Match`` (no read of the head);
- **read-first**: ``conditional_writes=False``: every save reads the head, then writes
  it (the behaviour before);
- **full**: one ``PutObject`` of the whole compressed state (no history at all);
- **put**: one ``PutObject`` of the bytes of the head the tagged save just wrote, and
  nothing else: the floor of any save that writes one object;
- **langgraph** (with ``langgraph-checkpoint-postgres`` installed in the bench
  environment): ``PostgresSaver.put`` on an embedded Postgres;
- **tag-obs**, **put-obs** (with ``obstore`` installed in the bench environment): the
  tagged save and the lone ``PutObject`` through :class:`bench._obstore.ObstoreS3`, an
  S3 client in Rust instead of botocore (whose CPU is most of a put's on the client);
- **tag-mio**, **put-mio** (with ``minio`` installed in the bench environment): the
  same through :class:`bench._minio.MinioS3`, MinIO's Python client (its own SigV4 on
  urllib3).

Usage: ``python -m bench.save_p50 --dataset '../shared/data/locomo10/41.json'``, in a bench
environment with ``langgraph-checkpoint-postgres 'psycopg[binary]' gunicorn obstore minio`` (the S3
server: :func:`bench.checkpoints.moto_command`, which keeps connections alive when the
bench environment has gunicorn)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.util
import os
import uuid

from bench._minio import MinioS3
from bench._obstore import ObstoreS3
from bench.checkpoints import (
    FullEverySave,
    LangGraphPostgres,
    Ours,
    langgraph_saver,
    moto_server,
    p50,
    threads_from,
    timed,
)
from tulip_memory.delta import S3DeltaStorage
from tulip_memory.delta.keys import ThreadKeys
from tulip_memory.delta.objects import ObjectStoreDeltaStorage


async def run(args: argparse.Namespace) -> None:
    import boto3

    for var, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
        os.environ.setdefault(var, value)
    threads = threads_from(args)
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(moto_server())
        use_lg = importlib.util.find_spec("langgraph.checkpoint.postgres") is not None
        use_obs = importlib.util.find_spec("obstore") is not None
        use_mio = importlib.util.find_spec("minio") is not None
        saver = stack.enter_context(langgraph_saver()) if use_lg else None
        bucket = f"tulip-bench-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=url, region_name="us-east-1").create_bucket(Bucket=bucket)

        def storage(conditional: bool) -> S3DeltaStorage:
            return S3DeltaStorage(
                bucket, "bench", endpoint_url=url, region_name="us-east-1",
                conditional_writes=conditional,
            )  # fmt: skip

        def rust(name: str) -> ObjectStoreDeltaStorage:
            return ObjectStoreDeltaStorage(ObstoreS3(bucket, f"obs-{name}", url))

        def light(name: str) -> ObjectStoreDeltaStorage:
            keys = (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
            return ObjectStoreDeltaStorage(MinioS3(bucket, f"mio-{name}", url, *keys))

        print(
            f"{'thread':<16}{'saves':>6} | {'tagged':>7}{'read-1st':>9}{'full':>7}{'put':>7}"
            f"{'lg':>7}{'tag-obs':>8}{'put-obs':>8}{'tag-mio':>8}{'put-mio':>8} | {'tag/rd':>7}"
            f"{'tag/full':>9}{'tag/put':>8}{'tag/lg':>7}{'put/lg':>7}{'obs/lg':>7}{'pobs/lg':>8}"
            f"{'mio/lg':>7}{'pmio/lg':>8}  (save p50, ms)"
        )
        for thread in threads:
            tagged = Ours(storage(True), args.depth, thread.name)
            plain = Ours(storage(False), args.depth, thread.name)
            full = FullEverySave(storage(True))
            lg = LangGraphPostgres(saver, thread.name) if saver is not None else None
            obs = Ours(rust(thread.name), args.depth, thread.name) if use_obs else None
            mio = Ours(light(thread.name), args.depth, thread.name) if use_mio else None
            ms: dict[str, list[float]] = {k: [] for k in "trfploqmn"}
            for i, state in enumerate(thread.states):
                ms["t"].append((await timed(functools.partial(tagged.save, state)))[0])
                ms["p"].append(await bare_put(tagged))
                ms["r"].append((await timed(functools.partial(plain.save, state)))[0])
                ms["f"].append((await timed(functools.partial(full.save, i, state)))[0])
                if lg is not None:
                    ms["l"].append((await timed(functools.partial(lg.save, i, state)))[0])
                if obs is not None:
                    ms["o"].append((await timed(functools.partial(obs.save, state)))[0])
                    ms["q"].append(await bare_put(obs))
                if mio is not None:
                    ms["m"].append((await timed(functools.partial(mio.save, state)))[0])
                    ms["n"].append(await bare_put(mio))
            assert await tagged.load_latest() == thread.states[-1]
            assert await plain.load_latest() == thread.states[-1]
            assert obs is None or await obs.load_latest() == thread.states[-1]
            assert mio is None or await mio.load_latest() == thread.states[-1]
            p = {k: p50(v) for k, v in ms.items()}
            print(
                f"{thread.name[-16:]:<16}{len(thread.states):>6} | {p['t']:>7.2f}{p['r']:>9.2f}"
                f"{p['f']:>7.2f}{p['p']:>7.2f}{p['l']:>7.2f}{p['o']:>8.2f}{p['q']:>8.2f}"
                f"{p['m']:>8.2f}{p['n']:>8.2f} |"
                f" {p['t'] / p['r']:>6.2f}x{p['t'] / p['f']:>8.2f}x{p['t'] / p['p']:>7.2f}x"
                f"{p['t'] / p['l']:>6.2f}x{p['p'] / p['l']:>6.2f}x{p['o'] / p['l']:>6.2f}x"
                f"{p['q'] / p['l']:>7.2f}x{p['m'] / p['l']:>6.2f}x{p['n'] / p['l']:>7.2f}x"
            )


async def bare_put(saver: Ours) -> float:
    """ms of one PutObject, through ``saver``'s storage, of the bytes of the head it
    has just written (read untimed), under ``put/``: the floor of any one-object save."""
    head = ThreadKeys.of(saver.tid).head
    body = (await saver.storage.read_objects([head]))[head] or b""
    return (await timed(functools.partial(saver.storage.write_objects, {f"put/{head}": body})))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", action="append", help="LoCoMo JSON files (glob)")
    parser.add_argument("--threads", type=int, default=1, help="synthetic threads")
    parser.add_argument("--turns", type=int, default=600, help="turns per synthetic thread")
    parser.add_argument("--depth", type=int, default=5, help="max_chain_depth")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
