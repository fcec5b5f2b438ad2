"""Secrets the chart generates, created once in the cluster and never by a render.

A render that invents a password (Helm's ``randAlphaNum``) is different every time it runs
where ``lookup`` sees nothing: ``helm template`` and Argo CD, which renders that way and
applies the result. Each sync would replace the restic repository's password (every later
backup and restore fails) and the API key (every client locked out). So the chart renders no
generated value; a hook Job runs ``hermes-runtime secrets ensure`` with a ServiceAccount that
may only read and mark those Secrets by name and create Secrets, and it creates each one that
does not exist yet and marks it as its own (its uid in an annotation, ``ownership``). An
existing Secret's value is never changed: a later render or sync finds it and leaves it. One the
Job did not make is refused unless the operator adopts it by name: whoever pre-created it may
know its value.

Public surface: ``GeneratedSecret`` (``parse_generated``), ``ensure_secrets``, ``EnsureResult``
and ``InClusterApi`` (the pod's own ServiceAccount).
"""

from hermes_runtime.clustersecrets.api import InClusterApi
from hermes_runtime.clustersecrets.ensure import (
    EnsureResult,
    GeneratedSecret,
    ensure_secrets,
    parse_generated,
)

__all__ = ["EnsureResult", "GeneratedSecret", "InClusterApi", "ensure_secrets", "parse_generated"]
