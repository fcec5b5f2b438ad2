"""What an operator does with an LCM database, as library calls the CLI forwards to.

``operations`` (open read-only, import, search, a context within a budget),
``importer`` (history from JSONL files and Hermes' state.db), ``doctor``
(health checks, statistics, repairs).
"""
