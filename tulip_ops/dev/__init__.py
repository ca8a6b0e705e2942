"""The ``tulip-memory dev`` stack: embedded services and the demo workload."""
