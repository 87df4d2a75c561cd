#include "autoconf.h"

#include "gateway/core/access_log.h"
#include "protocol/log.h"

#include <string.h>
#include <time.h>

enum access_log_mode { ACCESS_LOG_ALL, ACCESS_LOG_ERRORS, ACCESS_LOG_OFF };

static enum access_log_mode mode = ACCESS_LOG_ALL;
/* One limit for every failed authentication: a client that guesses keys
 * from many addresses is still one flood. */
static struct log_limit auth_failures;

void access_log_init(const char *name)
{
        if (strcmp(name, "off") == 0)
                mode = ACCESS_LOG_OFF;
        else if (strcmp(name, "errors") == 0)
                mode = ACCESS_LOG_ERRORS;
        else
                mode = ACCESS_LOG_ALL;
}

double access_log_now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void access_log_write(struct lws *wsi, const struct access_record *a)
{
        const char *tenant = a->tenant && a->tenant[0] ? a->tenant : "-";
        double seconds = a->started > 0 ? access_log_now() - a->started : 0;
        char peer[64] = "-";

        if (seconds < 0)
                seconds = 0;
        if (a->status == 401) {
                /* Behind a proxy this is the proxy's address: its own log
                 * has the client's. */
                if (wsi)
                        lws_get_peer_simple(wsi, peer, sizeof(peer));
                log_warn_limited(&auth_failures, "authentication failed: %s %s from %s", a->method,
                                 a->route, peer[0] ? peer : "-");
        }
        if (mode == ACCESS_LOG_OFF || (mode == ACCESS_LOG_ERRORS && a->status < 400))
                return;
        log_access(a->method, a->route, a->status, a->bytes_in, a->bytes_out, seconds, tenant);
}
