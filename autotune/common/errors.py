"""The one exception type users see: its message is printed as a single line."""


class AutotuneError(Exception):
    """A bad input or an unusable environment, reported to the user without a traceback."""
