/* Sandboxes made ahead (stock.h). */
#include "autoconf.h"

#include "kernel-host/stock.h"
#include "kernel-host/cgroup.h"
#include "kernel-host/spawn_internal.h"
#include "protocol/kernelspec.h"
#include "protocol/log.h"
#include "protocol/share.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* After the link's last message, so that a burst of requests is served
 * first and none waits behind a sandbox made ahead. */
#define QUIET_MS 100
/* After a sandbox made ahead failed: doubled each time, up to a minute. */
#define RETRY_FIRST_MS 1000
#define RETRY_MAX_MS   60000

static struct {
        unsigned want;
        struct box *ready[STOCK_MAX]; /* oldest first */
        unsigned n;
        /* Of a shape no longer asked for: removed one per quiet turn, not
         * on the request's path. */
        struct box *stale[STOCK_MAX];
        unsigned nstale;
        /* The shape of the last plain request, when shaped: its limits
         * (the disk's is the shape's, the others are a claim's own) and
         * read-only paths (NULL: none). */
        bool shaped;
        struct hostmsg_limits limits;
        char **ro_paths;
        unsigned made;         /* names them: stock-1, stock-2... */
        uint64_t due_ms;       /* the next may be made from then */
        unsigned failures;     /* in a row */
        struct jp_share share; /* who took how many since it was last full */
} stock;

static uint64_t now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void stock_init(unsigned n)
{
        stock.want = n < STOCK_MAX ? n : STOCK_MAX;
}

/* The next one is made no sooner than after a pause, longer each time
 * (a make that failed, an init that died as soon as made). */
static void back_off(const char *what, const char *why)
{
        unsigned delay = RETRY_FIRST_MS << (stock.failures < 6 ? stock.failures : 6);

        delay = delay < RETRY_MAX_MS ? delay : RETRY_MAX_MS;
        /* As full as it gets for now: no tenant is held back from what is
         * left by a stock that cannot fill. */
        jp_share_reset(&stock.share);
        if (stock.failures++ == 0)
                log_warn("%s: %s; the next in %u s, and each request makes its own meanwhile", what,
                         why, delay / 1000);
        stock.due_ms = now_ms() + delay;
}

/* A request whose sandbox could come from the stock: the host's form, as
 * root, with nothing of its own mounted and no network. */
static bool plain(const struct hostmsg_sandbox *req)
{
        return req->sandbox && geteuid() == 0 && !req->template_root[0] &&
               !(req->layers && req->layers[0]) && !req->build_layer[0] &&
               !(req->volumes && req->volumes[0]) && !req->network.enabled;
}

static bool same_paths(char *const *a, char *const *b)
{
        size_t i = 0;

        for (; a && b && a[i] && b[i]; i++) {
                if (strcmp(a[i], b[i]) != 0)
                        return false;
        }
        return !(a && a[i]) && !(b && b[i]);
}

static void drop_all(void)
{
        while (stock.n > 0)
                spawn_box_unmake(stock.ready[--stock.n], false);
        while (stock.nstale > 0)
                spawn_box_unmake(stock.stale[--stock.nstale], false);
}

/* Takes the box at i out of list (of *n). */
static struct box *take(struct box **list, unsigned *n, unsigned i)
{
        struct box *b = list[i];

        memmove(list + i, list + i + 1, (--*n - i) * sizeof(list[0]));
        return b;
}

/* req's shape is the one made ahead from now on; those of another go. */
static void reshape(const struct hostmsg_sandbox *req)
{
        char **paths = NULL;

        if (stock.shaped && stock.limits.disk_mb == req->limits.disk_mb &&
            same_paths(stock.ro_paths, req->ro_paths))
                return;
        while (stock.n > 0 && stock.nstale < STOCK_MAX)
                stock.stale[stock.nstale++] = stock.ready[--stock.n];
        while (stock.n > 0) /* no room left among the stale: at once */
                spawn_box_unmake(stock.ready[--stock.n], false);
        jp_strv_free(stock.ro_paths);
        stock.ro_paths = NULL;
        stock.shaped = false;
        if (req->ro_paths && jp_strv_dup(req->ro_paths, &paths) < 0)
                return;
        stock.ro_paths = paths;
        stock.limits = req->limits;
        stock.shaped = true;
        stock.failures = 0;
}

struct box *stock_claim(const struct hostmsg_sandbox *req)
{
        char err[HOSTMSG_ERROR_SIZE];
        struct box *b;
        int rc;

        if (!stock.want || !plain(req))
                return NULL;
        reshape(req);
        /* A tenant that has had its half since the stock was last full
         * gets a sandbox made for it: the rest stays for the others. */
        if (!jp_share_may_take(&stock.share, req->tenant, stock.want)) {
                log_debug("%s has had its share of the sandboxes made ahead", req->tenant);
                return NULL;
        }
        while (stock.n > 0) {
                b = take(stock.ready, &stock.n, 0);
                if (sandbox_dying(&b->sandbox)) {
                        spawn_box_unmake(b, false);
                        continue;
                }
                /* It holds next to nothing: what does not fit here would
                 * not fit a new one either, which says why. The same limits
                 * as it was made with, the usual case, are left as they
                 * are. On a failure the box goes (a write may have been
                 * done), and the request gets a sandbox made for it. */
                if (!hostmsg_limits_equal(&req->limits, &b->sandbox.limits) &&
                    cgroup_relimit(&b->sandbox.cgroup, &req->limits, err, sizeof(err)) < 0) {
                        log_debug("a sandbox made ahead does not take the limits asked: %s", err);
                        spawn_box_unmake(b, false);
                        return NULL;
                }
                /* Named as every sandbox's group is, after its id, where
                 * a group can be renamed (cgroup v1; on v2 it keeps its
                 * name, which the gateway is told), and of the usual
                 * weight. */
                rc = cgroup_renamable() ? cgroup_rename(&b->sandbox.cgroup, req->sandbox_id) : 0;
                if (rc == 0)
                        rc = cgroup_set_background(&b->sandbox.cgroup, false);
                if (rc < 0) {
                        log_warn("a sandbox made ahead is removed: %s (its cgroup)", strerror(-rc));
                        spawn_box_unmake(b, false);
                        return NULL;
                }
                b->sandbox.limits = req->limits;
                snprintf(b->id, sizeof(b->id), "%s", req->sandbox_id);
                stock.failures = 0;
                if (jp_share_took(&stock.share, req->tenant) < 0)
                        log_warn("a sandbox made ahead taken by %s, not counted (out of memory)",
                                 req->tenant);
                return b;
        }
        return NULL;
}

/* The first of the stock's sandboxes no zygote was yet asked to fork a
 * kernel's process into, now that one could be: those made before any
 * kernel had come from a zygote (the first stock is made while the first
 * zygote still imports). NULL: none. */
static struct box *without_process(void)
{
        if (!spawn_last_zygote()[0])
                return NULL;
        for (unsigned i = 0; i < stock.n; i++) {
                if (!stock.ready[i]->ahead_asked)
                        return stock.ready[i];
        }
        return NULL;
}

/* Asks the zygote the last kernel came from to fork a kernel's process
 * ahead into b, once: a sandbox without one serves as well. */
static void fork_ahead(struct box *b)
{
        b->ahead_asked = spawn_last_zygote()[0] != '\0';
        if (b->ahead_asked && zygote_ahead(spawn_last_zygote(), &b->sandbox, &b->ahead) < 0)
                log_debug("%s: made ahead without its kernel's process", b->id);
}

int stock_due_ms(void)
{
        uint64_t now;

        if (stock.nstale == 0 && (!stock.shaped || stock.n >= stock.want) && !without_process())
                return -1;
        now = now_ms();
        return stock.due_ms <= now ? 0 : (int)(stock.due_ms - now);
}

void stock_busy(void)
{
        uint64_t quiet = now_ms() + QUIET_MS;

        if (stock.due_ms < quiet)
                stock.due_ms = quiet;
}

void stock_fill(void)
{
        struct hostmsg_sandbox shape = {.sandbox = true};
        struct hostmsg_failed fail = {0};
        char id[JP_UUID_SIZE];
        struct box *b;

        if (stock_due_ms() != 0)
                return;
        if (stock.nstale > 0) {
                spawn_box_unmake(stock.stale[--stock.nstale], false);
                return;
        }
        b = without_process();
        if (b) {
                fork_ahead(b);
                return;
        }
        if (!stock.shaped || stock.n >= stock.want)
                return;
        shape.limits = stock.limits;
        shape.ro_paths = stock.ro_paths;
        snprintf(id, sizeof(id), "stock-%u", ++stock.made);
        if (spawn_box_make(&shape, id, &b, &fail) < 0) {
                back_off("a sandbox made ahead failed", fail.message);
                return;
        }
        /* Idle until claimed: no CPU taken from what runs. */
        if (cgroup_set_background(&b->sandbox.cgroup, true) < 0) {
                spawn_box_unmake(b, false);
                back_off("a sandbox made ahead failed", "its cgroup's CPU weight");
                return;
        }
        /* Its kernel's fork too, from the zygote the last kernel came
         * from; before any kernel has, later (without_process). */
        fork_ahead(b);
        stock.ready[stock.n++] = b;
        if (stock.n >= stock.want)
                jp_share_reset(&stock.share);
}

bool stock_reaped(pid_t pid)
{
        for (unsigned i = 0; i < stock.nstale; i++) {
                if (stock.stale[i]->sandbox.init_pid == pid) {
                        spawn_box_unmake(take(stock.stale, &stock.nstale, i), true);
                        return true;
                }
        }
        for (unsigned i = 0; i < stock.n; i++) {
                if (stock.ready[i]->sandbox.init_pid != pid)
                        continue;
                spawn_box_unmake(take(stock.ready, &stock.n, i), true);
                back_off("a sandbox made ahead ended", "its init died");
                return true;
        }
        return false;
}

void stock_stop_all(void)
{
        drop_all();
        jp_strv_free(stock.ro_paths);
        stock.ro_paths = NULL;
        stock.shaped = false;
        jp_share_free(&stock.share);
}
