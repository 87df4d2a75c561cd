"""What Glovebox's own Python-hosted kernels (bash, Java) share: their
base class, ipykernel's Kernel with one rule made exact.

The rule: after a cell fails with stop_on_error, the execute requests that
had reached the kernel by then are aborted, and no later one. ipykernel
6.17 (Debian 12's) ends the abort from a timer, even at its default
stop_on_error_timeout of 0, so a request sent after the failed cell's
reply and idle status could still reach the queue before the abort's end
and be aborted: a client that waits for each cell, as nbclient does, got
"aborted" for its next cell when the kernel was slow to get back to its
loop (seen in CI, under load, after an interrupted cell). Later ipykernel
queues the end at once when the timeout is 0, as here; a timeout above 0
keeps ipykernel's own window.

The kernels import this from their kernelspec's parent directory, where
it is installed beside them."""
from ipykernel.kernelbase import Kernel


class GloveboxKernel(Kernel):
    def _abort_queues(self):
        if self.stop_on_error_timeout:
            return super()._abort_queues()
        self._aborting = True
        # Whatever has reached the socket joins the queue now, to be aborted;
        # the abort's end is queued behind it, before anything sent later.
        self.shell_stream.flush()

        async def stop_aborting():
            self._aborting = False

        self.schedule_dispatch(stop_aborting)
