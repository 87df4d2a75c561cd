"""Glovebox's Java kernel: OpenJDK's JShell behind ipykernel's kernel base.

No Java kernel is packaged by Debian or npm; Debian's OpenJDK has JShell,
the engine IJava (the kernel E2B's template installs) is built on. The
JVM runs GloveboxJShell.java (from source: no build step), which
evaluates each cell with the JShell API; this side speaks Jupyter and
relays. Cells are stateful (one JShell per kernel), System.out and
System.err stream as they are written, the value of a cell that ends in
an expression is its result, a compile error or an exception is the
cell's error, and an interrupt stops the running cell.

The JVM is sized for a sandbox (1 GiB by default, and a JVM cannot see
that limit from inside one); JDK_JAVA_OPTIONS in the kernel's
environment comes after these options, so an -Xmx there wins.

Only Debian's python3-ipykernel and a JDK (openjdk-17-jdk-headless) are
needed.
"""
import codecs
import os
import shlex
import shutil
import signal
import subprocess
import sys

from ipykernel.kernelapp import IPKernelApp
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from glovebox_kernelbase import GloveboxKernel  # noqa: E402 (found beside the kernelspecs)

__version__ = "1.0"

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "GloveboxJShell.java")

# A heap of a quarter of the default sandbox, the serial collector (one CPU,
# no collector threads), the client compiler only (JShell compiles every
# snippet: a quick start matters more than peak speed), VM messages kept
# off the frames on stdout, and no perf data file in /tmp.
JVM_OPTIONS = ["-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-XX:+DisplayVMOutputToStderr", "-XX:-UsePerfData", "-Xshare:auto",
               "-Dfile.encoding=UTF-8"]

# The most a frame header says before the kernel stops believing it.
MAX_FRAME = 64 << 20
# Each write to System.out is a message, as in IJava, unless one read of
# the pipe brings more writes than this: a flood is then sent a message
# per stream per read, at no more cost than a few messages.
MAX_SEPARATE_WRITES = 32


def java_version():
    """The JDK's version, from its release file (no JVM started for it)."""
    java = os.path.realpath(shutil.which("java") or "/usr/bin/java")
    try:
        with open(os.path.join(os.path.dirname(os.path.dirname(java)), "release")) as f:
            for line in f:
                if line.startswith("JAVA_VERSION="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return "17"


class JavaGone(Exception):
    """The JVM ended (or never started); the message says how."""


class JavaKernel(GloveboxKernel):
    implementation = "glovebox_java"
    implementation_version = __version__
    language = "java"
    language_version = java_version()
    language_info = {"name": "java", "version": language_version, "mimetype": "text/x-java-source",
                     "file_extension": ".jshell", "codemirror_mode": "text/x-java",
                     "pygments_lexer": "java"}
    banner = "Java " + language_version + " (JShell, Glovebox)"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.proc = None
        self.interrupted = False
        # Started now, waited for at the first cell: the JVM starts while
        # the kernel answers its first requests.
        try:
            self.start_java()
        except OSError:
            self.proc = None  # said at the first cell, which starts it again

    # ---- the JVM ---------------------------------------------------------------

    def start_java(self):
        java = shutil.which("java") or "/usr/bin/java"
        env = dict(os.environ)
        # The user's options after ours, so theirs win; taken out of the
        # environment so that the launcher does not add them twice.
        try:
            theirs = shlex.split(env.pop("JDK_JAVA_OPTIONS", ""))
        except ValueError:
            theirs = []
        options = JVM_OPTIONS + ["-Duser.home=" + env.get("HOME", "/home/user")] + theirs
        # A session of its own: an interrupt reaches the JVM as a stop
        # request, never as the SIGINT that would end it.
        self.proc = subprocess.Popen([java] + options + [SOURCE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, start_new_session=True)
        self.pending = bytearray()
        self.ready = False
        self.exiting = False  # the JVM said it ends after its cell
        self.decoders = {}
        # Run requests sent to this JVM: a stop names the cell it is for.
        self.cells = 0

    def read_frame(self):
        """The next (kind, payload) from the JVM; JavaGone at its end."""
        while True:
            nl = self.pending.find(b"\n")
            if nl >= 0:
                header = self.pending[:nl].split(b" ")
                if len(header) != 2 or not header[1].isdigit() or int(header[1]) > MAX_FRAME:
                    raise JavaGone("the JVM spoke out of turn: %r" % self.pending[:80])
                length = int(header[1])
                if len(self.pending) >= nl + 1 + length:
                    payload = bytes(self.pending[nl + 1:nl + 1 + length])
                    del self.pending[:nl + 1 + length]
                    return bytes(header[0]).decode("ascii", "replace"), payload
            try:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            except InterruptedError:
                continue
            if not chunk:
                status = self.proc.wait()
                raise JavaGone("the JVM exited with status %s%s" % (
                    status, " (killed: out of memory?)" if status == -signal.SIGKILL else ""))
            self.pending += chunk

    def frames_ready(self):
        """The frames already read whole, without waiting for more."""
        frames = []
        while True:
            nl = self.pending.find(b"\n")
            if nl < 0:
                return frames
            header = self.pending[:nl].split(b" ")
            if len(header) != 2 or not header[1].isdigit():
                return frames
            if len(self.pending) < nl + 1 + int(header[1]):
                return frames
            frames.append(self.read_frame())

    def wait_ready(self):
        if self.proc is not None and self.exiting:
            self.proc.wait()
        if self.proc is None or self.proc.poll() is not None:
            try:
                self.start_java()
            except OSError as e:
                raise JavaGone("the JVM cannot start: %s" % e) from e
        while not self.ready:
            kind, _ = self.read_frame()
            self.ready = kind == "ready"

    def send(self, kind, text=""):
        data = text.encode("utf-8", "surrogatepass")
        self.proc.stdin.write(b"%s %d\n" % (kind.encode("ascii"), len(data)) + data)
        self.proc.stdin.flush()

    # ---- cells -----------------------------------------------------------------

    def on_interrupt(self, signum, frame):
        """SIGINT during a cell: a stop request to the JVM for this cell,
        which stops its thread; the cell then ends with KeyboardInterrupt.
        Each SIGINT sends one (a repeat is harmless)."""
        self.interrupted = True
        if self.proc is not None and self.proc.poll() is None and self.cells:
            try:
                self.send("stop", str(self.cells))
            except OSError:
                pass

    def stream(self, name, payload, silent):
        decoder = self.decoders.setdefault(
            name, codecs.getincrementaldecoder("utf-8")(errors="replace"))
        text = decoder.decode(payload)
        if text and not silent:
            self.send_response(self.iopub_socket, "stream",
                               {"name": "stdout" if name == "out" else "stderr", "text": text})

    def run_cell(self, code, silent):
        """Runs code in the JVM, relaying as it goes; (result text or None,
        error dict or None)."""
        self.send("run", code)
        self.cells += 1
        result, error = None, {}
        while True:
            frames = [self.read_frame()]
            frames += self.frames_ready()
            writes = sum(1 for kind, _ in frames if kind in ("out", "err"))
            if writes > MAX_SEPARATE_WRITES:
                frames = merge_writes(frames)
            for kind, payload in frames:
                if kind in ("out", "err"):
                    self.stream(kind, payload, silent)
                elif kind == "result":
                    result = payload.decode("utf-8", "replace")
                elif kind in ("ename", "evalue", "traceback"):
                    error[kind] = payload.decode("utf-8", "replace")
                elif kind == "exit":
                    self.exiting = True
                elif kind == "done":
                    return result, error or None

    def do_execute(self, code, silent, store_history=True, user_expressions=None,
                   allow_stdin=False):
        if not code.strip():
            return {"status": "ok", "execution_count": self.execution_count, "payload": [],
                    "user_expressions": {}}
        self.interrupted = False
        saved = signal.signal(signal.SIGINT, self.on_interrupt)
        try:
            self.wait_ready()
            if self.interrupted:
                result, error = None, {"ename": "KeyboardInterrupt", "evalue": "interrupted"}
            else:
                result, error = self.run_cell(code, silent)
        except (JavaGone, OSError) as gone:
            result = None
            error = {"ename": "JavaExited", "evalue": str(gone), "traceback": str(gone)}
            if self.proc is not None:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        finally:
            signal.signal(signal.SIGINT, saved)
        if result is not None and not silent:
            self.send_response(self.iopub_socket, "execute_result",
                               {"execution_count": self.execution_count,
                                "data": {"text/plain": result}, "metadata": {}})
        if not error:
            return {"status": "ok", "execution_count": self.execution_count, "payload": [],
                    "user_expressions": {}}
        content = {"ename": error.get("ename", "Error"), "evalue": error.get("evalue", ""),
                   "traceback": error["traceback"].split("\n") if error.get("traceback") else []}
        if not silent:
            self.send_response(self.iopub_socket, "error", content)
        return dict(content, status="error", execution_count=self.execution_count)

    def do_is_complete(self, code):
        return {"status": "unknown"}

    def do_shutdown(self, restart):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        return {"status": "ok", "restart": restart}


def merge_writes(frames):
    """frames with each run of writes to one stream joined into one."""
    merged = []
    for kind, payload in frames:
        if merged and kind in ("out", "err") and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + payload)
        else:
            merged.append((kind, payload))
    return merged


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=JavaKernel)
