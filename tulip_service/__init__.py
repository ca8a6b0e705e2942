"""The HTTP service any chat backend can call: ``/v1`` over the Python producer and
reader, tenant-bound API keys and JWTs, an OpenAPI 3.1 contract (``docs/http.md``).

Importing this package needs only the base install; the service itself
(:func:`tulip_service.app.create_app`, ``tulip-memory serve``) needs the ``server``
extra (FastAPI, uvicorn, PyJWT).
"""
