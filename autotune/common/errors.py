"""The one exception type users see: its message is printed as a single line."""

# The exit status of a command that stopped on a bad input (an AutotuneError's line; an
# invalid file `autotune validate` was given), as argparse's own usage errors exit.
EXIT_USAGE = 2


class AutotuneError(Exception):
    """A bad input or an unusable environment, reported to the user without a traceback."""
