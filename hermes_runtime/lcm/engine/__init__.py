"""The LCM engine without any host: ingest, sync a host transcript, compact, tools.

``lcmengine.LcmEngine`` is what the Hermes plugin and the CLI drive;
``hostsync`` is what its sync knows of a host's transcript, ``failedturns``
the turns a model never answered, ``tools`` the retrieval tools' schemas.
"""
