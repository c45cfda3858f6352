"""The node layer: the only code that speaks SSH."""
