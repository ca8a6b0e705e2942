"""Pure ranking helpers shared by the stores: cosine scores, filters, tenancy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tulip_memory.embeddings.base import Vectors


def cosine_distances(matrix: npt.NDArray[np.float32], query: npt.NDArray[np.float32]) -> Any:
    """Cosine distance (1 - cosine similarity) of each row of ``matrix`` to ``query``."""
    norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(query))
    with np.errstate(divide="ignore", invalid="ignore"):
        sims = (matrix @ query) / norms
    return 1.0 - np.nan_to_num(sims, nan=0.0)


def vector_or_none(vec: Vectors) -> Vectors | None:
    """A vector, or ``None`` for the all-zero encoding of a text without tokens (its
    cosine is undefined, so it is stored as no vector)."""
    return vec if bool(np.any(vec)) else None


def score_of(distance: float) -> float:
    """Similarity score in [0, 1] from a cosine distance: ``1 - distance``, clipped."""
    return min(1.0, max(0.0, 1.0 - distance))


def json_contains(container: Any, contained: Any) -> bool:
    """Postgres ``jsonb @>`` semantics, so every backend filters metadata alike."""
    if isinstance(contained, dict):
        return isinstance(container, dict) and all(
            k in container and json_contains(container[k], v) for k, v in contained.items()
        )
    if isinstance(contained, list):
        if not isinstance(container, list):
            return False
        return all(any(json_contains(c, v) for c in container) for v in contained)
    # Scalars: equal values of the same JSON kind (true is not 1).
    return bool(container == contained) and isinstance(container, bool) == isinstance(
        contained, bool
    )


def tenant_of(namespaces: Sequence[tuple[str, ...]], call: str) -> str:
    """The one tenant (``namespace[0]``) shared by ``namespaces``, or ``ValueError``."""
    tenants = {ns[0] for ns in namespaces}
    if len(tenants) > 1:
        raise ValueError(
            f"{call} spans tenants {sorted(tenants)}: every namespace of one "
            "call must share namespace[0], the tenant"
        )
    return tenants.pop()
