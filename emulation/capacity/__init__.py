"""How large an emulation this machine runs trustworthily: the capacity model.

`model` predicts the CPU a plan costs at scale S and picks the largest S
that fits (`largest_scale`: `--scale auto`, `cassini capacity`); `calibration` measures this
machine's cost once (refused when the machine is busy) and caches it.

- model: the largest S a topology and its jobs run at trustworthily
- calibration: what the emulation costs on this machine, measured and cached
"""
