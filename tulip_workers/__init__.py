"""The Celery side: the app and thin task bodies that call ``tulip_memory`` services."""
