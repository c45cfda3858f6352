"""The embedded lab: a real single-node Kubernetes on this machine."""
