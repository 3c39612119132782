"""Which compiled DCQCN and go-back-N logic is there, and how is it handed its settings?

`_roce.c` holds the rules of `dcqcn.py` and `psn.py` in C for the data path;
it is built with the switch's and the relay's extensions (pyproject.toml,
scripts/setup.sh). `compiled` is None where it was not built.
"""

from __future__ import annotations

from types import ModuleType

from .dcqcn import DcqcnSettings

compiled: ModuleType | None
try:
    from . import _roce as compiled
except ImportError:  # not built: scripts/setup.sh builds it
    compiled = None


def settings_tuple(s: DcqcnSettings) -> tuple[float | int | bool, ...]:
    """The reaction point's settings in the order `_roce.c` reads them.

    >>> len(settings_tuple(DcqcnSettings(line_rate_bps=1e9)))
    16
    """
    return (
        s.line_rate_bps,
        s.min_rate_bps,
        s.g,
        s.alpha_period_s,
        s.initial_alpha,
        s.rate_decrease_share,
        s.min_dec_fac,
        s.rate_reduce_monitor_period_s,
        s.rate_on_first_cnp_bps,
        s.clamp_tgt_rate,
        s.clamp_tgt_rate_after_time_inc,
        s.time_reset_s,
        float(s.byte_reset),
        s.threshold,
        s.ai_rate_bps,
        s.hai_rate_bps,
    )
