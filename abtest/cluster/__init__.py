"""The cluster layer: the only code that talks to the API server (kubernetes client)."""
