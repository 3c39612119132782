"""Which name prefixes may this project create things under, and clean up?

Every namespace, interface, run file and temporary folder a run makes starts
with one prefix, so `cassini clean` can find what a crashed run left and
leave everything else on the machine alone. A prefix starts with one of
`PROJECT_PREFIXES` and holds only letters and digits.
"""

from __future__ import annotations

import secrets

from topologies.errors import UserInputError

# Prefixes of everything this project creates: "cas" for emulation runs,
# "cst" for tests (a random suffix keeps parallel runs apart).
PROJECT_PREFIXES = ("cas", "cst")
IFNAMSIZ = 15  # the longest interface name Linux takes
# (our choice) A prefix given by hand leaves 6 of the 15 characters for the
# interface's own name (h12, p7, ...).
MAX_PREFIX_LEN = 9


def new_prefix(base: str = "cst") -> str:
    """A short unique prefix, e.g. 'cst3fa1', leaving room in 15-char interface names."""
    return base + secrets.token_hex(2)


def _is_ours(prefix: str) -> bool:
    return prefix.startswith(PROJECT_PREFIXES) and prefix.isalnum()


def check_prefix(prefix: str) -> str:
    """A prefix a new run may use (`--prefix` of `fabric up` and `emulate`).

    >>> check_prefix("cas1")
    'cas1'
    """
    if not _is_ours(prefix) or len(prefix) > MAX_PREFIX_LEN:
        raise UserInputError(
            f"--prefix {prefix!r}: must start with {' or '.join(PROJECT_PREFIXES)} (so "
            "`cassini clean` finds what a crashed run leaves) and be at most "
            f"{MAX_PREFIX_LEN} letters/digits"
        )
    return prefix


def check_clean_prefix(prefix: str) -> str:
    """A prefix `cassini clean` may use: one of the project's, letters and digits only.

    >>> check_clean_prefix("cas3fa1")
    'cas3fa1'
    """
    if not _is_ours(prefix):
        raise UserInputError(
            f"--prefix {prefix!r}: must start with {' or '.join(PROJECT_PREFIXES)} and hold "
            "only letters and digits (this project creates nothing else)"
        )
    return prefix
