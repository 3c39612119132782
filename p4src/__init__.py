"""The data plane: the P4 programs and the P4Info the control plane loads.

`cassini.p4` (v1model, for bmv2) and `cassini_tna.p4` (TNA, for Tofino) share
`include/` and one P4Info, `cassini.p4info.txtpb`, the single source of truth
for every table, action and counter name (`controlplane.p4info` reads it).
They are package data of this small package, so an installed wheel finds them
through `importlib.resources` as a source checkout does; `make p4` compiles
them into `build/p4c-out/`, never here.
"""
