"""The error type every capability raises for an operational failure.

The CLI turns it into a message on stderr and exit status 1, so a capability
never calls ``sys.exit`` itself and stays usable as a library.
"""


class RuntimeFailure(Exception):
    """An operational failure: bad input file, unreachable server, corrupt data.

    The message must name the field, file or URL at fault, because it is what
    an operator reads at 3 a.m.
    """
