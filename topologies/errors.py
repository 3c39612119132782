"""User-facing errors, shared by every layer (this is the lowest one).

The CLI prints a `UserInputError` as one clear line and exits 2; anything else
is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserInputError(ValueError):
    """Bad input from a user: a file, a field, a name. The message names the culprit."""


def did_you_mean(name: str, known: Iterable[str], what: str = "name") -> str:
    """Message for an unknown name that offers the closest known ones.

    >>> did_you_mean("resnet", ["resnet50", "bert"], "model")
    "no model named 'resnet'. Did you mean 'resnet50'? (known: bert, resnet50)"
    """
    known_sorted = sorted(set(known))
    close = difflib.get_close_matches(name, known_sorted, n=1, cutoff=0.5)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    listing = ", ".join(known_sorted[:20]) + (", ..." if len(known_sorted) > 20 else "")
    return f"no {what} named '{name}'.{hint} (known: {listing})"
