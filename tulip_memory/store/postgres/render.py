"""The one SQL renderer: statement templates over ``{name}`` placeholders.

Every statement of the project (the memories store's, the reindex's, the ledger's and
dead letters', every migration) is a template whose placeholders name identifiers
fixed by the code or validated before they get here: ``{t}`` the schema-qualified
table, ``{p}`` its bare name (for index, policy and trigger names), ``{v}`` a vector
slot's column, and a few more (``{dim}``, ``{tsconfig}``, ``{i}``, ``{o}``). Values
always travel as bind parameters, never through here.

:func:`render` replaces the placeholders it is given and leaves every other brace as
written: a template may render in two stages (the store fixes ``{t}`` and ``{p}`` once,
a read fixes ``{v}`` per slot), and SQL's own braces (``'{}'::jsonb``, array literals)
need no escaping.
"""

from __future__ import annotations

import re

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def render(template: str, /, **names: object) -> str:
    """``template`` with each ``{name}`` of ``names`` replaced by ``str(value)``."""
    if not names:
        return template
    return _PLACEHOLDER.sub(lambda m: str(names[m[1]]) if m[1] in names else m[0], template)
