"""The emulated fabric: a topology brought up as Mininet hosts around one chip.

Its door is `emulated.EmulatedFabric` (`cassini fabric up`, `fabric run`,
`emulate` and `profile` all come in through it), configured by one
`options.FabricOptions` value. One question per module:

- emulated: how a topology becomes a running, programmed fabric (`EmulatedFabric`)
- options: what a fabric can be asked to be (`FabricOptions`: target, scale, captures)
- mininet_net: the Mininet network whose one switch is the chip (Topo and hosts)
- mininet_switches: the chip as a Mininet switch (software switch, in-process); bmv2_switch: bmv2
- mininet_logical: the logical switches and links the chip holds, as Mininet shows them
- mininet_cli, mininet_iperf, table_dump: Mininet's CLI verbs on the fabric
- mn_custom: Mininet's own `mn --custom` entry
- netns: namespaces, veths and processes, removed on exit (`NetnsLab`)
- reachability: which server pairs a check pings, and what it found
- capture: per-port captures; folders: where captures and the switch log appear
- switch_log: what the switch's process said, and why it ended
- scaling: a topology's rates and thresholds scaled by S for one run
- target_limits: what each target holds, and whether a topology fits it
"""
