"""What a user writes: the factor catalogs, playbooks and node profiles, their checks, and the
domain types they load into. Nothing here reaches a node, a cluster or a database."""
