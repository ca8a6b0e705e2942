"""Which embedders a process may build from a model string it read from a table.

A table's slot registry (``<table>_slots``) names the model and API base of each
vector slot, and every process that writes or recalls builds that slot's embedder.
Built blindly, one changed registry row would send every query text, and the
provider's API key, to whatever ``api_base`` it names. So an embedder is built from
the registry only for a (model, API base) pair the process is configured for itself:
its own embedder (``TULIP_EMBED_MODEL`` at ``TULIP_EMBED_API_BASE``), or a pair that
``TULIP_EMBED_ALLOWED`` lists. ``hashing`` models are computed in-process, reach
nothing and are always allowed.

``TULIP_EMBED_ALLOWED`` is a comma-separated list of ``model`` (at the provider's
default API base) or ``model=api_base`` entries, e.g.
``openai/text-embedding-3-large, openai/bge-m3=http://embed.internal:8080/v1``.
API bases compare without a trailing ``/``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from tulip_memory.env import EMBED_ALLOWED
from tulip_memory.errors import EmbeddingError

ENV_ALLOWED = EMBED_ALLOWED.name


class EmbedderNotAllowed(EmbeddingError):
    """A slot names an embedder this process is not configured to build."""

    def __init__(self, slot: str, spec: str, api_base: str | None) -> None:
        self.slot = slot
        where = f" at {shown_url(api_base)}" if api_base else ""
        entry = f"{spec}={api_base}" if api_base else spec
        super().__init__(
            f"vector slot {slot!r} names the embedder {spec!r}{where}, which this "
            f"process is not configured to use: refused. If that model is yours, allow it "
            f"with {ENV_ALLOWED}={entry!r} (processes that write or recall need it)"
        )


def shown_url(url: str) -> str:
    """``url`` without its user name and password."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return parts._replace(netloc=parts.hostname or "").geturl()


def _pair(spec: str, api_base: str | None) -> tuple[str, str]:
    return spec.strip(), (api_base or "").strip().rstrip("/")


@dataclass(frozen=True)
class EmbedderAllowlist:
    """(model string, API base) pairs a process may build embedders for."""

    pairs: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def parse(cls, entries: str | Iterable[str]) -> EmbedderAllowlist:
        """``model`` or ``model=api_base`` entries, as a list or comma-separated."""
        items = entries.split(",") if isinstance(entries, str) else list(entries)
        pairs = set()
        for item in items:
            spec, _, api_base = item.partition("=")
            if not spec.strip():
                if item.strip():
                    raise ValueError(f"{ENV_ALLOWED}: entry {item.strip()!r} has no model")
                continue
            if any(c.isspace() for c in spec.strip()):
                raise ValueError(f"{ENV_ALLOWED}: model {spec.strip()!r} contains whitespace")
            pairs.add(_pair(spec, api_base))
        return cls(frozenset(pairs))

    def including(self, spec: str, api_base: str | None) -> EmbedderAllowlist:
        return EmbedderAllowlist(self.pairs | {_pair(spec, api_base)})

    def allows(self, spec: str, api_base: str | None) -> bool:
        if spec.strip().partition(":")[0] == "hashing" and not api_base:
            return True
        return _pair(spec, api_base) in self.pairs

    def check(self, slot: str, spec: str, api_base: str | None) -> None:
        """Raise :class:`EmbedderNotAllowed`, naming ``slot``, unless allowed."""
        if not self.allows(spec, api_base):
            raise EmbedderNotAllowed(slot, spec, api_base)
