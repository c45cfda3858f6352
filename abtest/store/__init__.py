"""The results database: one SQLite schema, versioned migrations."""
