"""`cassini reproduce`: the paper's claims as scenarios, run in the simulator and the emulation."""
