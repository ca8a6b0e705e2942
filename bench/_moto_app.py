"""moto's S3 (and every other service) as a WSGI app, for a server that keeps
connections alive (:func:`bench.checkpoints.moto_server`)."""

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

app = DomainDispatcherApplication(create_backend_app)
