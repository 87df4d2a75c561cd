/* The MCP session's tools, each in the session's sandbox:
 *   run_code {code, language?, timeout?}  a cell in its python3 kernel
 *                                         (execute.c collects the outputs)
 *   read_file {path}, write_file {path, content}, list_files {path?}
 *                                         through files.c (openat2 in the
 *                                         sandbox's root, as its user)
 *   run_command {command, timeout?}       bash -c in the sandbox (process.c,
 *                                         as E2B's commands)
 * Every answer is bounded by --mcp-max-output-bytes. */
#include "autoconf.h"

#include "gateway/kernels/run.h"
#include "gateway/kernels/files.h"
#include "gateway/kernels/kernels.h"
#include "gateway/core/loop.h"
#include "gateway/mcp/mcp.h"
#include "gateway/kernels/process.h"
#include "protocol/buf.h"
#include "protocol/log.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COMMAND_TIMEOUT_S 60.0    /* run_command's default */
#define MAX_TIMEOUT_S     86400.0 /* the longest timeout a call may ask */
#define READ_PIECE        (64 * 1024)

/* The tools as tools/list shows them: names, descriptions, JSON Schemas. */
static const char tools_json[] =
    "["
    "{\"name\":\"run_code\",\"title\":\"Run code\","
    "\"description\":\"Runs Python code in the session's sandboxed Jupyter kernel. Variables, "
    "imports and files persist across calls. Returns printed output, the value of the last "
    "expression, plots as PNG images, and errors with their traceback.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"code\":{\"type\":\"string\",\"description\":\"The code to run\"},"
    "\"language\":{\"type\":\"string\",\"enum\":[\"python\"],\"description\":\"Only python\"},"
    "\"timeout\":{\"type\":\"number\",\"minimum\":0,\"description\":\"Seconds before the cell "
    "is interrupted (default: none)\"}},"
    "\"required\":[\"code\"],\"additionalProperties\":false}},"
    "{\"name\":\"read_file\",\"title\":\"Read a file\","
    "\"description\":\"Reads a file of the sandbox. Relative paths are below /home/user. Text "
    "comes back as text, other bytes as a base64 resource.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\"}},\"required\":[\"path\"],\"additionalProperties\":false}},"
    "{\"name\":\"write_file\",\"title\":\"Write a file\","
    "\"description\":\"Writes text to a file of the sandbox, creating missing directories and "
    "replacing what was there. Relative paths are below /home/user.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\"},\"content\":{\"type\":\"string\"}},"
    "\"required\":[\"path\",\"content\"],\"additionalProperties\":false}},"
    "{\"name\":\"list_files\",\"title\":\"List files\","
    "\"description\":\"Lists a directory of the sandbox (default /home/user): one entry a "
    "line, directories ending in /, files with their size.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\"}},\"additionalProperties\":false}},"
    "{\"name\":\"run_command\",\"title\":\"Run a shell command\","
    "\"description\":\"Runs a command with bash -c in the sandbox, in /home/user, as the "
    "kernel's user. Returns its stdout, stderr and exit code; a non-zero exit is an error.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"command\":{\"type\":\"string\"},"
    "\"timeout\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"description\":\"Seconds before "
    "it is killed (default 60)\"}},"
    "\"required\":[\"command\"],\"additionalProperties\":false}}"
    "]";

static json_t *tools;

json_t *mcp_tools_list(void)
{
        if (!tools)
                tools = json_loads(tools_json, 0, NULL);
        return json_incref(tools);
}

static json_t *tool_schema(const char *name)
{
        size_t i;
        json_t *t, *list = mcp_tools_list();
        json_t *found = NULL;

        json_array_foreach(list, i, t) {
                const char *n = json_string_value(json_object_get(t, "name"));

                if (n && strcmp(n, name) == 0) {
                        found = json_object_get(t, "inputSchema");
                        break;
                }
        }
        json_decref(list); /* tools keeps its own reference */
        return found;
}

/* The schemas are flat (strings and numbers): checked from the schema
 * itself, so what tools/list promises is what is enforced. */
int mcp_tools_check(const char *name, json_t *arguments, char *err, size_t errlen)
{
        json_t *schema = tool_schema(name);
        json_t *props = json_object_get(schema, "properties");
        json_t *required = json_object_get(schema, "required");
        const char *key;
        json_t *v;
        size_t i;

        if (!schema) {
                snprintf(err, errlen, "Unknown tool: %.64s", name);
                return -EINVAL;
        }
        json_array_foreach(required, i, v) {
                if (!json_object_get(arguments, json_string_value(v))) {
                        snprintf(err, errlen, "%s: \"%s\" is required", name, json_string_value(v));
                        return -EINVAL;
                }
        }
        json_object_foreach(arguments, key, v) {
                json_t *p = json_object_get(props, key);
                const char *type = json_string_value(json_object_get(p, "type"));
                json_t *choices = json_object_get(p, "enum");
                bool ok;

                if (!p) {
                        snprintf(err, errlen, "%s: unknown argument \"%.64s\"", name, key);
                        return -EINVAL;
                }
                ok = strcmp(type, "string") == 0
                         ? json_is_string(v)
                         : json_is_number(v) && isfinite(json_number_value(v));
                if (ok && json_is_number(v) && json_object_get(p, "minimum"))
                        ok = json_number_value(v) >= 0 && json_number_value(v) <= MAX_TIMEOUT_S;
                if (ok && json_is_number(v) && json_object_get(p, "exclusiveMinimum"))
                        ok = json_number_value(v) > 0 && json_number_value(v) <= MAX_TIMEOUT_S;
                if (ok && choices) {
                        size_t c;
                        json_t *choice;

                        ok = false;
                        json_array_foreach(choices, c, choice)
                                ok |= json_equal(choice, v);
                }
                if (!ok) {
                        snprintf(err, errlen, "%s: \"%s\" must be %s", name, key,
                                 choices ? "\"python\" (the session's kernel)"
                                 : strcmp(type, "string") == 0
                                     ? "a string"
                                     : "a number of seconds, at most 86400");
                        return -EINVAL;
                }
        }
        return 0;
}

static const char *arg_string(struct mcp_call *call, const char *key)
{
        return json_string_value(json_object_get(call->arguments, key));
}

static json_t *text_item(const char *text, size_t len)
{
        return json_pack("{s:s, s:s%}", "type", "text", "text", text, len);
}

static size_t max_output(void)
{
        return (size_t)config_get()->mcp_max_output_bytes;
}

/* The sandbox of k, ready for file access; NULL after failing the call. */
static struct sandbox *ready_sandbox(struct mcp_call *call, struct kernel *k)
{
        if (!k->sandbox || k->sandbox->phase != SANDBOX_READY) {
                mcp_call_fail(call, "The session's sandbox is not ready (the gateway runs "
                                    "without sandboxes, or it is restarting)");
                return NULL;
        }
        return k->sandbox;
}

/* ---- run_code ------------------------------------------------------------ */

struct code_run {
        struct mcp_call *call;
        struct execution *exec;
        struct execute_collector collector;
        json_t *content;
        struct buf text; /* the stream text not yet made an item */
        size_t bytes;    /* what the answer holds so far */
        bool truncated, error, ended;
};

/* Drops the escape sequences of IPython's coloured tracebacks. */
static void strip_ansi(struct buf *out, const char *s)
{
        while (*s) {
                if (s[0] == '\x1b' && s[1] == '[') {
                        s += 2;
                        while (*s && !(*s >= '@' && *s <= '~'))
                                s++;
                        if (*s)
                                s++;
                        continue;
                }
                buf_append(out, s, 1);
                s++;
        }
}

/* Appends item (taken over) if the answer has room for size more bytes. */
static void code_add(struct code_run *run, json_t *item, size_t size)
{
        if (!item)
                return;
        if (run->bytes + size > max_output()) {
                run->truncated = true;
                json_decref(item);
                return;
        }
        run->bytes += size;
        json_array_append_new(run->content, item);
}

static void code_flush_text(struct code_run *run)
{
        if (!run->text.len)
                return;
        json_array_append_new(run->content, text_item(run->text.data, run->text.len));
        buf_reset(&run->text);
}

static void code_stream(struct code_run *run, const char *text)
{
        size_t len = strlen(text);

        if (run->bytes + len > max_output()) {
                len = max_output() > run->bytes ? max_output() - run->bytes : 0;
                run->truncated = true;
        }
        /* Cut on a UTF-8 character's first byte. */
        while (len && len < strlen(text) && ((unsigned char)text[len] & 0xC0) == 0x80)
                len--;
        if (buf_append(&run->text, text, len) == 0)
                run->bytes += len;
}

static void code_result(struct code_run *run, json_t *line)
{
        static const char *const images[][2] = {{"png", "image/png"}, {"jpeg", "image/jpeg"}};
        const char *text = json_string_value(json_object_get(line, "text"));
        bool image = false;

        code_flush_text(run);
        for (size_t i = 0; i < 2; i++) {
                json_t *data = json_object_get(line, images[i][0]);

                if (!json_is_string(data))
                        continue;
                image = true;
                code_add(run,
                         json_pack("{s:s, s:O, s:s}", "type", "image", "data", data, "mimeType",
                                   images[i][1]),
                         json_string_length(data));
        }
        /* A figure's text is only its repr ("<Figure size 640x480 ...>"). */
        if (text && !image)
                code_add(run, text_item(text, strlen(text)), strlen(text));
}

static void code_error(struct code_run *run, json_t *line)
{
        const char *tb = json_string_value(json_object_get(line, "traceback"));
        const char *name = json_string_value(json_object_get(line, "name"));
        const char *value = json_string_value(json_object_get(line, "value"));
        struct buf text;

        code_flush_text(run);
        run->error = true;
        buf_init(&text, max_output());
        if (tb && *tb)
                strip_ansi(&text, tb);
        else
                buf_printf(&text, "%s: %s", name ? name : "Error", value ? value : "");
        /* Errors are kept even past the bound (the bound cuts the text). */
        json_array_append_new(run->content, text_item(text.data ? text.data : "", text.len));
        run->bytes += text.len;
        buf_free(&text);
}

static void on_code_line(struct execute_collector *c, json_t *line)
{
        struct code_run *run = lws_container_of(c, struct code_run, collector);
        const char *type = json_string_value(json_object_get(line, "type"));
        const char *text = json_string_value(json_object_get(line, "text"));

        if (!type) {
        } else if ((strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) && text) {
                code_stream(run, text);
        } else if (strcmp(type, "result") == 0) {
                code_result(run, line);
        } else if (strcmp(type, "error") == 0) {
                code_error(run, line);
        }
        json_decref(line);
}

static void code_run_free(struct code_run *run)
{
        json_decref(run->content);
        buf_free(&run->text);
        free(run);
}

static void on_code_end(struct execute_collector *c)
{
        struct code_run *run = lws_container_of(c, struct code_run, collector);
        struct mcp_call *call = run->call;
        json_t *content = run->content;

        run->ended = true;
        run->exec = NULL;
        code_flush_text(run);
        if (run->truncated) {
                char note[160];

                snprintf(note, sizeof(note), "[output cut at %zu bytes (--mcp-max-output-bytes)]",
                         max_output());
                json_array_append_new(content, text_item(note, strlen(note)));
        }
        if (json_array_size(content) == 0)
                json_array_append_new(content, text_item("(no output)", 11));
        run->content = NULL;
        call->tool_state = NULL;
        call->abandon = NULL;
        mcp_call_result(call, content, NULL, run->error);
        code_run_free(run);
}

static void abandon_code(struct mcp_call *call)
{
        struct code_run *run = call->tool_state;

        call->tool_state = NULL;
        execute_abandon(&run->exec);
        code_run_free(run);
}

static void run_code(struct mcp_call *call, struct kernel *k)
{
        struct code_run *run = calloc(1, sizeof(*run));
        json_t *timeout = json_object_get(call->arguments, "timeout");
        struct execution *e;

        if (!run || !(run->content = json_array())) {
                free(run);
                mcp_call_fail(call, "out of memory");
                return;
        }
        run->call = call;
        buf_init(&run->text, SIZE_MAX);
        run->collector.line = on_code_line;
        run->collector.end = on_code_end;
        call->tool_state = run;
        call->abandon = abandon_code;
        e = execute_collect(k, arg_string(call, "code"), timeout ? json_number_value(timeout) : 0,
                            &run->collector);
        if (!e && !call->answered) {
                call->tool_state = NULL;
                call->abandon = NULL;
                code_run_free(run);
                mcp_call_fail(call, "out of memory");
                return;
        }
        /* The run may have ended at once (and freed run). */
        if (!call->answered)
                run->exec = e;
}

/* ---- files --------------------------------------------------------------- */

/* Whether data is UTF-8 text a client can show (no NUL). */
static bool is_text(const uint8_t *data, size_t len)
{
        size_t i = 0;

        while (i < len) {
                uint8_t c = data[i];
                size_t n = c < 0x80             ? 1
                           : (c & 0xE0) == 0xC0 ? 2
                           : (c & 0xF0) == 0xE0 ? 3
                           : (c & 0xF8) == 0xF0 ? 4
                                                : 0;

                if (c == 0 || n == 0 || i + n > len || (n == 2 && c < 0xC2))
                        return false;
                for (size_t j = 1; j < n; j++) {
                        if ((data[i + j] & 0xC0) != 0x80)
                                return false;
                }
                i += n;
        }
        return true;
}

static void read_file(struct mcp_call *call, struct sandbox *sb, const char *path)
{
        struct buf data, b64;
        struct stat st;
        char uri[PATH_MAX + 8];
        int fd = -1, rc = files_open_read(sb, FILES_USER, path, &fd, &st);

        /* Room for one more piece than the file may have. */
        buf_init(&data, max_output() + READ_PIECE + 1);
        buf_init(&b64, SIZE_MAX);
        if (rc == -EISDIR) {
                mcp_call_fail(call, "%s is a directory (list_files lists it)", path);
                goto out;
        }
        if (rc < 0) {
                mcp_call_fail(call, "Cannot read %s: %s", path, strerror(-rc));
                goto out;
        }
        if ((uint64_t)st.st_size > max_output()) {
                mcp_call_fail(call,
                              "%s has %lld bytes, more than a tool call returns (%zu, "
                              "--mcp-max-output-bytes); run_code or run_command can read parts "
                              "of it",
                              path, (long long)st.st_size, max_output());
                goto out;
        }
        for (;;) {
                char *at;
                ssize_t n;

                if (buf_grow(&data, READ_PIECE, &at) < 0) {
                        mcp_call_fail(call, "%s grew past %zu bytes while being read", path,
                                      max_output());
                        goto out;
                }
                n = read(fd, at, READ_PIECE);
                if (n < 0) {
                        mcp_call_fail(call, "Cannot read %s: %s", path, strerror(errno));
                        goto out;
                }
                data.len -= READ_PIECE - (size_t)n;
                data.data[data.len] = '\0';
                if (n == 0)
                        break;
                if (data.len > max_output()) {
                        mcp_call_fail(call, "%s grew past %zu bytes while being read", path,
                                      max_output());
                        goto out;
                }
        }
        if (is_text((const uint8_t *)data.data, data.len)) {
                mcp_call_result(call,
                                json_pack("[o]", text_item(data.data ? data.data : "", data.len)),
                                NULL, false);
                goto out;
        }
        snprintf(uri, sizeof(uri), "file://%s", path);
        buf_append_base64(&b64, (const uint8_t *)data.data, data.len);
        mcp_call_result(call,
                        json_pack("[{s:s, s:{s:s, s:s, s:s%}}]", "type", "resource", "resource",
                                  "uri", uri, "mimeType", "application/octet-stream", "blob",
                                  b64.data ? b64.data : "", b64.len),
                        NULL, false);
out:
        if (fd >= 0)
                close(fd);
        buf_free(&data);
        buf_free(&b64);
}

static void write_file(struct mcp_call *call, struct sandbox *sb, const char *path)
{
        json_t *jcontent = json_object_get(call->arguments, "content");
        const char *content = json_string_value(jcontent);
        size_t len = json_string_length(jcontent), done = 0;
        char text[PATH_MAX + 64];
        int fd = -1, rc = files_open_write(sb, FILES_USER, path, &fd);

        if (rc < 0) {
                mcp_call_fail(call, "Cannot write %s: %s", path, strerror(-rc));
                return;
        }
        while (done < len) {
                ssize_t n = write(fd, content + done, len - done);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        mcp_call_fail(call, "Cannot write %s: %s", path,
                                      n < 0 ? strerror(errno) : "no progress");
                        close(fd);
                        return;
                }
                done += (size_t)n;
        }
        if (close(fd) < 0) {
                mcp_call_fail(call, "Cannot write %s: %s", path, strerror(errno));
                return;
        }
        snprintf(text, sizeof(text), "Wrote %zu bytes to %s", len, path);
        mcp_call_result(call, json_pack("[o]", text_item(text, strlen(text))), NULL, false);
}

static void list_files(struct mcp_call *call, struct sandbox *sb, const char *path)
{
        json_t *entries = NULL, *e;
        struct buf text;
        size_t i;
        int rc = files_list(sb, FILES_USER, path, 1, &entries);

        if (rc < 0) {
                mcp_call_fail(call, "Cannot list %s: %s", path, strerror(-rc));
                return;
        }
        buf_init(&text, max_output());
        buf_printf(&text, "%s:\n", path);
        json_array_foreach(entries, i, e) {
                const char *name = json_string_value(json_object_get(e, "name"));
                const char *type = json_string_value(json_object_get(e, "type"));
                const char *size = json_string_value(json_object_get(e, "size"));
                int rc2;

                if (type && strcmp(type, "FILE_TYPE_DIRECTORY") == 0)
                        rc2 = buf_printf(&text, "%s/\n", name);
                else if (type && strcmp(type, "FILE_TYPE_SYMLINK") == 0)
                        rc2 = buf_printf(&text, "%s@\n", name);
                else
                        rc2 = buf_printf(&text, "%s  %s bytes\n", name, size ? size : "?");
                if (rc2 < 0) {
                        buf_printf(&text, "[listing cut]\n");
                        break;
                }
        }
        if (json_array_size(entries) == 0)
                buf_printf(&text, "(empty)\n");
        mcp_call_result(call, json_pack("[o]", text_item(text.data ? text.data : "", text.len)),
                        json_pack("{s:O}", "entries", entries), false);
        json_decref(entries);
        buf_free(&text);
}

/* ---- run_command --------------------------------------------------------- */

/* A command lives until process.c reports its end, whether or not its
 * call is still there (a call that goes kills it). */
struct command_run {
        struct mcp_call *call;   /* NULL once the call went */
        struct process *process; /* NULL once it ended */
        struct sandbox *sandbox; /* a reference while it runs */
        struct buf out[2];       /* stdout, stderr */
        bool cut[2];
        bool timed_out;
        double timeout_s;
        lws_sorted_usec_list_t deadline;
};

static void command_free(struct command_run *c)
{
        process_abandon(&c->process);
        buf_free(&c->out[0]);
        buf_free(&c->out[1]);
        loop_timer_stop(&c->deadline);
        sandbox_unref(&c->sandbox);
        free(c);
}

/* Past the bound, output is read and dropped: the command never blocks
 * on a full pipe. */
static void on_command_output(void *ctx, int stream, const uint8_t *data, size_t len)
{
        struct command_run *c = ctx;
        int i = stream == 1 ? 0 : 1;

        if (c->cut[i] || !c->call)
                return;
        if (buf_append(&c->out[i], data, len) < 0) {
                buf_append(&c->out[i], data, c->out[i].max - c->out[i].len);
                c->cut[i] = true;
        }
}

static json_t *output_item(struct command_run *c, int i, const char *label)
{
        struct buf t;
        json_t *item;

        buf_init(&t, SIZE_MAX);
        if (label)
                buf_printf(&t, "%s", label);
        buf_append(&t, c->out[i].data ? c->out[i].data : "", c->out[i].len);
        if (c->cut[i])
                buf_printf(&t, "\n[%s cut at %zu bytes (--mcp-max-output-bytes)]",
                           i ? "stderr" : "stdout", max_output());
        item = text_item(t.data ? t.data : "", t.len);
        buf_free(&t);
        return item;
}

/* Detaches the call from c; NULL when it already went. */
static struct mcp_call *command_call(struct command_run *c)
{
        struct mcp_call *call = c->call;

        c->call = NULL;
        if (call) {
                call->tool_state = NULL;
                call->abandon = NULL;
        }
        return call;
}

static void on_command_ended(void *ctx, const struct hostmsg_exit *ex)
{
        struct command_run *c = ctx;
        struct mcp_call *call = command_call(c);
        json_t *content, *structured;
        char status[256];
        int code = ex->signal ? -1 : ex->exit_code;

        c->process = NULL;
        if (!call)
                goto out;
        if (c->timed_out)
                snprintf(status, sizeof(status), "timed out after %g s and was killed",
                         c->timeout_s);
        else if (ex->signal)
                snprintf(status, sizeof(status), "killed by signal %d (%s)", ex->signal,
                         strcmp(ex->reason, "out-of-memory") == 0 ? "out of memory"
                                                                  : strsignal(ex->signal));
        else
                snprintf(status, sizeof(status), "exit code %d", ex->exit_code);
        content = json_array();
        if (c->out[0].len || c->cut[0])
                json_array_append_new(content, output_item(c, 0, NULL));
        if (c->out[1].len || c->cut[1])
                json_array_append_new(content, output_item(c, 1, "stderr:\n"));
        json_array_append_new(content, text_item(status, strlen(status)));
        structured =
            json_pack("{s:s%, s:s%, s:i, s:b}", "stdout", c->out[0].data ? c->out[0].data : "",
                      c->out[0].len, "stderr", c->out[1].data ? c->out[1].data : "", c->out[1].len,
                      "exitCode", code, "timedOut", c->timed_out);
        mcp_call_result(call, content, structured, c->timed_out || code != 0);
out:
        command_free(c);
}

static void on_command_failed(void *ctx, const char *message)
{
        struct command_run *c = ctx;
        struct mcp_call *call = command_call(c);

        c->process = NULL;
        if (call)
                mcp_call_fail(call, "The command could not start: %s", message);
        command_free(c);
}

static const struct process_ops command_ops = {NULL, on_command_output, on_command_failed,
                                               on_command_ended};

static void on_command_deadline(lws_sorted_usec_list_t *sul)
{
        struct command_run *c = lws_container_of(sul, struct command_run, deadline);

        log_info("MCP command reached its timeout of %g s; killing it", c->timeout_s);
        c->timed_out = true;
        process_signal(c->process, SIGKILL);
}

/* The client left: nobody would see the output, so the command is killed;
 * process.c's report of its end frees c. */
static void abandon_command(struct mcp_call *call)
{
        struct command_run *c = call->tool_state;

        command_call(c);
        process_signal(c->process, SIGKILL);
}

static void run_command(struct mcp_call *call, struct sandbox *sb)
{
        char *argv[] = {"/bin/bash", "-c", (char *)arg_string(call, "command"), NULL};
        char *env[] = {NULL};
        json_t *timeout = json_object_get(call->arguments, "timeout");
        struct hostmsg_start start = {.argv = argv, .env = env};
        struct command_run *c;
        char why[256];

        /* Past Linux's limit for one argument, it could never run. */
        if (hostmsg_start_check(&start, why, sizeof(why)) < 0) {
                mcp_call_fail(call, "The command cannot run: %s", why);
                return;
        }
        c = calloc(1, sizeof(*c));
        if (!c) {
                mcp_call_fail(call, "out of memory");
                return;
        }
        buf_init(&c->out[0], max_output());
        buf_init(&c->out[1], max_output());
        c->timeout_s = timeout ? json_number_value(timeout) : COMMAND_TIMEOUT_S;
        c->sandbox = sandbox_ref(sb);
        snprintf(start.sandbox_id, sizeof(start.sandbox_id), "%s", sb->id);
        if (process_start(&start, false, &command_ops, c, &c->process) < 0) {
                command_free(c);
                mcp_call_fail(call, "Cannot reach the kernel-host to start the command");
                return;
        }
        c->call = call;
        call->tool_state = c;
        call->abandon = abandon_command;
        loop_timer_start(&c->deadline, on_command_deadline, c->timeout_s * 1000.0);
}

/* ---- dispatch ------------------------------------------------------------ */

void mcp_tools_run(struct mcp_call *call, struct kernel *k)
{
        const char *tool = call->tool;
        const char *given = arg_string(call, "path");
        char path[PATH_MAX];
        struct sandbox *sb;

        if (strcmp(tool, "run_code") == 0) {
                run_code(call, k);
                return;
        }
        sb = ready_sandbox(call, k);
        if (!sb)
                return;
        if (strcmp(tool, "run_command") == 0) {
                run_command(call, sb);
                return;
        }
        if (files_normalize(given ? given : ".", path, sizeof(path)) < 0) {
                mcp_call_fail(call, "Bad path: %.256s", given ? given : "");
                return;
        }
        if (strcmp(tool, "read_file") == 0)
                read_file(call, sb, path);
        else if (strcmp(tool, "write_file") == 0)
                write_file(call, sb, path);
        else if (strcmp(tool, "list_files") == 0)
                list_files(call, sb, path);
        else
                mcp_call_fail(call, "Unknown tool %s", tool);
}
