"""The error type every capability raises for an operational failure.

The CLI turns it into a message on stderr and exit status 1, so a capability
never calls ``sys.exit`` itself and stays usable as a library.
"""


class RuntimeFailure(Exception):
    """An operational failure: bad input file, unreachable server, corrupt data.

    The message must name the field, file or URL at fault, because it is what
    an operator reads at 3 a.m.

    ``exit_code`` is the CLI's exit status for it: 1, or a failure kind's own number where a
    caller acts on the kind (a Job's ``podFailurePolicy`` that must not retry a refusal no
    retry can change).
    """

    exit_code: int = 1


def name_list(names: list[str], limit: int = 5) -> str:
    """``a, b, c`` for a message; only when names were left out: ``a, b, ... (12 in all)``."""
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])}, ... ({len(names)} in all)"
