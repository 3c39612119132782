"""What does each of Mininet's CLI commands do on the fabric, whose switch is a P4 chip?

`CassiniCLI` is Mininet's CLI (`mininet.cli.CLI`) with what assumed Open
vSwitch, or a CLI that owns the process, made to fit:

- Ctrl-C interrupts the command at hand, as in Mininet: a host command gets
  it (`s01 sleep 30`), a built-in one stops. A run that turns SIGINT into
  teardown (`emulation.housekeeping.signals.signals_raise`) gives it back to the CLI
  while the prompt is up (`sigint_interrupts`). At the prompt, Ctrl-C twice
  in a row ends the session (`SignalExit`, so the caller tears down as for
  any stop signal); `exit`, `quit` and EOF end it as in Mininet.
- `dpctl dump-flows [TABLE]` lists the P4 tables' entries (the switch's
  `dpctl`, `emulation.fabric.mininet_switches.ChipSwitch.dpctl`); other `dpctl`
  commands say in one line that they do not apply.
- `switch chip stop|start` says in one line that it does not apply: a
  stopped chip would come back with no entries.
- `iperf` and `iperfudp` are the network's (`emulation.fabric.mininet_net.CassiniNet`),
  bounded in time; `link HOST chip up` restores the host's static ARP.
- The logical switches are nodes (`emulation.fabric.mininet_logical`): `nodes`,
  `dump` and `intfs` show them with their chip ports, `py net["tor1"]` names
  its ports and links, and `link tor1 agg2 down|up` fails or restores their
  loopback cable on the chip; they run no commands (`tor1 ip link` says so).
- A command that fails says why in one line and the session goes on, where
  Mininet's CLI ended with a traceback.

The rest are Mininet's, unchanged, and work here: help, nodes, ports, net,
sh, py, px, pingall, pingpair, pingallfull, pingpairfull, intfs, dump, link,
links, noecho, source, time, exit, quit, EOF; xterm, x and gterm need an X
display (without one they say so in one line).
"""

from __future__ import annotations

import signal
from typing import Any

from mininet.cli import CLI
from mininet.log import error, output
from mininet.util import quietRun

from emulation.housekeeping.signals import SignalExit, sigint_interrupts

# What Ctrl-C at the prompt says the first time.
AGAIN = "Interrupt (Ctrl-C again at the prompt, or exit, ends the session)"


class CassiniCLI(CLI):
    """Mininet's CLI on the fabric: `CassiniCLI(net)` runs until exit (see the module)."""

    def __init__(self, mininet: Any, *args: Any, **kwargs: Any) -> None:
        self.prompt_interrupts = 0  # Ctrl-C at the prompt since the last command
        super().__init__(mininet, *args, **kwargs)

    def run(self) -> None:
        """The command loop; SIGINT is Python's KeyboardInterrupt meanwhile."""
        with sigint_interrupts():
            while True:
                try:
                    self._settle_nodes()
                    if self.isatty():
                        quietRun("stty echo sane intr ^C")
                    self.cmdloop()
                    return
                except KeyboardInterrupt:
                    self.prompt_interrupts += 1
                    if self.prompt_interrupts >= 2:
                        output("\n")
                        raise SignalExit(signal.SIGINT) from None
                    output(f"\n{AGAIN}\n")

    def _settle_nodes(self) -> None:
        """Interrupt any node still running a command (as Mininet's `run` does)."""
        for node in self.mn.values():
            while node.waiting:
                node.sendInt()
                node.waitOutput()

    def onecmd(self, line: str) -> Any:
        """One command: Ctrl-C stops it and the session goes on; an error is one line."""
        self.prompt_interrupts = 0
        try:
            return super().onecmd(line)
        except KeyboardInterrupt:
            self._settle_nodes()
            output("\nInterrupt\n")
        except Exception as err:  # noqa: BLE001 (a CLI command must not end the session)
            self._settle_nodes()
            first = (line.split() or ["?"])[0]
            error(f"*** {first}: {type(err).__name__}: {err}\n".replace("\n", " ").strip() + "\n")
        return None

    def do_switch(self, line: str) -> None:
        """Mininet's `switch NAME start|stop`: does not apply to the chip."""
        error(
            "*** switch: does not apply to the P4 chip: stopped, it would come back with no "
            "table entries (exit and bring the fabric up again)\n"
        )
