/* glovebox: the gateway. Parses the configuration, forks the kernel-host
 * (before any thread exists), discovers kernelspecs and runs the event loop
 * until SIGTERM or SIGINT, then shuts every kernel down and removes every
 * file it created. */
#include "autoconf.h"

#include "gateway/config.h"
#include "gateway/e2b.h"
#include "gateway/host.h"
#include "gateway/kernels.h"
#include "gateway/loop.h"
#include "gateway/page.h"
#include "gateway/pool.h"
#include "gateway/server.h"
#include "gateway/zio.h"
#include "protocol/kernelspec.h"
#include "protocol/log.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define SHUTDOWN_TIMEOUT_MS 10000.0

static struct {
        struct config cfg;
        struct jp_kernelspec_list specs;
        char runtime_dir[PATH_MAX];
        int sigfd;
        struct loop_watch *sigwatch;
        volatile int stop; /* the loop ends once this is set */
        int shutting_down;
} gw = {.sigfd = -1};

static void on_all_kernels_gone(void)
{
        gw.stop = 1;
        lws_cancel_service(loop_context());
}

static void on_signal(void *arg)
{
        struct signalfd_siginfo si;

        while (read(gw.sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                if (gw.shutting_down) {
                        log_warn("second signal: exiting now");
                        gw.stop = 1;
                        continue;
                }
                gw.shutting_down = 1;
                log_info("received %s: shutting down %zu kernel(s)", strsignal((int)si.ssi_signo),
                         kernels_count());
                e2b_shutdown();
                pool_stop();
                kernels_shutdown_all(SHUTDOWN_TIMEOUT_MS, on_all_kernels_gone);
        }
}

/* Kernels hold several descriptors each (ZMQ sockets); use all we may. */
static void raise_fd_limit(void)
{
        struct rlimit rl;

        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
}

/* Buffers of 1 MiB and more (large messages, ZMQ's receive buffers, a
 * slow client's backlog) are mapped on their own and unmapped when freed.
 * glibc would otherwise raise its threshold after the first such free and
 * serve the next ones from its heaps, which keep the memory after a burst
 * (500 MB of output left 519 MB resident). An operator who prefers the
 * speed of kept pages sets glibc.malloc.mmap_threshold in GLIBC_TUNABLES,
 * and that is left alone. */
static void return_large_buffers(void)
{
        const char *tunables = getenv("GLIBC_TUNABLES");

        if (!tunables || !strstr(tunables, "mmap_threshold"))
                mallopt(M_MMAP_THRESHOLD, 1 << 20);
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
        return 0;
}

static int discover_kernelspecs(void)
{
        char **path = jp_kernelspec_search_path(gw.cfg.kernelspec_path);
        int rc = path ? jp_kernelspec_discover(path, &gw.specs) : -ENOMEM;

        jp_strv_free(path);
        if (rc < 0)
                return rc;
        for (size_t i = 0; i < gw.specs.count; i++)
                log_info("kernelspec %s in %s", gw.specs.items[i].name, gw.specs.items[i].dir);
        if (!jp_kernelspec_find(&gw.specs, gw.cfg.default_kernel))
                log_warn("the default kernelspec '%s' was not found", gw.cfg.default_kernel);
        return 0;
}

static void print_url(void)
{
        const char *host = strcmp(gw.cfg.host, "0.0.0.0") == 0 ? "127.0.0.1" : gw.cfg.host;
        const char *lb = strchr(host, ':') ? "[" : "", *rb = strchr(host, ':') ? "]" : "";
        const char *scheme = *gw.cfg.certfile ? "https" : "http";

        if (gw.cfg.no_auth)
                printf("Glovebox is serving at %s://%s%s%s:%d%s\n", scheme, lb, host, rb,
                       gw.cfg.port, gw.cfg.base_url);
        else
                printf("Glovebox is serving at %s://%s%s%s:%d%s?token=%s\n", scheme, lb, host, rb,
                       gw.cfg.port, gw.cfg.base_url, gw.cfg.token);
        fflush(stdout);
}

int main(int argc, char **argv)
{
        struct lws_context *ctx = NULL;
        sigset_t mask;
        int rc;

        rc = config_load(&gw.cfg, argc, argv);
        if (rc != 0) {
                config_free(&gw.cfg);
                return rc > 0 ? 0 : 2;
        }
        if (log_level_parse(gw.cfg.log_level, &log_threshold) < 0) {
                fprintf(stderr, "glovebox: --log-level must be debug, info, warn or error\n");
                return 2;
        }
        if (gw.cfg.check_config) {
                printf("configuration is valid\n");
                config_free(&gw.cfg);
                return 0;
        }
        if (strcmp(gw.cfg.sandbox, "none") == 0)
                log_warn("--sandbox=none: kernels run UNCONFINED, with the gateway's user and "
                         "network. For development only.");
        if (gw.cfg.no_auth)
                log_warn("--no-auth: anyone who can reach %s:%d can run code", gw.cfg.host,
                         gw.cfg.port);
        if (gw.cfg.token && !e2b_key_form(gw.cfg.token))
                log_info("the token is not of E2B's form (e2b_ and hex digits): the E2B Python "
                         "SDK sends it only with E2B_VALIDATE_API_KEY=false");
        raise_fd_limit();
        return_large_buffers();
        signal(SIGPIPE, SIG_IGN);
        rc = 1;
        if (make_runtime_dir() < 0 || discover_kernelspecs() < 0 || page_init(&gw.cfg) < 0)
                goto out;
        /* Before any thread or ZMQ context exists. */
        if (host_spawn(gw.runtime_dir, gw.cfg.log_level) < 0) {
                log_error("cannot start the kernel-host");
                goto out;
        }
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        gw.sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        ctx = server_create(&gw.cfg);
        if (!ctx || gw.sigfd < 0)
                goto out;
        loop_set_context(ctx);
        if (kernels_init(&gw.cfg, &gw.specs) < 0 || pool_init(&gw.cfg, &gw.specs) < 0 ||
            loop_watch_fd(gw.sigfd, on_signal, NULL, &gw.sigwatch) < 0)
                goto out;
        log_limit_per_second = (uint32_t)gw.cfg.log_rate_limit;
        loop_timer_start(&log_flush_timer, on_log_flush, 1000.0);
        print_url();
        while (!gw.stop) {
                if (lws_service(ctx, 0) < 0)
                        break;
        }
        rc = 0;
out:
        loop_timer_stop(&log_flush_timer);
        page_close();
        host_close(5000);
        kernels_free_all();
        pool_free();
        loop_unwatch(&gw.sigwatch);
        if (ctx)
                lws_context_destroy(ctx);
        zio_shutdown();
        if (gw.sigfd >= 0)
                close(gw.sigfd);
        if (gw.runtime_dir[0] && rmdir(gw.runtime_dir) < 0)
                log_warn("cannot remove %s: %s", gw.runtime_dir, strerror(errno));
        jp_kernelspec_list_free(&gw.specs);
        config_free(&gw.cfg);
        log_info("stopped");
        return rc;
}
