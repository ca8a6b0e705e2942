"""This deployment's Celery settings, where Celery looks for them: the directory a
deployment runs from (``celery -A tulip_workers.app --config celeryconfig ...``,
``tulip-memory worker ROLE --config celeryconfig``; the Procfile and docker-compose.yml
start every worker and Flower this way).

Every setting is ``tulip_wire.celeryconfig``'s, read from the ``TULIP_*`` environment.
A deployment that needs a Celery setting of its own sets it below the import (a
setting the producers must agree on, such as the queues, belongs in the environment
instead). Not an installed module: an application's own ``celeryconfig`` is never
shadowed by this package.
"""

from tulip_wire.celeryconfig import *  # noqa: F403
