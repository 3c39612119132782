"""How is a gRPC channel closed so that a stop signal cannot leave it half closed?

gRPC's `Channel.close` marks the channel closed, cancels its calls and then
waits in the calling thread for gRPC's own threads to finish them. A Ctrl-C
(or a SIGTERM the emulation turns into an exception) that lands during that
wait leaves the close from the middle: the channel is marked closed but
never destroyed, and any later close of it waits for the first one to
finish. The garbage collector makes that later close (a call state's
`__del__`) at the latest at interpreter exit, when gRPC's threads no longer
run: `cassini fabric run` printed its 'interrupted' line and then never
exited. `close_channel` runs the close in a thread of its own, which no
signal handler interrupts, and waits for it: the signal still reaches the
caller at once, and the close finishes regardless (the interpreter waits
for that thread before it exits).
"""

from __future__ import annotations

import threading
from typing import Protocol


class Closable(Protocol):
    """A gRPC channel, as far as closing it goes."""

    def close(self) -> None: ...


def close_channel(channel: Closable) -> None:
    """Close `channel`, whole even if a stop signal interrupts the wait for it."""
    closer = threading.Thread(target=channel.close, name="grpc-channel-close")
    try:
        closer.start()
    except RuntimeError:  # no new thread at interpreter shutdown: close here
        channel.close()
        return
    closer.join()
