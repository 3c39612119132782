"""What a run leaves on the machine, who owns it, and how it goes away.

Every namespace, interface, process and folder a run creates is recorded
first (`run_files.RunFile`) under a name prefix (`prefixes`), so `cassini
clean` (`clean`) removes exactly what the project made, also after a killed
run; `signals` turns Ctrl-C, SIGTERM and SIGHUP into that cleanup, and
`cpu_split` says which core the switch's packet loop runs on.

- run_files: who owns what this project created, and is the owner alive
- prefixes: which name prefixes the project may create things under
- clean: what runs left, and removing it
- signals: stop signals into cleanup; what ended a child process
- cpu_split: the packet loop's core, and where the hosts' receive work goes
"""
