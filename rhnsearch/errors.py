"""The one exception type whose message is shown to the user as a one-line error, and the
one line of any other exception that such a message quotes."""


class UserError(Exception):
    """Bad input from the user: the message says what was wrong and how to fix it."""


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of EXC's message, at most LIMIT characters; its type where it has none."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__
