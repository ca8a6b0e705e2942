"""What producer and workers share: the wire (events, routing, topology, pending state,
claim checks, Celery settings, environment parsing). Imports only ``tulip_memory``."""
