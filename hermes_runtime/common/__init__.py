"""Small helpers shared by every capability: errors, atomic files, SQLite, logging."""
