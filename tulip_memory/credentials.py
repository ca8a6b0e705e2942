"""Connection strings without their secrets, for every error and log line that names one.

:func:`redact_url` replaces a URL's user info (``user:password@``) with ``***@`` and
the values of query parameters that carry secrets (``password``, ``token``, ``key``,
``secret``, ``signature``, ``credential``, ``auth``) with ``***``; :func:`redact_text`
does the same for every URL inside a longer text (an exception's message). The rest
(scheme, host, port, path) stays, so the message still says which service it means.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

MASK = "***"
_SECRET_PARAM = re.compile(r"pass|secret|token|key|signature|credential|auth", re.IGNORECASE)
#: ``scheme://`` then anything up to whitespace or a quote: a URL inside a text.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def redact_url(url: str) -> str:
    """``url`` with its credentials masked; a string that does not parse as a URL is
    masked whole after its scheme, never echoed. A list of URLs joined by ``;`` (kombu's
    spelling of several sentinels or brokers) has each masked."""
    if ";" in url and url.count("://") > 1:
        return ";".join(redact_url(part) for part in url.split(";"))
    try:
        parts = urlsplit(url)
    except ValueError:
        scheme = url.partition("://")[0] if "://" in url else ""
        return f"{scheme}://{MASK}" if scheme else MASK
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    out = (
        f"{parts.scheme}://{netloc}{parts.path}" if "://" in url else f"{parts.scheme}:{parts.path}"
    )
    if parts.query:
        out += "?" + "&".join(_param(p) for p in parts.query.split("&"))
    if parts.fragment:
        out += f"#{parts.fragment}"
    return out


def _param(pair: str) -> str:
    name, eq, _ = pair.partition("=")
    return f"{name}={MASK}" if eq and _SECRET_PARAM.search(name) else pair


def redact_text(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url`."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
