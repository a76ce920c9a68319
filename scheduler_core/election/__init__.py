"""Leader election: local (one process) and etcd leases with a fencing epoch."""
