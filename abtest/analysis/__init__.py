"""What a report says, computed: a stored run's frames in, typed models out (every comparison,
attribution, fleet and reference view, the descriptive tables' numbers). It never reads a
database (the store gives it frames) and never formats a cell (``abtest.report`` renders)."""
