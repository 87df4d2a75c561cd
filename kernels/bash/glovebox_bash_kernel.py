"""Glovebox's bash kernel: one bash per kernel, driven through a pty.

Each cell is sent to the same shell (so variables, functions and the
working directory persist), followed by a line that prints a marker unique
to the cell and the cell's exit status. Output streams to the client as it
comes; a non-zero status is the cell's error. An interrupt (SIGINT to the
kernel) becomes Ctrl-C on the pty, which stops the foreground command.

Only Debian's python3-ipykernel and python3-pexpect are needed.
"""
import os
import re
import secrets
import signal
import subprocess
import sys
import time

import pexpect
from ipykernel.kernelapp import IPKernelApp
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from glovebox_kernelbase import GloveboxKernel  # noqa: E402 (found beside the kernelspecs)

# The echo of a marker asked for again after an interrupt, which may come
# after its cell ended.
STALE_MARKER = re.compile(r"__glovebox_[0-9a-f]{16}_\d+__\d*\n?")

__version__ = "1.0"


def bash_version():
    try:
        out = subprocess.run(["bash", "-c", "echo $BASH_VERSION"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        return out or "5"
    except (OSError, subprocess.SubprocessError):
        return "5"


class BashKernel(GloveboxKernel):
    implementation = "glovebox_bash"
    implementation_version = __version__
    language = "bash"
    language_version = bash_version()
    language_info = {"name": "bash", "version": language_version, "codemirror_mode": "shell",
                     "mimetype": "text/x-sh", "file_extension": ".sh",
                     "pygments_lexer": "bash"}
    banner = "Bash " + language_version + " (Glovebox)"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.cells = 0
        self.child = None
        self.interrupted = False
        self.start_bash()

    def start_bash(self):
        # bash must not inherit the kernel's SIGINT disposition: it gets
        # Ctrl-C through its terminal instead.
        saved = signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            self.child = pexpect.spawn("/bin/bash", ["--noprofile", "--norc"], echo=False,
                                       encoding="utf-8", codec_errors="replace",
                                       env=dict(os.environ), dimensions=(24, 200))
        finally:
            signal.signal(signal.SIGINT, saved)
        # pexpect waits 50 ms before each send by default: not needed with
        # echo off, and it would delay every cell.
        self.child.delaybeforesend = None
        # No prompts, no history expansion, no echo: the output is the
        # commands' own.
        self.child.sendline("stty -echo; PS1=''; PS2=''; PROMPT_COMMAND=''; set +H; "
                            "bind 'set enable-bracketed-paste off' 2>/dev/null")
        self.wait_marker(self.send_marker())

    def send_marker(self):
        self.cells += 1
        marker = "__glovebox_%s_%d__" % (secrets.token_hex(8), self.cells)
        self.child.sendline('echo "%s$?"' % marker)
        return marker

    def drain(self):
        """Reads and drops what an interrupted cell left behind."""
        try:
            while True:
                self.child.read_nonblocking(65536, timeout=0)
        except (pexpect.TIMEOUT, pexpect.EOF):
            pass

    def wait_marker(self, marker, emit=None):
        """Reads until marker and the status after it; emit(text) gets the
        output before it as it comes. Returns the status, or None if bash
        ended."""
        pending = ""
        resend_at = None
        resends = 0
        while True:
            if self.interrupted and resend_at is None:
                resend_at = time.monotonic() + 0.1
            elif resend_at is not None and time.monotonic() >= resend_at:
                # Ctrl-C also flushes the terminal's input, the marker's
                # line with it, once the terminal gets to it (not at once):
                # ask for the marker again. A Ctrl-C that came while bash
                # was still starting the command reached bash, not the
                # command: while the marker does not come, Ctrl-C again.
                if resends:
                    self.child.sendintr()
                    time.sleep(0.05)
                resends += 1
                resend_at = time.monotonic() + 1
                self.child.sendline('echo "%s$?"' % marker)
            try:
                pending += self.child.read_nonblocking(65536, timeout=0.2)
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                if emit and pending:
                    emit(pending)
                return None
            at = pending.find(marker)
            if at >= 0:
                rest = pending[at + len(marker):]
                while "\n" not in rest:
                    try:
                        rest += self.child.read_nonblocking(64, timeout=5)
                    except (pexpect.TIMEOUT, pexpect.EOF):
                        break
                if emit and at > 0:
                    emit(pending[:at])
                m = re.match(r"\s*(\d+)", rest)
                return 130 if self.interrupted else int(m.group(1)) if m else 0
            # Hold back only what could be the start of the marker.
            keep = next((n for n in range(min(len(marker), len(pending)), 0, -1)
                         if marker.startswith(pending[-n:])), 0)
            if emit and len(pending) > keep:
                emit(pending[:len(pending) - keep])
                pending = pending[len(pending) - keep:]

    def on_interrupt(self, signum, frame):
        """SIGINT during a cell: Ctrl-C on bash's terminal, which stops its
        foreground command. No exception: the cell's loop sees the flag
        wherever the signal landed."""
        if not self.interrupted:
            self.interrupted = True
            self.child.sendintr()

    def do_execute(self, code, silent, store_history=True, user_expressions=None,
                   allow_stdin=False):
        def emit(text):
            text = STALE_MARKER.sub("", text.replace("\r\n", "\n"))
            if text and not silent:
                self.send_response(self.iopub_socket, "stream", {"name": "stdout", "text": text})

        if not code.strip():
            return {"status": "ok", "execution_count": self.execution_count, "payload": [],
                    "user_expressions": {}}
        if self.child is None or not self.child.isalive():
            self.start_bash()
        self.drain()
        self.interrupted = False
        saved = signal.signal(signal.SIGINT, self.on_interrupt)
        try:
            self.child.sendline(code)
            status = self.wait_marker(self.send_marker(), emit)
        finally:
            signal.signal(signal.SIGINT, saved)
        if status is None:
            status = "bash exited"
            self.child = None
        if status == 0:
            return {"status": "ok", "execution_count": self.execution_count, "payload": [],
                    "user_expressions": {}}
        error = {"ename": "BashError" if status != 130 else "KeyboardInterrupt",
                 "evalue": "exit status %s" % status if status != 130 else "interrupted",
                 "traceback": []}
        if not silent:
            self.send_response(self.iopub_socket, "error", error)
        return dict(error, status="error", execution_count=self.execution_count)

    def do_shutdown(self, restart):
        if self.child is not None:
            self.child.close(force=True)
        return {"status": "ok", "restart": restart}


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=BashKernel)
