"""Where Litestream's replicas live on a backup target, behind one interface per kind of target.

Layout: every database ``D/<relpath>`` of agent ``A`` (``backup/agents.py``) replicates to
``<target>/litestream/A/<relpath>`` (a folder of LTX files), beside the restic repository of the
same target and never inside one of restic's own folders (``data``, ``index``, ``keys``,
``locks``, ``snapshots``). Litestream 0.5 does not encrypt replicas: the target's own protection
(bucket encryption, access policies, a private volume) is what guards them; docs/backup.md says
so.

``base.Replicas`` is what replication and restore ask of replicas (their URLs, Litestream's
config stanza, the LTX files there, the first bytes of one); ``files.FileReplicas`` and
``s3.S3Replicas`` answer it, and ``target`` chooses one, once, from the target's URL. Like
Litestream's own ``ReplicaClient``, a new kind of target is one new module, not a branch at
every call site.
"""
