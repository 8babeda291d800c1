"""The one exception type whose message is shown to the user as a one-line error."""


class UserError(Exception):
    """Bad input from the user: the message says what was wrong and how to fix it."""
