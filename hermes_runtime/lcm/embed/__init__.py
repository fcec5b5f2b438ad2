"""Embeddings for messages and summaries, computed off the turn's critical path.

Ingest only appends to ``embed_queue``; ``embedbatch.embed_batch`` drains it
a batch at a time, ``embedworker.EmbeddingWorker`` runs that on a background
thread, and ``embedjob`` drains it with every core (``lcm embed``). Vectors
carry their model name and dimension and every query filters on the model,
so changing the model never mixes vector spaces. ``embedders`` holds the
``Embedder`` protocol and the models, ``e5*`` the offline e5 model
(``common/modelcache.py`` where its built graph is kept), ``vectorindex`` the vectors in memory
for search.
"""
