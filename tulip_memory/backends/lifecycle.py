"""Retention of delta checkpoints on S3: the bucket's lifecycle rules, generated.

The seed leaves retention to the bucket ("configure ``days_until_archive`` /
``days_until_delete`` once at the bucket level"). :func:`lifecycle_rules` writes those
rules for one storage prefix, after the layout of :mod:`tulip_memory.delta`:

- ``heads/`` (a thread's head, rewritten by every save) expires after
  ``days_until_delete``: only threads idle that long go. Heads are never archived, so a
  thread idle for a while still loads in one GET;
- ``log/`` (immutable history) moves to ``archive_storage_class`` after
  ``days_until_archive`` and expires after ``days_until_delete``;
- ``names/`` and ``summaries/`` expire after ``days_until_delete``;
- under each of those four, noncurrent versions expire after a day and expired delete
  markers are removed (on a versioned bucket every save would otherwise keep an old
  head). No rule reaches outside them, so a prefix of ``""`` in a shared bucket touches
  nothing of anyone else's.

:func:`install_lifecycle_rules` puts them on the bucket, keeping every rule that is
not one of these (other prefixes, other tools) and replacing its own by ID, so running
it again changes nothing and running it with other days updates them in place.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from tulip_memory.delta.keys import HEADS, LOG, NAMES, SUMMARIES

#: Classes a GET reads at once; the others need a restore before an object is readable.
INSTANT_CLASSES = frozenset({"STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER_IR"})
ARCHIVE_CLASSES = INSTANT_CLASSES | {"GLACIER", "DEEP_ARCHIVE"}
#: S3 refuses a transition to these classes earlier than 30 days.
_MIN_30_DAYS = frozenset({"STANDARD_IA", "ONEZONE_IA"})
_PARTS = ("heads", "log", "names", "summaries")


@dataclass(frozen=True)
class LifecycleResult:
    """The rules of this prefix now on the bucket, and whether this call changed them."""

    rules: tuple[dict[str, Any], ...]
    changed: bool


def rule_ids(prefix: str) -> dict[str, str]:
    """The ID of each rule of ``prefix`` (``tulip:<prefix>:<part>`` and
    ``tulip:<prefix>:<part>:versions``, the prefix hashed when long)."""
    tag = prefix if len(prefix) <= 180 else hashlib.blake2b(prefix.encode()).hexdigest()[:32]
    ids = {part: f"tulip:{tag}:{part}" for part in _PARTS}
    return {**ids, **{f"{part}:versions": f"{ids[part]}:versions" for part in _PARTS}}


def lifecycle_rules(
    prefix: str,
    *,
    days_until_archive: int | None = None,
    days_until_delete: int | None = None,
    archive_storage_class: str = "STANDARD_IA",
) -> list[dict[str, Any]]:
    """The lifecycle rules of one storage ``prefix`` (e.g. ``"prod/"``, or ``""``)."""
    _check(days_until_archive, days_until_delete, archive_storage_class)
    ids = rule_ids(prefix)
    expire = {"Expiration": {"Days": days_until_delete}} if days_until_delete else {}
    rules: list[dict[str, Any]] = []

    def rule(part: str, key_prefix: str, **actions: Any) -> None:
        if actions:
            base = {"ID": ids[part], "Status": "Enabled", "Filter": {"Prefix": key_prefix}}
            rules.append({**base, **actions})

    rule("heads", prefix + HEADS, **expire)
    archive: dict[str, Any] = {}
    if days_until_archive:
        archive["Transitions"] = [
            {"Days": days_until_archive, "StorageClass": archive_storage_class}
        ]
    rule("log", prefix + LOG, **archive, **expire)
    rule("names", prefix + NAMES, **expire)
    rule("summaries", prefix + SUMMARIES, **expire)
    for part, key_prefix in zip(_PARTS, (HEADS, LOG, NAMES, SUMMARIES), strict=True):
        rule(
            f"{part}:versions",
            prefix + key_prefix,
            NoncurrentVersionExpiration={"NoncurrentDays": 1},
            Expiration={"ExpiredObjectDeleteMarker": True},
        )
    return rules


def install_lifecycle_rules(
    client: Any,
    bucket: str,
    prefix: str = "",
    *,
    days_until_archive: int | None = None,
    days_until_delete: int | None = None,
    archive_storage_class: str = "STANDARD_IA",
) -> LifecycleResult:
    """Put the rules of ``prefix`` on ``bucket`` (a boto3 S3 ``client``), idempotently.

    Rules with other IDs are kept as they are. Nothing is written when the bucket
    already holds exactly these rules.
    """
    wanted = lifecycle_rules(
        prefix,
        days_until_archive=days_until_archive,
        days_until_delete=days_until_delete,
        archive_storage_class=archive_storage_class,
    )
    ours = set(rule_ids(prefix).values())
    existing = current_rules(client, bucket)
    mine = {r.get("ID"): r for r in existing if r.get("ID") in ours}
    if len(mine) == len(wanted) and all(_holds(mine.get(r["ID"]), r) for r in wanted):
        return LifecycleResult(rules=tuple(mine[r["ID"]] for r in wanted), changed=False)
    others = [r for r in existing if r.get("ID") not in ours]
    client.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": [*others, *wanted]}
    )
    return LifecycleResult(rules=tuple(wanted), changed=True)


def current_rules(client: Any, bucket: str) -> list[dict[str, Any]]:
    """The bucket's lifecycle rules (none when it has no configuration)."""
    from botocore.exceptions import ClientError

    try:
        answer = client.get_bucket_lifecycle_configuration(Bucket=bucket)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") == "NoSuchLifecycleConfiguration":
            return []
        raise
    return list(answer.get("Rules") or [])


def _holds(found: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
    """Whether ``found`` has every field of ``wanted`` with the same value."""
    return found is not None and all(found.get(k) == v for k, v in wanted.items())


def _check(archive: int | None, delete: int | None, storage_class: str) -> None:
    for name, days in (("days_until_archive", archive), ("days_until_delete", delete)):
        if days is not None and (type(days) is not int or days < 1):
            raise ValueError(f"{name} must be a positive int of days, got {days!r}")
    if archive is None and delete is None:
        raise ValueError("give days_until_archive, days_until_delete or both")
    if storage_class not in ARCHIVE_CLASSES:
        raise ValueError(
            f"archive_storage_class must be one of {sorted(ARCHIVE_CLASSES)}, got {storage_class!r}"
        )
    if archive is not None and delete is not None and archive >= delete:
        raise ValueError(
            f"days_until_archive ({archive}) must be less than days_until_delete ({delete})"
        )
    if archive is not None and storage_class in _MIN_30_DAYS and archive < 30:
        raise ValueError(f"S3 moves objects to {storage_class} after 30 days at the earliest")
