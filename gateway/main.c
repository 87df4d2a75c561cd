/* glovebox: the gateway. Parses the configuration, forks the kernel-host
 * (before any thread exists), discovers kernelspecs and runs the event loop
 * until SIGTERM or SIGINT, then shuts every kernel down and removes every
 * file it created. */
#include "autoconf.h"

#include "gateway/e2b/builds.h"
#include "gateway/core/access_log.h"
#include "gateway/core/config.h"
#include "gateway/core/fleet.h"
#include "gateway/core/conns.h"
#include "gateway/e2b/display.h"
#include "gateway/e2b/e2b.h"
#include "gateway/core/heap.h"
#include "gateway/mcp/mcp.h"
#include "gateway/terminals/terminals.h"
#include "gateway/kernels/egress.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/keep.h"
#include "gateway/kernels/kernels.h"
#include "gateway/kernels/limits.h"
#include "gateway/core/loop.h"
#include "gateway/jupyter/pause_api.h"
#include "gateway/jupyter/snapshots_api.h"
#include "gateway/jupyter/kernels_api.h"
#include "gateway/jupyter/page.h"
#include "gateway/routes.h"
#include "gateway/kernels/pause.h"
#include "gateway/kernels/pool.h"
#include "gateway/kernels/warm.h"
#include "gateway/kernels/sandboxes.h"
#include "gateway/ports/ports.h"
#include "gateway/core/server.h"
#include "gateway/kernels/specs.h"
#include "gateway/kernels/templates.h"
#include "gateway/kernels/volumes.h"
#include "gateway/core/tenants.h"
#include "gateway/kernels/zio.h"
#include "protocol/buf.h"
#include "protocol/kernelspec.h"
#include "protocol/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <linux/close_range.h>
#include <unistd.h>

#define SHUTDOWN_TIMEOUT_MS 10000.0
/* After the kernel-host died for good: time for clients to read that their
 * kernels died before the gateway exits. */
#define HOST_LOST_GRACE_MS 1000.0
/* In the runtime directory: held (shared) by the gateway and its
 * kernel-host while they run, so that a later start can tell a dead run's
 * directory from a live one. */
#define RUNTIME_LOCK ".lock"

static struct {
        struct config cfg;
        struct jp_kernelspec_list specs;
        char runtime_dir[PATH_MAX];
        int lock_fd;
        int sigfd;
        struct loop_watch *sigwatch;
        volatile int stop; /* the loop ends once this is set */
        int shutting_down;
        int exit_code;
        int keep; /* SIGUSR2: exec a new image that takes the kernels over */
        lws_sorted_usec_list_t host_lost_timer;
} gw = {.sigfd = -1, .lock_fd = -1};

static void on_all_kernels_gone(void)
{
        gw.stop = 1;
        lws_cancel_service(loop_context());
}

static void shut_down(void)
{
        gw.shutting_down = 1;
        e2b_shutdown();
        kernel_pause_shutdown();
        terminals_shutdown();
        mcp_shutdown();
        pool_stop();
        kernels_shutdown_all(SHUTDOWN_TIMEOUT_MS, on_all_kernels_gone);
}

static void on_signal(void *arg)
{
        struct signalfd_siginfo si;

        while (read(gw.sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                if (si.ssi_signo == SIGHUP) {
                        tenants_reload();
                        continue;
                }
                if (si.ssi_signo == SIGUSR2) {
                        if (gw.shutting_down || gw.keep)
                                continue;
                        if (!gw.cfg.state_dir[0]) {
                                log_error("SIGUSR2 (restart and keep) refused: no --state-dir");
                                continue;
                        }
                        log_info("received SIGUSR2: restarting, keeping %zu kernel(s)",
                                 kernels_count());
                        gw.keep = 1;
                        gw.stop = 1;
                        continue;
                }
                if (gw.shutting_down) {
                        log_warn("second signal: exiting now");
                        gw.stop = 1;
                        continue;
                }
                log_info("received %s: shutting down %zu kernel(s)", strsignal((int)si.ssi_signo),
                         kernels_count());
                shut_down();
        }
}

static void on_host_lost_grace(lws_sorted_usec_list_t *sul)
{
        if (!gw.shutting_down)
                shut_down();
}

/* No kernel-host, and no new one may start: a gateway that cannot run a
 * kernel must not look healthy. It exits non-zero, for a supervisor to
 * start it afresh, once clients had a moment to read that their kernels
 * died. */
static void on_host_lost(void)
{
        log_error("exiting: no kernel-host to run kernels (status 1, for a supervisor to "
                  "restart glovebox)");
        gw.exit_code = 1;
        loop_timer_start(&gw.host_lost_timer, on_host_lost_grace, HOST_LOST_GRACE_MS);
}

/* Kernels hold several descriptors each (its ZMQ sockets, and three more
 * per connected client): a thousand sessions need about 25,000. Root may
 * raise the hard limit itself (up to fs.nr_open); anyone may raise the
 * soft limit to the hard one. */
#define WANTED_FDS 131072

static void raise_fd_limit(void)
{
        struct rlimit rl;
        rlim_t want = WANTED_FDS;
        char text[32];
        long nr_open = 0;

        if (read_small_file("/proc/sys/fs/nr_open", text, sizeof(text)) > 0)
                nr_open = strtol(text, NULL, 10);
        if (nr_open > 0 && (rlim_t)nr_open < want)
                want = (rlim_t)nr_open;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
                return;
        if (rl.rlim_max < want) {
                struct rlimit raised = {want, want};

                if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
                        return;
        }
        rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
        setrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < 32768)
                log_info("descriptor limit %lu: about %lu kernels with a client each fit in it",
                         (unsigned long)rl.rlim_cur, (unsigned long)rl.rlim_cur / 21);
}

/* Marks the runtime directory as this live run's: a lock held as long as
 * we run (and our kernel-host, which takes its own), that a later start
 * takes to know the run is over. Made under another name and renamed, so
 * that it never exists unlocked. */
static int lock_runtime_dir(void)
{
        char tmp[PATH_MAX + 32], path[PATH_MAX + 32];
        int rc = 0;

        snprintf(tmp, sizeof(tmp), "%s/" RUNTIME_LOCK ".new", gw.runtime_dir);
        snprintf(path, sizeof(path), "%s/" RUNTIME_LOCK, gw.runtime_dir);
        gw.lock_fd = open(tmp, O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (gw.lock_fd < 0 || flock(gw.lock_fd, LOCK_SH) < 0 || rename(tmp, path) < 0) {
                rc = -errno;
                log_error("cannot lock %s: %s", gw.runtime_dir, strerror(errno));
        }
        return rc;
}

/* Removes the runtime directory at exit, when the kernel-host emptied it.
 * If it could not (it died), the lock stays, unheld once we are gone: the
 * next start removes what is left. */
static void remove_runtime_dir(void)
{
        char path[PATH_MAX + 32];
        struct dirent *de;
        bool others = false;
        DIR *d;

        if (!gw.runtime_dir[0])
                return;
        d = opendir(gw.runtime_dir);
        while (d && (de = readdir(d)) != NULL) {
                if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
                    strcmp(de->d_name, RUNTIME_LOCK) != 0)
                        others = true;
        }
        if (d)
                closedir(d);
        if (others) {
                log_warn("%s is not empty: the next start removes what is left", gw.runtime_dir);
        } else {
                snprintf(path, sizeof(path), "%s/" RUNTIME_LOCK, gw.runtime_dir);
                unlink(path);
                if (rmdir(gw.runtime_dir) < 0)
                        log_warn("cannot remove %s: %s", gw.runtime_dir, strerror(errno));
        }
        if (gw.lock_fd >= 0)
                close(gw.lock_fd);
        gw.lock_fd = -1;
}

static lws_sorted_usec_list_t log_flush_timer;

/* Rate-limited warnings (protocol/log.h) say how many lines they held back
 * once a flood stops, not only when the next line comes. */
static void on_log_flush(lws_sorted_usec_list_t *sul)
{
        log_limit_flush_due();
        loop_timer_start(sul, on_log_flush, 1000.0);
}

static int make_runtime_dir(void)
{
        if ((size_t)snprintf(gw.runtime_dir, sizeof(gw.runtime_dir), "%s/glovebox-XXXXXX",
                             gw.cfg.runtime_dir) >= sizeof(gw.runtime_dir) - 80) {
                log_error("--runtime-dir is too long for socket paths");
                return -ENAMETOOLONG;
        }
        if (!mkdtemp(gw.runtime_dir)) {
                log_error("cannot create a directory in %s: %s", gw.cfg.runtime_dir,
                          strerror(errno));
                gw.runtime_dir[0] = '\0';
                return -errno;
        }
        /* Sandbox set-up runs as unprivileged host ids that must reach their
         * kernel's directory inside: searchable, not listable. */
        if (chmod(gw.runtime_dir, 0711) < 0)
                return -errno;
        return lock_runtime_dir();
}

static int discover_kernelspecs(void)
{
        int rc = specs_init(gw.cfg.kernelspec_path, &gw.specs);

        if (rc < 0)
                return rc;
        if (!jp_kernelspec_find(&gw.specs, gw.cfg.default_kernel))
                log_warn("the default kernelspec '%s' was not found", gw.cfg.default_kernel);
        return 0;
}

/* The one line that says where the gateway serves, on stdout. It carries
 * the token only when the gateway made the token up: then nobody else
 * knows it. A token the operator gave (--token-file, GLOVEBOX_TOKEN,
 * --config, --token) is never printed, so that stdout kept by a service
 * manager (systemd's journal, docker logs) holds no token the operator
 * chose to keep in a file. The log, on stderr, never holds it. */
static void print_url(void)
{
        const char *host = gw.cfg.host;
        const char *scheme = *gw.cfg.certfile ? "https" : "http";
        const char *lb, *rb;

        /* A wildcard address is not one to connect to. */
        if (strcmp(host, "0.0.0.0") == 0)
                host = "127.0.0.1";
        else if (strcmp(host, "::") == 0)
                host = "::1";
        lb = strchr(host, ':') ? "[" : "";
        rb = strchr(host, ':') ? "]" : "";
        if (gw.cfg.token_source == CONFIG_TOKEN_GENERATED)
                printf("Glovebox is serving at %s://%s%s%s:%d%s?token=%s\n", scheme, lb, host, rb,
                       gw.cfg.port, gw.cfg.base_url, gw.cfg.token);
        else
                printf("Glovebox is serving at %s://%s%s%s:%d%s\n", scheme, lb, host, rb,
                       gw.cfg.port, gw.cfg.base_url);
        /* On a terminal, a person started it: say how to stop it. */
        if (isatty(STDOUT_FILENO))
                printf("Press Ctrl+C to stop it (the kernels and their files go with it).\n");
        fflush(stdout);
}

/* --token shows in /proc/PID/cmdline, which every user of the machine can
 * read (ps). Overwriting the value in place blanks it there from now on;
 * it was visible from the exec until this point, and stays in the shell's
 * history, so --token-file is still what to use. */
static void blank_token_argument(int argc, char **argv)
{
        for (int i = 1; i < argc; i++) {
                char *value = NULL;

                if (strcmp(argv[i], "--token") == 0 && i + 1 < argc)
                        value = argv[++i];
                else if (strncmp(argv[i], "--token=", 8) == 0)
                        value = argv[i] + 8;
                if (value)
                        memset(value, 'x', strlen(value));
        }
}

/* --hash-key: the SHA-256 a --keys-file holds for the key on stdin (its
 * first line), so that the key itself is never written anywhere. */
static int hash_key(void)
{
        char line[CONFIG_TOKEN_MAX + 3], hex[2 * KEYS_HASH_SIZE + 1];
        size_t len;

        if (!fgets(line, sizeof(line), stdin)) {
                fprintf(stderr, "glovebox: --hash-key reads the key on stdin; none came\n");
                return 2;
        }
        len = strcspn(line, "\r\n");
        line[len] = '\0';
        if (len < CONFIG_TOKEN_MIN || len > CONFIG_TOKEN_MAX) {
                fprintf(stderr, "glovebox: a key must be %d to %d characters\n", CONFIG_TOKEN_MIN,
                        CONFIG_TOKEN_MAX);
                return 2;
        }
        for (size_t i = 0; i < len; i++) {
                if (line[i] <= ' ' || line[i] > '~') {
                        fprintf(stderr, "glovebox: a key must be printable ASCII without "
                                        "spaces\n");
                        return 2;
                }
        }
        if (keys_hash_hex(line, len, hex) < 0) {
                fprintf(stderr, "glovebox: cannot hash the key\n");
                return 2;
        }
        explicit_bzero(line, sizeof(line));
        printf("%s\n", hex);
        return 0;
}

static void say_where_the_token_is(void)
{
        switch (gw.cfg.token_source) {
        case CONFIG_TOKEN_ARGV:
                log_warn("--token is visible to every user of this machine (ps) until the "
                         "gateway starts, and in shell history: give it with --token-file or "
                         "GLOVEBOX_TOKEN instead");
                break;
        case CONFIG_TOKEN_FILE:
                log_info("token: the one in --token-file %s (not printed)", gw.cfg.token_file);
                break;
        case CONFIG_TOKEN_ENV:
                log_info("token: the one in GLOVEBOX_TOKEN (not printed)");
                break;
        case CONFIG_TOKEN_CONFIG:
                log_info("token: the one in the --config file (not printed)");
                break;
        case CONFIG_TOKEN_GENERATED:
                log_info("token: generated, printed once on stdout in the URL");
                break;
        case CONFIG_TOKEN_NONE:
                break;
        }
}

/* Once, at start: the default limits, which every kernel has, that the
 * kernel-host cannot enforce. Requests are not refused for them, only for
 * asking for such a limit by name. */
static void warn_unenforced_defaults(void)
{
        json_t *list, *name;
        char names[128] = "";
        size_t i, len = 0;

        if (strcmp(gw.cfg.sandbox, "none") == 0)
                return; /* nothing is enforced, and that was said */
        list = limits_not_enforced(host_controllers(), true);
        json_array_foreach(list, i, name) {
                len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s", i ? ", " : "",
                                        json_string_value(name));
                if (len >= sizeof(names))
                        break;
        }
        if (json_array_size(list))
                log_warn("default limits not enforced here (the kernel-host has no cgroup "
                         "controller for them): %s; a request naming one gets %s",
                         names,
                         gw.cfg.allow_unenforced_limits
                             ? "it unenforced (--allow-unenforced-limits)"
                             : "400");
        json_decref(list);
}

/* The variable that tells a new image it was exec'd to take kernels over;
 * a fresh start never has it. */
#define KEEP_ENV "GLOVEBOX_KEEP"

/* The program to exec: the file our executable was started from, so that
 * an upgrade that replaced it (the old one shows as "PATH (deleted)") runs
 * the new one; /proc/self/exe if that cannot be told. */
static const char *program_path(char *buf, size_t size)
{
        static const char deleted[] = " (deleted)";
        ssize_t n = readlink("/proc/self/exe", buf, size - 1);
        size_t len;

        if (n <= 0)
                return "/proc/self/exe";
        buf[n] = '\0';
        len = (size_t)n;
        if (len > sizeof(deleted) - 1 && strcmp(buf + len - (sizeof(deleted) - 1), deleted) == 0)
                buf[len - (sizeof(deleted) - 1)] = '\0';
        return access(buf, X_OK) == 0 ? buf : "/proc/self/exe";
}

/* Takes back what restart_keeping prepared for an exec that did not
 * happen: the record (it holds the kernels' keys), the inheritable
 * descriptors and the environment. The kernels, their sandboxes and the
 * listening sockets were never touched: the gateway serves on. */
static void keep_undo(const struct keep_process *proc, bool token_set)
{
        alarm(0);
        keep_discard_stale(gw.cfg.state_dir);
        sandboxes_keep_reset();
        if (proc->host_fd >= 0)
                fcntl(proc->host_fd, F_SETFD, FD_CLOEXEC);
        if (proc->lock_fd >= 0)
                fcntl(proc->lock_fd, F_SETFD, FD_CLOEXEC);
        unsetenv(KEEP_ENV);
        if (token_set)
                unsetenv("GLOVEBOX_TOKEN");
}

/* SIGUSR2: records the kernels and execs this same program in this same
 * process. The pid stays, so that the kernel-host stays our child and its
 * fault-safety holds: should this process die from here on (kill -9), the
 * kernel-host and every sandbox die with it. Nothing is destroyed before
 * the exec (the new image destroys what was not kept), so whatever fails
 * here (the record cannot be written, the program cannot be exec'd) leaves
 * this gateway serving as before. Returns only then, with -errno. */
static int restart_keeping(char **argv)
{
        struct keep_process proc = {
            .lock_fd = gw.lock_fd, .host_fd = -1, .controllers = host_controllers()};
        bool token_set = false;
        char exe[PATH_MAX];
        const char *program;
        char **args = NULL;
        size_t n = 0;
        int rc;

        snprintf(proc.runtime_dir, sizeof(proc.runtime_dir), "%s", gw.runtime_dir);
        rc = host_keep_link(&proc.host_fd, &proc.host_pid);
        if (rc == 0)
                rc = keep_save(gw.cfg.state_dir, &proc);
        if (rc < 0) {
                log_error("SIGUSR2 refused: cannot record the kernels (%s); serving on",
                          strerror(-rc));
                keep_undo(&proc, false);
                return rc;
        }
        /* A --token on the command line was blanked (blank_token_argument)
         * and a generated one must stay the same: both go by environment,
         * which other users cannot read. */
        while (argv[n])
                n++;
        args = calloc(n + 1, sizeof(char *));
        rc = -ENOMEM;
        if (!args)
                goto fail;
        n = 0;
        for (size_t i = 0; argv[i]; i++) {
                if (strcmp(argv[i], "--token") == 0 && argv[i + 1]) {
                        i++;
                        continue;
                }
                if (strncmp(argv[i], "--token=", 8) == 0)
                        continue;
                args[n++] = argv[i];
        }
        if (gw.cfg.token_source == CONFIG_TOKEN_ARGV ||
            gw.cfg.token_source == CONFIG_TOKEN_GENERATED) {
                if (setenv("GLOVEBOX_TOKEN", gw.cfg.token, 1) < 0)
                        goto fail_errno;
                token_set = true;
        }
        if (setenv(KEEP_ENV, "1", 1) < 0)
                goto fail_errno;
        /* Nothing but the kernel-host link, the runtime directory's lock
         * and the kept sandboxes' roots (made inheritable) goes across:
         * not the listening sockets, not ZMQ's. Close-on-exec only: should
         * the exec fail, this image uses them on. */
        if (syscall(SYS_close_range, 3, ~0u, CLOSE_RANGE_CLOEXEC) < 0)
                goto fail_errno;
        fcntl(proc.host_fd, F_SETFD, 0);
        fcntl(proc.lock_fd, F_SETFD, 0);
        sandboxes_keep_inheritable();
        program = program_path(exe, sizeof(exe));
        log_info("executing %s; kept kernels have %g s to be re-adopted", program,
                 gw.cfg.keep_grace);
        fflush(stdout);
        fflush(stderr);
        /* An alarm survives execve: a new image that hangs before it takes
         * the kernels over dies of it, and the kernel-host and every
         * sandbox with it, instead of leaving them unseen. */
        alarm((unsigned)gw.cfg.keep_grace + 1);
        execv(program, args);
fail_errno:
        rc = -errno;
fail:
        keep_undo(&proc, token_set);
        log_error("SIGUSR2: cannot restart (%s); serving on with every kernel", strerror(-rc));
        free(args);
        return rc;
}

/* The start of an image exec'd by restart_keeping: the runtime directory
 * and kernel-host of the previous one, and its kernels to take over once
 * the loop runs (*kernels). */
static int resume_kept(json_t **kernels)
{
        struct keep_process proc;
        int rc = keep_load(gw.cfg.state_dir, &proc, kernels);

        if (rc < 0) {
                log_error("cannot read the record of kept kernels in %s: %s", gw.cfg.state_dir,
                          strerror(-rc));
                return rc;
        }
        snprintf(gw.runtime_dir, sizeof(gw.runtime_dir), "%s", proc.runtime_dir);
        gw.lock_fd = proc.lock_fd;
        if (fcntl(gw.lock_fd, F_SETFD, FD_CLOEXEC) < 0) {
                gw.lock_fd = -1;
                rc = -EBADF;
        }
        if (rc == 0)
                rc = host_adopt(proc.host_fd, proc.host_pid, proc.controllers, gw.runtime_dir,
                                gw.cfg.log_level, gw.cfg.zygote, (int)gw.cfg.max_host_restarts,
                                strcmp(gw.cfg.home_storage, "disk") == 0 ? gw.cfg.state_dir : NULL);
        if (rc < 0)
                log_error("the kept kernel-host is not this process's: cannot take over");
        return rc;
}

/* What Jupyter's family keeps across a restart beside the kernels. */
static const struct keep_part sessions_kept = {
    .name = "sessions",
    .record = jupyter_sessions_keep_record,
    .adopt = jupyter_sessions_adopt,
};

int main(int argc, char **argv)
{
        struct lws_context *ctx = NULL;
        json_t *kept = NULL;
        bool resuming = getenv(KEEP_ENV) != NULL;
        sigset_t mask;
        int rc;

        unsetenv(KEEP_ENV);
        keep_register(&sessions_kept);

        rc = config_load(&gw.cfg, argc, argv);
        blank_token_argument(argc, argv);
        /* The egress flags are the kernels' to read and check, with the
         * rest of the configuration (core/config.c knows no kernel). */
        if (rc == 0 && egress_configure(&gw.cfg) < 0)
                rc = -EINVAL;
        if (rc != 0) {
                config_free(&gw.cfg);
                return rc > 0 ? 0 : 2;
        }
        fleet_count_kernels(kernels_count);
        kernels_usage_register(terminals_usage);
        sandboxes_set_names(&e2b_names);
        if (gw.cfg.hash_key) {
                rc = hash_key();
                config_free(&gw.cfg);
                return rc;
        }
        if (log_level_parse(gw.cfg.log_level, &log_threshold) < 0) {
                fprintf(stderr, "glovebox: --log-level must be debug, info, warn or error\n");
                return 2;
        }
        if (log_format_parse(gw.cfg.log_format, &log_format) < 0) {
                fprintf(stderr, "glovebox: --log-format must be text or json\n");
                return 2;
        }
        access_log_init(gw.cfg.access_log);
        if (tenants_init(&gw.cfg) < 0) {
                config_free(&gw.cfg);
                return 2;
        }
        /* Templates are checked too: their trees, and the kernelspecs
         * that name them. */
        if (gw.cfg.check_config &&
            (discover_kernelspecs() < 0 || templates_init(&gw.cfg, &gw.specs) < 0)) {
                templates_free();
                jp_kernelspec_list_free(&gw.specs);
                tenants_free();
                config_free(&gw.cfg);
                return 2;
        }
        if (gw.cfg.check_config) {
                templates_free();
                jp_kernelspec_list_free(&gw.specs);
                printf("configuration is valid\n");
                tenants_free();
                config_free(&gw.cfg);
                return 0;
        }
        if (strcmp(gw.cfg.sandbox, "none") == 0)
                log_warn("--sandbox=none: kernels run UNCONFINED, with the gateway's user and "
                         "network. For development only.");
        if (gw.cfg.no_auth)
                log_warn("--no-auth: anyone who can reach %s:%d can run code", gw.cfg.host,
                         gw.cfg.port);
        say_where_the_token_is();
        /* The systemd unit of older installs passed flags in GLOVEBOX_ARGS
         * of its environment file; the unit now reads --config instead,
         * and flags left there would be lost without a word. */
        if (getenv("GLOVEBOX_ARGS") && *getenv("GLOVEBOX_ARGS"))
                log_warn("GLOVEBOX_ARGS is set but nothing reads it: the systemd unit takes its "
                         "flags from its --config file now (docs/operations.md#install-as-a-"
                         "service); move them there");
        if (gw.cfg.token && !e2b_key_form(gw.cfg.token))
                log_info("the token is not of E2B's form (e2b_ and hex digits): the E2B Python "
                         "SDK sends it only with E2B_VALIDATE_API_KEY=false");
        raise_fd_limit();
        heap_init();
        signal(SIGPIPE, SIG_IGN);
        rc = 1;
        if (state_dir_lock(gw.cfg.state_dir) < 0)
                goto out;
        if (resuming) {
                if (resume_kept(&kept) < 0)
                        goto out;
        } else {
                keep_discard_stale(gw.cfg.state_dir);
                if (make_runtime_dir() < 0)
                        goto out;
        }
        if (discover_kernelspecs() < 0 || templates_init(&gw.cfg, &gw.specs) < 0 ||
            warm_defaults(&gw.cfg, &gw.specs) < 0 || page_init(&gw.cfg) < 0 ||
            (gw.cfg.state_dir[0] && pause_init(gw.cfg.state_dir) < 0) ||
            builds_init(&gw.cfg) < 0 || volumes_init(&gw.cfg) < 0)
                goto out;
        /* A peer with this host's --host-id refuses the start before
         * anything is started; a restart that keeps kernels was checked
         * when it first started. */
        if (!resuming && fleet_check_peers() < 0)
                goto out;
        if (gw.cfg.state_dir[0]) {
                char dir[PATH_MAX];

                snprintf(dir, sizeof(dir), "%s/checkpoints", gw.cfg.state_dir);
                host_set_checkpoints_dir(dir, gw.cfg.criu, (int)gw.cfg.pause_compress_after);
        }
        if (strcmp(gw.cfg.sandbox, "full") == 0)
                host_set_sandbox_stock((int)gw.cfg.sandbox_stock);
        if (resuming)
                host_set_zygotes(gw.cfg.zygote);
        /* Before any thread or ZMQ context exists. */
        if (!resuming &&
            host_spawn(gw.runtime_dir, gw.cfg.log_level, gw.cfg.zygote,
                       (int)gw.cfg.max_host_restarts,
                       strcmp(gw.cfg.home_storage, "disk") == 0 ? gw.cfg.state_dir : NULL) < 0) {
                log_error("cannot start the kernel-host");
                goto out;
        }
        warn_unenforced_defaults();
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        /* SIGHUP reads --keys-file again. */
        sigaddset(&mask, SIGHUP);
        /* SIGUSR2 restarts, keeping the kernels. */
        sigaddset(&mask, SIGUSR2);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        gw.sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        conns_init(&gw.cfg);
        if (ports_init(&gw.cfg) < 0)
                goto out;
        ctx = server_create(&gw.cfg, routes_init());
        if (!ctx || gw.sigfd < 0)
                goto out;
        loop_set_context(ctx);
        /* E2B's Python contexts load its display extension: the pool's
         * Python kernels compile it while they wait. */
        if (pool_set_python_warmup(e2b_display_compile_expression()) < 0)
                goto out;
        if (kernels_init(&gw.cfg, &gw.specs) < 0 || host_attach(on_host_lost) < 0 ||
            pool_init(&gw.cfg, &gw.specs) < 0 || fleet_start(&gw.cfg) < 0 ||
            loop_watch_fd(gw.sigfd, on_signal, NULL, &gw.sigwatch) < 0)
                goto out;
        /* Paused sandboxes outlive the gateway: listed again, resumed on
         * connect. */
        e2b_load_paused();
        kernel_pause_load();
        jupyter_snapshots_load();
        volumes_open_all();
        if (kept) {
                keep_adopt(kept);
                /* From here each kernel has its own --keep-grace timer. */
                alarm(0);
        }
        json_decref(kept);
        kept = NULL;
        log_limit_per_second = (uint32_t)gw.cfg.log_rate_limit;
        loop_timer_start(&log_flush_timer, on_log_flush, 1000.0);
        print_url();
        for (;;) {
                while (!gw.stop) {
                        if (lws_service(ctx, 0) < 0)
                                break;
                }
                /* A restart that failed changed nothing: serve on. */
                if (!gw.keep)
                        break;
                restart_keeping(argv);
                gw.keep = 0;
                gw.stop = 0;
        }
        rc = gw.exit_code;
out:
        json_decref(kept);
        loop_timer_stop(&log_flush_timer);
        fleet_stop();
        page_close();
        host_close(5000);
        kernels_free_all();
        pool_free();
        loop_unwatch(&gw.sigwatch);
        /* Before the context: the connections' timers are its. */
        conns_free();
        if (ctx)
                lws_context_destroy(ctx);
        zio_shutdown();
        if (gw.sigfd >= 0)
                close(gw.sigfd);
        remove_runtime_dir();
        specs_free();
        builds_free();
        volumes_free();
        templates_free();
        jp_kernelspec_list_free(&gw.specs);
        tenants_free();
        config_free(&gw.cfg);
        log_info("stopped");
        return rc;
}
