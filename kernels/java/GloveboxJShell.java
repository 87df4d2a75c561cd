/*
 * The Java side of Glovebox's Java kernel (glovebox_java_kernel.py is the
 * Jupyter side): OpenJDK's JShell, in this JVM, evaluating each cell.
 *
 * Requests come on stdin, answers go to stdout, both as frames: a line
 * "KIND LENGTH\n" and LENGTH bytes of UTF-8.
 *   in:  run   the cell's code
 *        stop  interrupt cell N (N, counted from 1, in the payload; read by
 *              a thread of its own, so it arrives while a cell runs)
 *   out: ready        JShell is up (its compiler warmed by the imports)
 *        out, err     one write of the cell to System.out / System.err
 *        result       the cell's value, String.valueOf of it
 *        ename, evalue, traceback   the cell's error
 *        exit         this JVM ends after the cell (its heap is full)
 *        done         the cell is over
 *
 * What IJava (the kernel E2B's template installs) does, this does too: a
 * cell is split into snippets, each evaluated in turn until one fails; the
 * value of a last snippet that is an expression is the result (none when
 * it is null); each write to System.out is sent as it is made.
 *
 * Snippets run in this JVM (no second JVM: a sandbox has 1 GiB by
 * default), each in a thread of its own that an interrupt stops.
 */

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;

import jdk.jshell.Diag;
import jdk.jshell.EvalException;
import jdk.jshell.JShell;
import jdk.jshell.JShellException;
import jdk.jshell.Snippet;
import jdk.jshell.SnippetEvent;
import jdk.jshell.SourceCodeAnalysis;
import jdk.jshell.UnresolvedReferenceException;
import jdk.jshell.execution.DirectExecutionControl;
import jdk.jshell.spi.ExecutionControl;
import jdk.jshell.spi.ExecutionControlProvider;
import jdk.jshell.spi.ExecutionEnv;

public final class GloveboxJShell {
    /* A request past this is refused, not read: the gateway bounds a cell
     * well under it. */
    private static final int MAX_REQUEST = 64 << 20;
    /* A result's text past this many characters is cut: at most 3 bytes
     * each in UTF-8, under the kernel's 64 MiB frame. */
    private static final int MAX_RESULT_CHARS = 16 << 20;

    /* What jshell itself imports at start, so a cell can say List or Files
     * as it would there. Evaluating them also warms the compiler before the
     * first cell. */
    private static final String[] IMPORTS = {
        "import java.io.*;", "import java.math.*;", "import java.net.*;",
        "import java.nio.file.*;", "import java.util.*;", "import java.util.concurrent.*;",
        "import java.util.function.*;", "import java.util.regex.*;", "import java.util.stream.*;",
    };

    private static final Object WIRE_LOCK = new Object();
    /* The number of the cell running (or last run), counted from 1 as the
     * kernel counts the run requests it sends. */
    private static volatile long current;
    /* The last cell a stop request named. */
    private static volatile long stopFor;
    private static OutputStream wire;

    private GloveboxJShell() {
    }

    static void frame(String kind, byte[] data, int off, int len) {
        synchronized (WIRE_LOCK) {
            try {
                wire.write((kind + " " + len + "\n").getBytes(StandardCharsets.US_ASCII));
                wire.write(data, off, len);
                wire.flush();
            } catch (IOException e) {
                // The kernel is gone: nothing is left to run for.
                Runtime.getRuntime().halt(0);
            }
        }
    }

    static void frame(String kind, String text) {
        byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        frame(kind, bytes, 0, bytes.length);
    }

    /** System.out or System.err of the cells: every write is a frame. */
    static final class FrameStream extends OutputStream {
        private final String kind;

        FrameStream(String kind) {
            this.kind = kind;
        }

        @Override
        public void write(int b) {
            write(new byte[] {(byte) b}, 0, 1);
        }

        @Override
        public void write(byte[] b, int off, int len) {
            if (len > 0)
                frame(kind, b, off, len);
        }
    }

    /**
     * System.out of the cells. A subclass: JDK 17's PrintStream writes a
     * println's text and line end at once, its subclasses (and JDK 11's,
     * which IJava runs on in E2B's template) as two writes, so a println
     * reaches the client as two stream messages, the text and then "\n",
     * as E2B's own tests expect.
     */
    static final class CellStream extends PrintStream {
        CellStream(OutputStream out) {
            super(out, true, StandardCharsets.UTF_8);
        }
    }

    /**
     * Runs snippets in this JVM, as JShell's local engine does, but keeps
     * each one's value as an object (the local engine keeps only its text,
     * which quotes strings) and stops a snippet by its own thread.
     */
    static final class Control extends DirectExecutionControl {
        /* The running snippet's thread, and whether the cell was stopped:
         * an interrupt may come while a snippet compiles, between two
         * snippets or as one starts, and still stops the cell. */
        private Thread runner;
        private boolean stopped;
        private Object value;
        private boolean hasValue;
        /* The last snippet was stopped (JShell's own events do not say). */
        private boolean snippetStopped;

        synchronized void newCell() {
            stopped = false;
        }

        synchronized boolean wasStopped() {
            return stopped;
        }

        void forgetValue() {
            value = null;
            hasValue = false;
            snippetStopped = false;
        }

        @Override
        @SuppressWarnings("removal")
        protected String invoke(Method doit) throws Exception {
            Object[] result = new Object[1];
            Throwable[] thrown = new Throwable[1];
            Thread thread = new Thread(() -> {
                try {
                    result[0] = doit.invoke(null);
                } catch (Throwable t) {
                    thrown[0] = t;
                }
            }, "cell");
            synchronized (this) {
                if (stopped) {
                    snippetStopped = true;
                    throw new ExecutionControl.StoppedException();
                }
                runner = thread;
                thread.start();
            }
            while (thread.isAlive()) {
                try {
                    thread.join();
                } catch (InterruptedException e) {
                    // Only the cell's own thread is interrupted.
                }
            }
            synchronized (this) {
                runner = null;
            }
            Throwable t = thrown[0];
            Throwable cause = t instanceof InvocationTargetException ? t.getCause() : t;
            if (wasStopped() || cause instanceof ThreadDeath) {
                snippetStopped = true;
                throw new ExecutionControl.StoppedException();
            }
            if (t instanceof Exception)
                throw (Exception) t;
            if (t != null)
                throw new InvocationTargetException(t);
            value = result[0];
            hasValue = true;
            return valueString(result[0]);
        }

        @Override
        @SuppressWarnings({"removal", "deprecation"})
        public void stop() {
            Thread thread;
            synchronized (this) {
                stopped = true;
                thread = runner;
            }
            if (thread == null)
                return;
            thread.interrupt();
            try {
                // Stops a loop that never looks at its interrupt (JDK 17;
                // later JDKs refuse, and only the interrupt is left).
                thread.stop();
            } catch (UnsupportedOperationException e) {
                // Interrupted only.
            }
        }
    }

    static final class Provider implements ExecutionControlProvider {
        private final Control control;

        Provider(Control control) {
            this.control = control;
        }

        @Override
        public String name() {
            return "glovebox";
        }

        @Override
        public ExecutionControl generate(ExecutionEnv env, Map<String, String> parameters) {
            return control;
        }
    }

    /* ---- one cell ---------------------------------------------------------- */

    private static boolean hasValue(Snippet.SubKind kind) {
        return kind == Snippet.SubKind.VAR_VALUE_SUBKIND
            || kind == Snippet.SubKind.OTHER_EXPRESSION_SUBKIND
            || kind == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND;
    }

    private static void error(String name, String value, List<String> traceback) {
        frame("ename", name);
        frame("evalue", value == null ? "" : value);
        frame("traceback", String.join("\n", traceback));
    }

    private static boolean internalFrame(StackTraceElement e) {
        String c = e.getClassName();
        return c.startsWith("jdk.internal.reflect.") || c.startsWith("java.lang.reflect.")
            || c.startsWith("jdk.jshell.") || c.startsWith("GloveboxJShell")
            || c.equals("java.lang.Thread");
    }

    private static void exceptionError(JShellException e) {
        List<String> lines = new ArrayList<>();
        String name = e instanceof EvalException
            ? ((EvalException) e).getExceptionClassName()
            : e instanceof UnresolvedReferenceException ? "UnresolvedReferenceException"
                                                        : e.getClass().getName();
        Throwable t = e;
        String prefix = "";
        while (t != null) {
            String n = t instanceof EvalException ? ((EvalException) t).getExceptionClassName()
                                                  : t.getClass().getName();
            lines.add(prefix + n + (t.getMessage() != null ? ": " + t.getMessage() : ""));
            for (StackTraceElement frame : t.getStackTrace()) {
                if (!internalFrame(frame))
                    lines.add("\tat " + frame);
            }
            prefix = "Caused by: ";
            t = t.getCause();
        }
        error(name, e.getMessage(), lines);
    }

    private static void compileError(JShell shell, Snippet snippet) {
        List<String> lines = new ArrayList<>();
        List<String> messages = new ArrayList<>();
        String source = snippet.source();
        shell.diagnostics(snippet).forEach(d -> {
            String message = d.getMessage(Locale.ROOT);
            messages.add(message);
            lines.add((d.isError() ? "error: " : "warning: ") + message);
            int at = (int) Math.max(0, Math.min(d.getStartPosition(), source.length()));
            int start = source.lastIndexOf('\n', at - 1) + 1;
            int end = source.indexOf('\n', at);
            lines.add(source.substring(start, end < 0 ? source.length() : end));
            lines.add(" ".repeat(at - start) + "^");
        });
        if (snippet instanceof jdk.jshell.DeclarationSnippet) {
            shell.unresolvedDependencies((jdk.jshell.DeclarationSnippet) snippet).forEach(name -> {
                messages.add("cannot find symbol: " + name);
                lines.add("error: cannot find symbol: " + name);
            });
        }
        error("CompilationException", messages.isEmpty() ? "the snippet was not defined"
                                                         : String.join("\n", messages), lines);
    }

    /* Whether what the cells keep fills the heap, once collected: then
     * JShell itself has no room left to compile the next snippet. */
    private static boolean heapFull() {
        Runtime runtime = Runtime.getRuntime();
        System.gc();
        long used = runtime.totalMemory() - runtime.freeMemory();
        return used > runtime.maxMemory() / 10 * 9;
    }

    private static boolean outOfMemory(JShellException e) {
        return e instanceof EvalException
            && ((EvalException) e).getExceptionClassName().equals("java.lang.OutOfMemoryError");
    }

    /* The error of a JVM out of memory for good, said before it ends. */
    private static void exhausted(String message) {
        error("java.lang.OutOfMemoryError",
              message + ": the JVM's heap is full and it starts again at the next cell, its "
                  + "state lost (an -Xmx in JDK_JAVA_OPTIONS gives it more)",
              List.of("java.lang.OutOfMemoryError: " + message));
        frame("exit", "");
    }

    /* Evaluates code snippet by snippet until one fails; says the cell's
     * result or error, then done. false when the JVM must end. */
    static boolean run(JShell shell, Control control, String code) {
        SourceCodeAnalysis analysis = shell.sourceCodeAnalysis();
        String rest = code;
        Object result = null;
        boolean failed = false, alive = true;
        try {
            while (!failed) {
                SourceCodeAnalysis.CompletionInfo info = analysis.analyzeCompletion(rest);
                SourceCodeAnalysis.Completeness completeness = info.completeness();
                if (completeness == SourceCodeAnalysis.Completeness.EMPTY)
                    break;
                if (!completeness.isComplete()) {
                    error("IncompleteSourceException", "incomplete code: " + rest.trim(),
                          List.of("the cell ends in the middle of a statement:", rest.trim()));
                    failed = true;
                    break;
                }
                rest = info.remaining();
                result = null;
                control.forgetValue();
                List<SnippetEvent> events = shell.eval(info.source());
                if (control.snippetStopped || control.wasStopped()) {
                    error("KeyboardInterrupt", "interrupted", List.of());
                    failed = true;
                    break;
                }
                for (SnippetEvent event : events) {
                    if (event.causeSnippet() != null)
                        continue;
                    if (event.exception() != null && outOfMemory(event.exception()) && heapFull()) {
                        exhausted(event.exception().getMessage());
                        alive = false;
                    } else if (event.exception() != null) {
                        exceptionError(event.exception());
                    } else if (!event.status().isDefined()) {
                        compileError(shell, event.snippet());
                    } else {
                        if (hasValue(event.snippet().subKind()) && control.hasValue)
                            result = control.value;
                        continue;
                    }
                    failed = true;
                    break;
                }
            }
            if (!failed && result != null) {
                String text = String.valueOf(result);
                // A frame the kernel takes whole; a value past it is cut.
                if (text.length() > MAX_RESULT_CHARS)
                    text = text.substring(0, MAX_RESULT_CHARS) + "... (cut at "
                        + MAX_RESULT_CHARS + " characters)";
                frame("result", text);
            }
        } catch (RuntimeException | StackOverflowError e) {
            // JShell's own failure, or a toString() that threw.
            error(e.getClass().getName(), e.getMessage(), List.of(e.toString()));
        } catch (OutOfMemoryError e) {
            // JShell itself found no room: nothing more can run here.
            exhausted(e.getMessage());
            alive = false;
        } finally {
            frame("done", "");
        }
        return alive;
    }

    /* ---- requests ------------------------------------------------------------ */

    private static String readLine(DataInputStream in) throws IOException {
        StringBuilder line = new StringBuilder();
        int c;
        while ((c = in.read()) != '\n') {
            if (c < 0)
                throw new EOFException();
            if (line.length() > 64)
                throw new IOException("bad frame header");
            line.append((char) c);
        }
        return line.toString();
    }

    public static void main(String[] args) throws Exception {
        InputStream requests = new FileInputStream(FileDescriptor.in);
        wire = new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16);
        PrintStream log = new PrintStream(new FileOutputStream(FileDescriptor.err), true,
                                          StandardCharsets.UTF_8);
        System.setOut(new CellStream(new FrameStream("out")));
        System.setErr(new CellStream(new FrameStream("err")));
        // A cell that reads stdin gets end of file at once: stdin is ours.
        System.setIn(new ByteArrayInputStream(new byte[0]));

        Control control = new Control();
        JShell shell = JShell.builder()
            .executionEngine(new Provider(control), Map.of())
            .out(log)
            .err(log)
            .build();
        for (String line : IMPORTS)
            shell.eval(line);

        BlockingQueue<String> cells = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            DataInputStream in = new DataInputStream(new BufferedInputStream(requests));
            try {
                while (true) {
                    String[] header = readLine(in).split(" ");
                    int length = header.length == 2 ? Integer.parseInt(header[1]) : -1;
                    if (length < 0 || length > MAX_REQUEST)
                        throw new IOException("bad frame header");
                    byte[] body = new byte[length];
                    in.readFully(body);
                    String text = new String(body, StandardCharsets.UTF_8);
                    if (header[0].equals("run")) {
                        cells.put(text);
                    } else if (header[0].equals("stop")) {
                        // Only the cell it was meant for, whether it runs
                        // already or is about to (the main thread looks
                        // after setting current, this one before): a stop
                        // that came after its cell ended stops nothing.
                        long cell = Long.parseLong(text);
                        stopFor = cell;
                        if (cell == current)
                            control.stop();
                    }
                }
            } catch (IOException | InterruptedException | NumberFormatException e) {
                // The kernel went away (or spoke nonsense): so do we.
                Runtime.getRuntime().halt(0);
            }
        }, "requests");
        reader.setDaemon(true);
        reader.start();

        frame("ready", "");
        while (true) {
            String code = cells.take();
            // A stop for the cell before, handled up to here, is undone
            // by newCell(); one for this cell from now on is not, and one
            // that came before is in stopFor.
            current++;
            control.newCell();
            if (stopFor == current)
                control.stop();
            if (!run(shell, control, code))
                Runtime.getRuntime().halt(3);
        }
    }
}
