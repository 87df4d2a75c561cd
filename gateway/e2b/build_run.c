#include "autoconf.h"

#include "gateway/e2b/build_internal.h"
#include "gateway/kernels/egress.h"
#include "gateway/kernels/kernels.h"
#include "gateway/core/loop.h"
#include "gateway/kernels/process.h"
#include "gateway/kernels/templates.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FEED_PIECE     (64 * 1024)
#define READY_INTERVAL 1000.0 /* ms between two ready checks */
#define HOME_DIR       "/home/user"

/* A build runs its steps one at a time, each a command in its sandbox (a
 * copy is one too: tar and a script as the sandbox's root, fed the upload
 * on stdin), then its start command and ready check, and ends its sandbox,
 * whose layer the kernel-host then seals. Every value a step takes
 * reaches its command in the environment, never in the script's text. */
struct build_run {
        struct build_run *next;
        struct build *build;
        struct sandbox *sandbox;
        struct sandbox_waiter waiter;
        json_t *steps;
        size_t step;  /* the step running (index), or the number of steps after them */
        json_t *env;  /* ENV so far */
        char workdir[PATH_MAX]; /* WORKDIR so far; "": the user's home */
        bool root;              /* USER so far is root */
        char *start_cmd, *ready_cmd;
        struct process *proc;       /* the step's, or the ready check's */
        struct process *start_proc; /* the start command, while the check runs */
        bool checking;              /* proc is a ready check */
        char failure[BUILD_MAX_LOG_LINE]; /* what a command's failure is called */
        int copy_fd;                /* an upload fed to proc's stdin */
        char *piece;
        size_t piece_len, piece_at;
        bool fed_all;
        char partial[2][BUILD_MAX_LOG_LINE]; /* stdout's and stderr's unfinished line */
        size_t partial_len[2];
        lws_sorted_usec_list_t deadline, retry, ready_timer;
};

static struct build_run *runs;

unsigned build_runs_of(const char *owner)
{
        unsigned n = 0;

        for (struct build_run *r = runs; r; r = r->next)
                n += strcmp(r->build->tpl->owner, owner) == 0;
        return n;
}

static void run_free(struct build_run *run)
{
        for (struct build_run **link = &runs; *link; link = &(*link)->next) {
                if (*link == run) {
                        *link = run->next;
                        break;
                }
        }
        loop_timer_stop(&run->deadline);
        loop_timer_stop(&run->retry);
        loop_timer_stop(&run->ready_timer);
        sandbox_waiter_cancel(&run->waiter);
        if (run->proc)
                process_abandon(&run->proc);
        if (run->start_proc)
                process_abandon(&run->start_proc);
        if (run->copy_fd >= 0)
                close(run->copy_fd);
        /* Its end makes the kernel-host seal (or drop) the layer. */
        sandbox_unref(&run->sandbox);
        if (run->build->run == run)
                run->build->run = NULL;
        json_decref(run->steps);
        json_decref(run->env);
        free(run->start_cmd);
        free(run->ready_cmd);
        free(run->piece);
        free(run);
}

static void step_name(const struct build_run *run, char out[16])
{
        if (run->step < json_array_size(run->steps))
                snprintf(out, 16, "%zu", run->step + 1);
        else
                snprintf(out, 16, "finalize");
}

static void run_fail(struct build_run *run, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* The build fails at the step running now, and its sandbox ends. */
static void run_fail(struct build_run *run, const char *fmt, ...)
{
        char step[16], message[BUILD_MAX_LOG_LINE];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        step_name(run, step);
        build_fail(run->build, step, "%s", message);
        run_free(run);
}

void build_run_abort(struct build *b)
{
        if (!b->run)
                return;
        build_fail(b, "finalize", "%s", "the build was stopped");
        run_free(b->run);
}

/* ---- commands --------------------------------------------------------------- */

static void flush_line(struct build_run *run, int s)
{
        if (run->partial_len[s] == 0)
                return;
        run->partial[s][run->partial_len[s]] = '\0';
        build_log(run->build, "info", "%s", run->partial[s]);
        run->partial_len[s] = 0;
}

static void on_output(void *ctx, int stream, const uint8_t *data, size_t len)
{
        struct build_run *run = ctx;
        int s = stream == 2 ? 1 : 0;

        for (size_t i = 0; i < len; i++) {
                if (data[i] == '\n' || run->partial_len[s] == BUILD_MAX_LOG_LINE - 1) {
                        flush_line(run, s);
                        if (data[i] == '\n')
                                continue;
                }
                run->partial[s][run->partial_len[s]++] = (char)data[i];
        }
}

static void feed(struct build_run *run);

static void on_retry(lws_sorted_usec_list_t *sul)
{
        feed(lws_container_of(sul, struct build_run, retry));
}

/* A copy: the upload into the command's stdin as far as the pipe takes
 * it, again shortly when it is full. */
static void feed(struct build_run *run)
{
        int fd = run->proc ? process_stdin_fd(run->proc) : -1;

        while (fd >= 0 && !run->fed_all) {
                ssize_t n;

                if (run->piece_at == run->piece_len) {
                        n = read(run->copy_fd, run->piece, FEED_PIECE);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0) {
                                run->fed_all = true;
                                break;
                        }
                        run->piece_len = (size_t)n;
                        run->piece_at = 0;
                }
                n = write(fd, run->piece + run->piece_at, run->piece_len - run->piece_at);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        loop_timer_start(&run->retry, on_retry, 1.0);
                        return;
                }
                if (n < 0) {
                        run->fed_all = true; /* it went away; its exit says why */
                        break;
                }
                run->piece_at += (size_t)n;
        }
        if (run->fed_all && run->proc)
                process_close_stdin(run->proc);
}

static void on_started(void *ctx)
{
        struct build_run *run = ctx;

        if (run->copy_fd >= 0)
                feed(run);
}

static void next_step(struct build_run *run);
static void done(struct build_run *run);
static void on_ready_timer(lws_sorted_usec_list_t *sul);

static void on_failed(void *ctx, const char *message)
{
        struct build_run *run = ctx;

        run->proc = NULL;
        run_fail(run, "cannot start a command: %s", message);
}

static void on_ended(void *ctx, const struct hostmsg_exit *ex)
{
        struct build_run *run = ctx;
        char detail[BUILD_MAX_LOG_LINE + 64];

        run->proc = NULL;
        flush_line(run, 0);
        flush_line(run, 1);
        loop_timer_stop(&run->retry);
        if (run->copy_fd >= 0) {
                close(run->copy_fd);
                run->copy_fd = -1;
        }
        if (run->checking) {
                run->checking = false;
                if (ex->exit_code == 0 && !ex->signal) {
                        build_log(run->build, "info", "The ready command passed");
                        done(run);
                } else {
                        loop_timer_start(&run->ready_timer, on_ready_timer, READY_INTERVAL);
                }
                return;
        }
        if (ex->exit_code == 0 && !ex->signal) {
                run->step++;
                next_step(run);
                return;
        }
        if (ex->signal)
                snprintf(detail, sizeof(detail), "%s: command failed: killed by signal %d (%s)",
                         run->failure, ex->signal, ex->reason);
        else
                snprintf(detail, sizeof(detail), "%s: command failed: exit status %d",
                         run->failure, ex->exit_code);
        run_fail(run, "%s", detail);
}

static const struct process_ops step_ops = {on_started, on_output, on_failed, on_ended};

/* The start command ended before the ready check passed. */
static void on_start_ended(void *ctx, const struct hostmsg_exit *ex)
{
        struct build_run *run = ctx;

        run->start_proc = NULL;
        flush_line(run, 0);
        flush_line(run, 1);
        if (ex->exit_code != 0 || ex->signal) {
                char detail[128];

                snprintf(detail, sizeof(detail), "exit status %d%s", ex->exit_code,
                         ex->signal ? ", killed" : "");
                run_fail(run, "the start command failed: %s", detail);
        }
}

static void on_start_failed(void *ctx, const char *message)
{
        struct build_run *run = ctx;

        run->start_proc = NULL;
        run_fail(run, "cannot start the start command: %s", message);
}

static const struct process_ops start_ops = {NULL, on_output, on_start_failed, on_start_ended};

/* Runs script with bash as the step's user (root: as_root) in its workdir,
 * with ENV and extra ("NAME=value", NULL-terminated) in its environment. */
static int run_script(struct build_run *run, const char *script, bool as_root,
                      char *const *extra, bool keep_stdin, const struct process_ops *ops,
                      struct process **out)
{
        char *argv[] = {"/bin/bash", "-l", "-c", (char *)script, NULL};
        size_t n = json_object_size(run->env), next = 0;
        struct hostmsg_start start = {.argv = argv, .as_root = as_root};
        char **env;
        const char *key;
        json_t *v;
        int rc;

        for (size_t i = 0; extra && extra[i]; i++)
                n++;
        env = calloc(n + 1, sizeof(char *));
        if (!env)
                return -ENOMEM;
        json_object_foreach(run->env, key, v) {
                if (asprintf(&env[next], "%s=%s", key, json_string_value(v)) >= 0)
                        next++;
        }
        for (size_t i = 0; extra && extra[i]; i++)
                env[next++] = strdup(extra[i]);
        start.env = env;
        snprintf(start.sandbox_id, sizeof(start.sandbox_id), "%s", run->sandbox->id);
        snprintf(start.cwd, sizeof(start.cwd), "%s",
                 run->workdir[0] ? run->workdir : as_root ? "/root" : HOME_DIR);
        rc = process_start(&start, keep_stdin, ops, run, out);
        jp_strv_free(env);
        return rc;
}

/* ---- steps ---------------------------------------------------------------------- */

static bool user_name(const char *name, bool *root)
{
        if (strcmp(name, "root") == 0) {
                *root = true;
                return true;
        }
        if (strcmp(name, "user") == 0) {
                *root = false;
                return true;
        }
        return false;
}

static const char *arg(json_t *step, size_t i)
{
        const char *s = json_string_value(json_array_get(json_object_get(step, "args"), i));

        return s ? s : "";
}

/* A copy's source as E2B takes it: what comes before the glob pattern
 * (the SDK put the matching files in the archive), "." for none. */
static void copy_source(const char *src, char *out, size_t size)
{
        char padded[PATH_MAX];
        size_t meta, slash = 0;

        snprintf(padded, sizeof(padded), "%s/", src);
        meta = strcspn(padded, "*?[{");
        for (size_t i = 0; i < meta; i++) {
                if (padded[i] == '/')
                        slash = i + 1;
        }
        if (slash <= 1)
                snprintf(out, size, slash ? "/" : ".");
        else
                snprintf(out, size, "%.*s", (int)(slash - 1), padded);
}

/* The copy, as the sandbox's root: the archive (gzip or not) unpacked in
 * a directory of its own under /tmp, then its source moved to the
 * destination with Docker's COPY semantics (a directory's contents merged
 * into the target, a file or link renamed to it, a trailing slash: into
 * it), owned and moded as asked. */
static const char copy_script[] =
        "set -e\n"
        "t=$(mktemp -d /tmp/glovebox-copy.XXXXXX)\n"
        "trap 'rm -rf \"$t\"' EXIT\n"
        "cat > \"$t/archive\"\n"
        "mkdir \"$t/files\"\n"
        "tar -xf \"$t/archive\" -C \"$t/files\" --no-same-owner\n"
        "case $GB_DEST in /*) target=$GB_DEST ;; *) target=$GB_WORKDIR/$GB_DEST ;; esac\n"
        "src=$t/files/$GB_SRC\n"
        "if [ -L \"$src\" ] || [ -f \"$src\" ]; then\n"
        "    if [ -L \"$src\" ]; then chown -h \"$GB_OWNER\" \"$src\"; else chown \"$GB_OWNER\" \"$src\";\n"
        "        [ -z \"$GB_MODE\" ] || chmod \"$GB_MODE\" \"$src\"; fi\n"
        "    case $target in */) mkdir -p \"$target\" ;; *) mkdir -p \"$(dirname \"$target\")\" ;; esac\n"
        "    mv -f \"$src\" \"$target\"\n"
        "elif [ -d \"$src\" ]; then\n"
        "    chown -R \"$GB_OWNER\" \"$src\"\n"
        "    [ -z \"$GB_MODE\" ] || chmod -R \"$GB_MODE\" \"$src\"\n"
        "    mkdir -p \"$target\"\n"
        "    (cd \"$src\" && tar -cf - .) | tar -xf - -C \"$target\" --keep-directory-symlink "
        "--no-overwrite-dir\n"
        "else\n"
        "    echo \"the upload holds no $GB_SRC\" >&2; exit 1\n"
        "fi\n";

/* A workdir made as the sandbox's root, the directories it makes given to
 * the user of the steps (as E2B's: not the parents that were there). */
static const char workdir_script[] =
        "set -e\n"
        "[ -d \"$GB_DIR\" ] && exit 0\n"
        "first=; c=$GB_DIR\n"
        "while [ ! -d \"$c\" ]; do first=$c; c=$(dirname \"$c\"); done\n"
        "mkdir -p \"$GB_DIR\"\n"
        "chown -R \"$GB_OWNER\" \"$first\"\n";

static bool owner_valid(const char *owner)
{
        char user[16], group[16];
        bool root;

        if (sscanf(owner, "%15[^:]:%15s", user, group) == 2)
                return (user_name(user, &root) || strcmp(user, "0") == 0 ||
                        strcmp(user, "1000") == 0) &&
                       (user_name(group, &root) || strcmp(group, "0") == 0 ||
                        strcmp(group, "1000") == 0);
        return user_name(owner, &root) || strcmp(owner, "0") == 0 || strcmp(owner, "1000") == 0;
}

static void step_copy(struct build_run *run, json_t *step)
{
        const char *hash = json_string_value(json_object_get(step, "filesHash"));
        const char *owner = arg(step, 2), *mode = arg(step, 3);
        char src[PATH_MAX], e_src[PATH_MAX + 8], e_dest[PATH_MAX + 8], e_owner[64], e_mode[32],
            e_workdir[PATH_MAX + 16];
        char *extra[] = {e_src, e_dest, e_owner, e_mode, e_workdir, NULL};
        int rc;

        snprintf(run->failure, sizeof(run->failure), "failed to copy '%.1024s' to '%.1024s'",
                 arg(step, 0), arg(step, 1));
        if (!hash || !build_hash_valid(hash)) {
                run_fail(run, "%s: the step has no files hash", run->failure);
                return;
        }
        if (!arg(step, 1)[0] || (owner[0] && !owner_valid(owner)) ||
            strspn(mode, "01234567") != strlen(mode) || strlen(mode) > 5) {
                run_fail(run, "%s: a copy takes a destination, an owner of 'user' or 'root' "
                              "and an octal mode",
                         run->failure);
                return;
        }
        run->copy_fd = build_upload_open(run->build->tpl->owner, hash);
        if (run->copy_fd < 0) {
                run_fail(run, "%s: its files were not uploaded", run->failure);
                return;
        }
        copy_source(arg(step, 0), src, sizeof(src));
        snprintf(e_src, sizeof(e_src), "GB_SRC=%s", src);
        snprintf(e_dest, sizeof(e_dest), "GB_DEST=%s", arg(step, 1));
        snprintf(e_owner, sizeof(e_owner), "GB_OWNER=%s",
                 owner[0] ? owner : run->root ? "root:root" : "user:user");
        snprintf(e_mode, sizeof(e_mode), "GB_MODE=%s", mode);
        snprintf(e_workdir, sizeof(e_workdir), "GB_WORKDIR=%s",
                 run->workdir[0] ? run->workdir : run->root ? "/root" : HOME_DIR);
        run->fed_all = false;
        run->piece_len = run->piece_at = 0;
        build_log(run->build, "info", "COPY %s %s", arg(step, 0), arg(step, 1));
        rc = run_script(run, copy_script, true, extra, true, &step_ops, &run->proc);
        if (rc < 0)
                run_fail(run, "cannot start the copy: %s", strerror(-rc));
}

static void step_workdir(struct build_run *run, json_t *step)
{
        const char *dir = arg(step, 0);
        char path[PATH_MAX], e_dir[PATH_MAX + 8], e_owner[32];
        char *extra[] = {e_dir, e_owner, NULL};
        int rc;

        if (!dir[0] || strlen(dir) >= sizeof(path) / 2) {
                run_fail(run, "%s", "WORKDIR takes a path");
                return;
        }
        if (dir[0] == '/')
                snprintf(path, sizeof(path), "%s", dir);
        else
                snprintf(path, sizeof(path), "%s/%s",
                         run->workdir[0] ? run->workdir : run->root ? "/root" : HOME_DIR, dir);
        snprintf(e_dir, sizeof(e_dir), "GB_DIR=%s", path);
        snprintf(e_owner, sizeof(e_owner), "GB_OWNER=%s", run->root ? "root:root" : "user:user");
        snprintf(run->failure, sizeof(run->failure), "failed to create workdir '%.1024s'", path);
        build_log(run->build, "info", "WORKDIR %s", path);
        /* Made from / as root: the new workdir is set once it exists. */
        snprintf(run->workdir, sizeof(run->workdir), "/");
        rc = run_script(run, workdir_script, true, extra, false, &step_ops, &run->proc);
        snprintf(run->workdir, sizeof(run->workdir), "%s", path);
        if (rc < 0)
                run_fail(run, "cannot start the workdir's command: %s", strerror(-rc));
}

static void step_run(struct build_run *run, json_t *step)
{
        json_t *args = json_object_get(step, "args");
        const char *cmd = arg(step, 0);
        bool root = run->root;
        int rc;

        snprintf(run->failure, sizeof(run->failure), "failed to run command '%.3000s'", cmd);
        if (json_array_size(args) >= 2 && !user_name(arg(step, 1), &root)) {
                /* As E2B's envd says it. */
                char detail[BUILD_MAX_LOG_LINE];

                snprintf(detail, sizeof(detail),
                         "%s: command failed: unauthenticated: invalid username: '%.64s'",
                         run->failure, arg(step, 1));
                run_fail(run, "%s", detail);
                return;
        }
        build_log(run->build, "info", "RUN %s%s", cmd, root && !run->root ? " (as root)" : "");
        rc = run_script(run, cmd, root, NULL, false, &step_ops, &run->proc);
        if (rc < 0)
                run_fail(run, "cannot start the command: %s", strerror(-rc));
}

static bool step_env(struct build_run *run, json_t *step)
{
        json_t *args = json_object_get(step, "args");
        size_t n = json_array_size(args);

        if (n == 0 || n % 2) {
                run_fail(run, "%s", "ENV takes names and values, in pairs");
                return false;
        }
        for (size_t i = 0; i < n; i += 2) {
                const char *name = arg(step, i);

                if (!name[0] || strchr(name, '=') ||
                    strlen(name) + strlen(arg(step, i + 1)) + 1 > BUILD_MAX_ARG ||
                    json_object_size(run->env) >= BUILD_MAX_ENV) {
                        run_fail(run, "ENV: '%.200s' is not a variable's name, or its value is "
                                      "too long, or there are too many",
                                 name);
                        return false;
                }
                json_object_set_new(run->env, name, json_string(arg(step, i + 1)));
                build_log(run->build, "info", "ENV %s", name);
        }
        return true;
}

/* The ready check: again after READY_INTERVAL until it passes, or the
 * build's deadline ends the build. */
static void check(struct build_run *run)
{
        int rc;

        run->checking = true;
        snprintf(run->failure, sizeof(run->failure), "the ready command");
        rc = run_script(run, run->ready_cmd, run->root, NULL, false, &step_ops, &run->proc);
        if (rc < 0)
                run_fail(run, "cannot start the ready command: %s", strerror(-rc));
}

static void on_ready_timer(lws_sorted_usec_list_t *sul)
{
        check(lws_container_of(sul, struct build_run, ready_timer));
}

/* Everything passed: what the template's sandboxes get is recorded, and
 * the sandbox ends, for its layer to be sealed (build_finished). */
static void done(struct build_run *run)
{
        struct build *b = run->build;

        json_decref(b->env);
        b->env = json_incref(run->env);
        snprintf(b->workdir, sizeof(b->workdir), "%s", run->workdir);
        b->root = run->root;
        b->start_cmd = run->start_cmd;
        b->ready_cmd = run->ready_cmd;
        run->start_cmd = run->ready_cmd = NULL;
        build_log(b, "info", "Steps done: keeping the template's layer");
        build_finished(b);
        run_free(run);
}

/* The steps are done: the start command, and its ready check. */
static void after_steps(struct build_run *run)
{
        int rc;

        if (!run->start_cmd) {
                done(run);
                return;
        }
        build_log(run->build, "info", "Starting the start command: %s", run->start_cmd);
        rc = run_script(run, run->start_cmd, run->root, NULL, false, &start_ops,
                        &run->start_proc);
        if (rc < 0) {
                run_fail(run, "cannot start the start command: %s", strerror(-rc));
                return;
        }
        if (!run->ready_cmd) {
                done(run);
                return;
        }
        build_log(run->build, "info", "Waiting for the ready command: %s", run->ready_cmd);
        check(run);
}

static void next_step(struct build_run *run)
{
        while (run->step < json_array_size(run->steps)) {
                json_t *step = json_array_get(run->steps, run->step);
                const char *type = json_string_value(json_object_get(step, "type"));

                if (!type || json_array_size(json_object_get(step, "args")) > 64) {
                        run_fail(run, "%s", "a step needs a type and at most 64 args");
                        return;
                }
                if (strcmp(type, "RUN") == 0) {
                        step_run(run, step);
                        return;
                }
                if (strcmp(type, "COPY") == 0) {
                        step_copy(run, step);
                        return;
                }
                if (strcmp(type, "WORKDIR") == 0) {
                        step_workdir(run, step);
                        return;
                }
                if (strcmp(type, "USER") == 0) {
                        if (!user_name(arg(step, 0), &run->root)) {
                                run_fail(run,
                                         "USER '%.64s': Glovebox sandboxes have the users 'user' "
                                         "and 'root'",
                                         arg(step, 0));
                                return;
                        }
                        build_log(run->build, "info", "USER %s", arg(step, 0));
                } else if (strcmp(type, "ENV") == 0) {
                        if (!step_env(run, step))
                                return;
                } else {
                        run_fail(run, "unknown step type '%.32s'", type);
                        return;
                }
                run->step++;
        }
        after_steps(run);
}

static void on_deadline(lws_sorted_usec_list_t *sul)
{
        struct build_run *run = lws_container_of(sul, struct build_run, deadline);
        char detail[64];

        snprintf(detail, sizeof(detail), "%.0f s", build_config()->template_build_timeout);
        run_fail(run, "the build ran past --template-build-timeout (%s)", detail);
}

static void on_sandbox(struct sandbox_waiter *w, struct sandbox *sb, const char *error)
{
        struct build_run *run = lws_container_of(w, struct build_run, waiter);

        (void)sb;
        if (error) {
                build_fail(run->build, "base", "cannot make the build's sandbox: %s", error);
                run_free(run);
                return;
        }
        build_log(run->build, "info", "Sandbox ready: running %zu steps",
                  json_array_size(run->steps));
        next_step(run);
}

int build_run_start(struct build *b, json_t *spec, char *err, size_t errlen)
{
        const struct config *cfg = build_config();
        const char *start = json_string_value(json_object_get(spec, "startCmd"));
        const char *ready = json_string_value(json_object_get(spec, "readyCmd"));
        char *ids[HOSTMSG_MAX_LAYERS + 1] = {NULL};
        struct sandbox_layers layers = {.ids = ids,
                                        .build = b->id,
                                        .build_mb = (uint64_t)cfg->template_build_disk_mb};
        struct hostmsg_network net = {0};
        const struct jp_kernelspec *spec_k;
        struct hostmsg_limits limits;
        struct build_run *run;
        size_t i;
        json_t *v;
        int rc;

        spec_k = builds_kernel(b);
        if (!spec_k) {
                snprintf(err, errlen, "template %s has no kernel to start sandboxes of",
                         b->base[0] ? b->base : "base");
                return -ENOENT;
        }
        run = calloc(1, sizeof(*run));
        if (!run) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        run->build = b;
        run->copy_fd = -1;
        run->steps = json_object_get(spec, "steps") ? json_incref(json_object_get(spec, "steps"))
                                                    : json_array();
        run->env = json_object();
        run->piece = malloc(FEED_PIECE);
        if ((start && strlen(start) > BUILD_MAX_ARG) || (ready && strlen(ready) > BUILD_MAX_ARG)) {
                run_free(run);
                snprintf(err, errlen, "the start and ready commands are at most %d bytes",
                         BUILD_MAX_ARG);
                return -EINVAL;
        }
        run->start_cmd = start && start[0] ? strdup(start) : NULL;
        run->ready_cmd = ready && ready[0] ? strdup(ready) : NULL;
        if (!run->steps || !run->env || !run->piece) {
                run_free(run);
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        json_array_foreach(run->steps, i, v) {
                json_t *args = json_object_get(v, "args");
                size_t j;
                json_t *a;

                if (!json_is_object(v) || (args && !json_is_array(args))) {
                        run_free(run);
                        snprintf(err, errlen, "step %zu is not {type, args}", i + 1);
                        return -EINVAL;
                }
                json_array_foreach(args, j, a) {
                        if (!json_is_string(a) || json_string_length(a) > BUILD_MAX_ARG) {
                                run_free(run);
                                snprintf(err, errlen, "step %zu: args are strings of at most %d "
                                         "bytes", i + 1, BUILD_MAX_ARG);
                                return -EINVAL;
                        }
                }
        }
        /* Its parents' layers, below its own (the first). */
        for (i = 1; i < json_array_size(b->layers) && i <= HOSTMSG_MAX_LAYERS; i++)
                ids[i - 1] = (char *)json_string_value(json_array_get(b->layers, i));
        kernels_default_limits(&limits);
        if (b->memory_mb > 0)
                limits.memory_mb = (uint64_t)(b->memory_mb < cfg->max_memory_mb ? b->memory_mb
                                                                                : cfg->max_memory_mb);
        if (b->cpu_count > 0)
                limits.cpu_millis = (uint32_t)(1000.0 * ((double)b->cpu_count < cfg->max_cpus
                                                               ? (double)b->cpu_count
                                                               : cfg->max_cpus));
        /* The operator's egress: whatever it allows any sandbox. */
        if (egress_enabled() && egress_kernel_request(json_true(), &net, err, errlen) < 0) {
                run_free(run);
                return -EINVAL;
        }
        rc = templates_sandbox_new_layered(spec_k, &limits, true, &net, &layers, &run->sandbox);
        egress_network_clear(&net);
        if (rc < 0) {
                run_free(run);
                snprintf(err, errlen, "cannot make the build's sandbox: %s", strerror(-rc));
                return rc;
        }
        b->run = run;
        b->status = BUILD_BUILDING;
        run->next = runs;
        runs = run;
        build_log(b, "info", "Building template %s (build %s) from %s", b->tpl->alias, b->id,
                  b->base[0] ? b->base : "the host's /usr");
        loop_timer_start(&run->deadline, on_deadline, cfg->template_build_timeout * 1000.0);
        run->waiter.ready = on_sandbox;
        sandbox_when_ready(run->sandbox, &run->waiter);
        return 0;
}

/* ---- a built template's start command, in each of its sandboxes --------------- */

static void start_output(void *ctx, int stream, const uint8_t *data, size_t len)
{
        (void)ctx;
        (void)stream;
        (void)data;
        (void)len;
}

static void start_failed(void *ctx, const char *message)
{
        log_warn("a template's start command did not start: %s", message);
        free(ctx);
}

static void start_ended(void *ctx, const struct hostmsg_exit *ex)
{
        (void)ex;
        free(ctx);
}

static const struct process_ops template_start_ops = {NULL, start_output, start_failed,
                                                      start_ended};

int builds_start(const struct build *b, struct sandbox *sb)
{
        char *argv[] = {"/bin/bash", "-l", "-c", b->start_cmd, NULL};
        struct hostmsg_start start = {.argv = argv, .as_root = b->root};
        size_t n = json_object_size(b->env), next = 0;
        struct process **proc;
        const char *key;
        char **env;
        json_t *v;
        int rc;

        if (!b->start_cmd)
                return 0;
        env = calloc(n + 1, sizeof(char *));
        /* The process's handle lives until it ends (the sandbox's end). */
        proc = calloc(1, sizeof(*proc));
        if (!env || !proc) {
                free(env);
                free(proc);
                return -ENOMEM;
        }
        json_object_foreach(b->env, key, v) {
                if (asprintf(&env[next], "%s=%s", key, json_string_value(v)) >= 0)
                        next++;
        }
        start.env = env;
        snprintf(start.sandbox_id, sizeof(start.sandbox_id), "%s", sb->id);
        snprintf(start.cwd, sizeof(start.cwd), "%s", b->workdir);
        rc = process_start(&start, false, &template_start_ops, proc, proc);
        jp_strv_free(env);
        if (rc < 0)
                free(proc);
        return rc;
}
