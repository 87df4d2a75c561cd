/* The checks of a request's headers that every route and WebSocket
 * upgrade goes through: the Host it names (DNS rebinding), its Origin
 * (another site's page), and its credentials (a key of tenants.h). */
#include "autoconf.h"

#include "gateway/core/http.h"
#include "gateway/core/config.h"
#include "gateway/core/hostcheck.h"
#include "gateway/core/tenants.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* The authority the client addressed: Host, or HTTP/2's :authority.
 * Returns its length; 0 when there is none; -E2BIG when it is longer than
 * any host name. */
static int request_authority(struct lws *wsi, char *out, size_t size)
{
        static const enum lws_token_indexes tokens[] = {WSI_TOKEN_HOST,
                                                        WSI_TOKEN_HTTP_COLON_AUTHORITY};

        for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
                int len = lws_hdr_total_length(wsi, tokens[i]);

                if (len <= 0)
                        continue;
                if ((size_t)len >= size || lws_hdr_copy(wsi, out, (int)size, tokens[i]) != len)
                        return -E2BIG;
                return len;
        }
        out[0] = '\0';
        return 0;
}

bool http_host_allowed(struct lws *wsi, char *name, size_t size)
{
        const struct config *cfg = config_get();
        char authority[HOSTCHECK_MAX];
        int len = request_authority(wsi, authority, sizeof(authority));

        name[0] = '\0';
        /* Browsers always send Host; a request without one (HTTP/1.0) is
         * not a page's, so not what this check is about. */
        if (len == 0)
                return true;
        if (len > 0 && hostcheck_allowed(authority, cfg->host, cfg->allow_host))
                return true;
        if (len < 0 || hostcheck_name(authority, name, size) < 0)
                snprintf(name, size, "(malformed)");
        return false;
}

/* A page elsewhere must not drive kernels with the user's credentials: an
 * Origin, when present, must be the gateway's own or one --allow-origin
 * names ('*' for any). "The gateway's own" is only as good as the Host
 * check before it: a rebound name's page is its own origin. */
enum http_origin_kind http_origin(struct lws *wsi, char *out, size_t size)
{
        const char *allowed = config_get()->allow_origin;
        char origin[HTTP_ORIGIN_MAX], host[HOSTCHECK_MAX];
        int len = lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN);
        const char *o, *p;
        size_t olen;

        if (len <= 0)
                return HTTP_ORIGIN_NONE;
        /* An Origin too long to read is still an Origin: never "none". */
        if ((size_t)len >= sizeof(origin) ||
            lws_hdr_copy(wsi, origin, sizeof(origin), WSI_TOKEN_ORIGIN) != len)
                return HTTP_ORIGIN_DENIED;
        o = strstr(origin, "://");
        if (o && request_authority(wsi, host, sizeof(host)) > 0 && strcasecmp(o + 3, host) == 0)
                return HTTP_ORIGIN_SAME;
        olen = strlen(origin);
        for (p = allowed; *p;) {
                const char *comma = strchr(p, ',');
                size_t n = comma ? (size_t)(comma - p) : strlen(p);

                while (n && *p == ' ') {
                        p++;
                        n--;
                }
                if ((n == 1 && *p == '*') || (n == olen && strncasecmp(p, origin, n) == 0)) {
                        if (out)
                                snprintf(out, size, "%s", origin);
                        return HTTP_ORIGIN_ALLOWED;
                }
                p = comma ? comma + 1 : p + n;
        }
        return HTTP_ORIGIN_DENIED;
}

void http_log_refused_host(const char *name)
{
        static time_t last;
        time_t now = time(NULL);

        /* A page can send these as fast as it likes: one line a minute. */
        if (now - last < 60)
                return;
        last = now;
        if (name[0] == '(')
                log_warn("refused a request with a malformed Host");
        else
                log_warn("refused a request for Host %s: not a name this gateway serves under "
                         "(a DNS rebinding page?); if it is yours, start with --allow-host %s",
                         name, name);
}

bool http_authorized_key(const char *key, size_t len)
{
        struct tenant_caller caller;

        if (!tenants_authenticate(key, len, &caller))
                return false;
        tenants_set_caller(&caller);
        return true;
}

bool http_authorized(struct lws *wsi)
{
        const struct config *cfg = config_get();
        char value[1024];
        const char *arg;
        bool ok = false;
        int n;

        if (cfg->no_auth)
                return http_authorized_key("", 0);
        n = lws_hdr_copy(wsi, value, sizeof(value), WSI_TOKEN_HTTP_AUTHORIZATION);
        if (n > 0) {
                const char *schemes[] = {"token ", "bearer "};

                for (size_t i = 0; i < 2; i++) {
                        size_t slen = strlen(schemes[i]);

                        if ((size_t)n > slen && strncasecmp(value, schemes[i], slen) == 0) {
                                ok = http_authorized_key(value + slen, (size_t)n - slen);
                                goto out;
                        }
                }
        }
        arg = lws_get_urlarg_by_name(wsi, "token=", value, sizeof(value));
        ok = arg && http_authorized_key(arg, strlen(arg));
out:
        explicit_bzero(value, sizeof(value));
        return ok;
}
