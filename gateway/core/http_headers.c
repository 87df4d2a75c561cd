/* The parts of a request that libwebsockets gives only partly: headers
 * whose names the gateway does not know in advance (E2B's
 * X-Metadata-<key>), and query arguments of any length. libwebsockets
 * keeps unknown headers in a list of its own, and only from 4.3 on lets a
 * program walk it (lws_hdr_custom_name_foreach); before, a header is
 * found by its exact name only. */
#include "autoconf.h"

#include "gateway/core/http.h"
#include "gateway/core/server.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct found {
        const char *prefix;
        http_header_fn fn;
        void *arg;
        struct lws *wsi;
        json_t *seen; /* names already handed over */
        int rc;
};

/* name: lower case, ending in ':' (as libwebsockets keeps it), nlen bytes.
 * Handed over once, and only when libwebsockets itself has it. */
static void consider(struct found *f, const char *name, size_t nlen)
{
        static char value[SERVER_MAX_HEADER_DATA], key[SERVER_MAX_HEADER_DATA + 1];
        int n;

        if (f->rc != 0 || nlen < 2 || nlen > SERVER_MAX_HEADER_DATA || name[nlen - 1] != ':' ||
            strncmp(name, f->prefix, strlen(f->prefix)) != 0)
                return;
        memcpy(key, name, nlen);
        key[nlen] = '\0';
        if (json_object_get(f->seen, key))
                return;
        n = lws_hdr_custom_copy(f->wsi, value, sizeof(value), key, (int)nlen);
        if (n < 0)
                return;
        json_object_set_new(f->seen, key, json_true());
        key[nlen - 1] = '\0';
        f->rc = f->fn(key, value, f->arg);
}

#if LWS_LIBRARY_VERSION_MAJOR > 4 ||                                                               \
    (LWS_LIBRARY_VERSION_MAJOR == 4 && LWS_LIBRARY_VERSION_MINOR >= 3)
static void on_name(const char *name, int nlen, void *arg)
{
        consider(arg, name, (size_t)nlen);
}

static void walk(struct found *f)
{
        lws_hdr_custom_name_foreach(f->wsi, on_name, f);
}
#else
/* libwebsockets 4.1 and 4.2 (Debian 12 has 4.1.6) keep every header of a
 * request in one buffer of SERVER_MAX_HEADER_DATA bytes (the context's
 * max_http_header_data), the request line's URI first, at its start (the
 * parser begins at 0 and drops the method's name once it knows it). The
 * buffer is searched for names with the prefix; each is then asked of
 * libwebsockets by its exact name (consider), so a name that is only in
 * an earlier request's leftovers, or in another header's value, is never
 * taken. HTTP/2 streams (which TLS does not offer: server.c) keep their
 * headers otherwise: none is found there. */
static void walk(struct found *f)
{
        size_t plen = strlen(f->prefix);
        const char *base;
        char *uri;
        int len;

        if (lws_get_network_wsi(f->wsi) != f->wsi ||
            lws_http_get_uri_and_method(f->wsi, &uri, &len) < 0 || !uri)
                return;
        base = uri;
        for (size_t at = 0; at + plen < SERVER_MAX_HEADER_DATA && f->rc == 0; at++) {
                size_t n = plen;

                if (memcmp(base + at, f->prefix, plen) != 0)
                        continue;
                while (at + n < SERVER_MAX_HEADER_DATA && base[at + n] > ' ' &&
                       base[at + n] < 0x7f && base[at + n] != ':')
                        n++;
                if (at + n < SERVER_MAX_HEADER_DATA && base[at + n] == ':')
                        consider(f, base + at, n + 1);
        }
}
#endif

int http_custom_headers(struct http_request *r, const char *prefix, http_header_fn fn, void *arg)
{
        struct found f = {.prefix = prefix, .fn = fn, .arg = arg, .wsi = r->wsi};

        f.seen = json_object();
        if (!f.seen)
                return -ENOMEM;
        walk(&f);
        json_decref(f.seen);
        return f.rc;
}

int http_query_arg(struct lws *wsi, const char *name, char *out, size_t size)
{
        /* Any argument fits: they are all within the request's headers. */
        static char fragment[SERVER_MAX_HEADER_DATA];
        size_t n = strlen(name), vlen;

        for (int i = 0; lws_hdr_copy_fragment(wsi, fragment, sizeof(fragment),
                                              WSI_TOKEN_HTTP_URI_ARGS, i) >= 0;
             i++) {
                if (strncmp(fragment, name, n) != 0 || fragment[n] != '=')
                        continue;
                vlen = strlen(fragment + n + 1);
                if (vlen >= size)
                        return -E2BIG;
                memcpy(out, fragment + n + 1, vlen + 1);
                return 0;
        }
        return -ENOENT;
}
