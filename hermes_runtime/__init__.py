"""Run long-lived Hermes agents on Kubernetes.

Capabilities live in one sub-package each (``plugins``, ``backup``, ``lcm``,
``vault``); ``common`` holds the few helpers they share; ``cli`` only parses
arguments and calls the capabilities' public functions.
"""

__version__ = "0.1.0"
