"""The sweep: which arms to run (design), in which order (schedule), and running them."""
