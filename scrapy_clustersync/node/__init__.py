"""The node's runtime: its one Redis thread and what that thread owns (write stream, prefetch,
leases, spool, node record, control following, the start run).
"""
