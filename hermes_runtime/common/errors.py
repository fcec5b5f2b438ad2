"""The error type every capability raises for an operational failure.

The CLI turns it into a message on stderr and exit status 1, so a capability
never calls ``sys.exit`` itself and stays usable as a library.
"""


class RuntimeFailure(Exception):
    """An operational failure: bad input file, unreachable server, corrupt data.

    The message must name the field, file or URL at fault, because it is what
    an operator reads at 3 a.m.
    """


def name_list(names: list[str], limit: int = 5) -> str:
    """``a, b, c`` for a message; only when names were left out: ``a, b, ... (12 in all)``."""
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])}, ... ({len(names)} in all)"
