"""What the use cases run: which arms (design), in which order (schedule), the sweep that
runs them on one node or a fleet, its plan, and the regression gate's looks."""
