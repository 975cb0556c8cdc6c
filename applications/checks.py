"""Argument checks shared by the applications' Python functions (data generators, loaders).

Each returns the normalised value or raises ``ValueError`` quoting
``Received: name=value``, the format the library's layers use.
"""

import numbers


def integer_at_least(name, value, minimum):
    """``value`` as an int if it is an integer (Python or numpy, not a bool) >= ``minimum``.

    Raises:
        ValueError: ``"`name` must be an integer >= minimum. Received: name=value"``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}")
    return int(value)
