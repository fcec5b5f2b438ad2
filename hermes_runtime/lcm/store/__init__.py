"""The LCM database: schema, connections, the write path, and the SQL every read runs.

``lcmstore.LcmStore`` opens a database and writes turns (``basestore`` its
reads, transactions and threads); ``schema`` migrates it; ``messagereads``,
``dag`` and ``sessions`` hold the SQL of reads; ``fulltext`` keeps the
full-text index in a file of its own; ``outputs`` keeps large contents beside
the database.
"""
