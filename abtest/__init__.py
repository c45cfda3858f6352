"""abtest: A/B test kubelet feature gates and config fields on batch pod start-up."""

__version__ = "0.1.0"
