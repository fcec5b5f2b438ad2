"""Lossless Context Management: keep every message, fold old turns into expandable summaries.

One subpackage a capability, each imported from the module that defines a name
(the packages themselves re-export nothing, so importing one part never loads
another):

- ``store``: the database (schema, connections, the write path ``LcmStore``,
  the SQL of reads, the full-text index, outputs kept beside it);
- ``search``: history read back by the model and the operator: grep, hybrid
  search, describe, expand;
- ``embed``: vectors for messages and summaries, computed off the turn's path;
- ``compact``: folding old context into summaries and assembling what the
  model reads;
- ``engine``: ``LcmEngine``, the host-agnostic engine, and what its sync
  knows of a host's transcript;
- ``host``: the Hermes integration (the ``ContextEngine`` plugin, imported
  only by Hermes, since it needs Hermes' ``agent`` package);
- ``ops``: what an operator does with a database (the CLI forwards to it).

Beside them: ``config`` (settings), ``records`` (what every part passes
around) and ``metrics`` (the Prometheus figures).
"""
