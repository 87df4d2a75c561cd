#include "autoconf.h"

#include "gateway/e2b/list.h"
#include "protocol/buf.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A token's parts: "<time>__<id>", and "__asc" for a page oldest first
 * (E2B's form; its default order keeps the two-part form). */
#define TOKEN_SEPARATOR "__"
#define TOKEN_ASC       "asc"

void e2b_list_query_init(struct e2b_list_query *q)
{
        memset(q, 0, sizeof(*q));
        q->running = q->paused = true;
        q->order = E2B_LIST_NEWEST_FIRST;
        q->limit = E2B_LIST_LIMIT_MAX;
}

void e2b_list_query_clear(struct e2b_list_query *q)
{
        json_decref(q->metadata);
        q->metadata = NULL;
}

/* ---- times ------------------------------------------------------------------ */

static bool digits(const char *p, int n, int *out)
{
        int v = 0;

        for (int i = 0; i < n; i++) {
                if (!isdigit((unsigned char)p[i]))
                        return false;
                v = v * 10 + (p[i] - '0');
        }
        *out = v;
        return true;
}

int e2b_time_parse(const char *text, int64_t *us)
{
        int year, month, day, hour, minute, second, offset = 0;
        int64_t frac = 0, scale = 1000000;
        const char *p = text;
        struct tm tm;
        time_t t;

        if (strlen(text) < 20 || !digits(p, 4, &year) || p[4] != '-' || !digits(p + 5, 2, &month) ||
            p[7] != '-' || !digits(p + 8, 2, &day) || (p[10] != 'T' && p[10] != 't') ||
            !digits(p + 11, 2, &hour) || p[13] != ':' || !digits(p + 14, 2, &minute) ||
            p[16] != ':' || !digits(p + 17, 2, &second))
                return -EINVAL;
        p += 19;
        if (*p == '.') {
                if (!isdigit((unsigned char)p[1]))
                        return -EINVAL;
                for (p++; isdigit((unsigned char)*p); p++) {
                        if (scale > 1) {
                                scale /= 10;
                                frac += (*p - '0') * scale;
                        }
                }
        }
        if (*p == 'Z' || *p == 'z') {
                p++;
        } else if (*p == '+' || *p == '-' || *p == ' ') {
                /* A '+' that came unencoded in a query is a space by now. */
                int oh, om;

                if (!digits(p + 1, 2, &oh) || p[3] != ':' || !digits(p + 4, 2, &om) || oh > 23 ||
                    om > 59)
                        return -EINVAL;
                offset = (oh * 60 + om) * 60 * (*p == '-' ? -1 : 1);
                p += 6;
        } else {
                return -EINVAL;
        }
        if (*p || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 ||
            second > 60)
                return -EINVAL;
        memset(&tm, 0, sizeof(tm));
        tm.tm_year = year - 1900;
        tm.tm_mon = month - 1;
        tm.tm_mday = day;
        tm.tm_hour = hour;
        tm.tm_min = minute;
        tm.tm_sec = second;
        t = timegm(&tm);
        *us = ((int64_t)t - offset) * 1000000 + frac;
        return 0;
}

void e2b_time_format(int64_t us, char out[32])
{
        time_t t = (time_t)(us >= 0 ? us / 1000000 : (us - 999999) / 1000000);
        long micro = (long)(us - (int64_t)t * 1000000);
        struct tm tm;
        char head[24];

        gmtime_r(&t, &tm);
        strftime(head, sizeof(head), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(out, 32, "%.19s.%06ldZ", head, micro);
}

/* ---- the query ---------------------------------------------------------------- */

/* Go's url.QueryUnescape, which E2B's metadata parser applies: '+' is a
 * space, '%' takes two hex digits. len bytes of in into out (NUL-ended);
 * -EINVAL on a bad escape. */
static int unescape(const char *in, size_t len, char *out, size_t size)
{
        size_t o = 0;

        for (size_t i = 0; i < len; i++) {
                char c = in[i];

                if (o + 1 >= size)
                        return -EINVAL;
                if (c == '%') {
                        char hex[3];

                        if (i + 2 >= len || !isxdigit((unsigned char)in[i + 1]) ||
                            !isxdigit((unsigned char)in[i + 2]))
                                return -EINVAL;
                        hex[0] = in[i + 1];
                        hex[1] = in[i + 2];
                        hex[2] = '\0';
                        c = (char)strtol(hex, NULL, 16);
                        i += 2;
                } else if (c == '+') {
                        c = ' ';
                }
                out[o++] = c;
        }
        out[o] = '\0';
        return 0;
}

/* E2B's metadata query: the value (decoded once already, by HTTP) is
 * unescaped whole, split into "key=value" pairs at '&', and each key and
 * value unescaped again. The SDKs escape each key and value before
 * joining them, so an '&' or '=' of theirs survives the split. */
static int parse_metadata(struct e2b_list_query *q, const char *value, char *err, size_t errlen)
{
        char *whole = malloc(E2B_LIST_ARG_MAX + 1), *part = malloc(E2B_LIST_ARG_MAX + 1);
        json_t *filters = json_object();
        size_t pairs = 0;
        int rc = -EINVAL;

        if (!whole || !part || !filters) {
                snprintf(err, errlen, "out of memory");
                goto out;
        }
        if (unescape(value, strlen(value), whole, E2B_LIST_ARG_MAX + 1) < 0) {
                snprintf(err, errlen, "Error parsing metadata: a bad %%-escape");
                goto out;
        }
        for (const char *p = whole;; p++) {
                size_t n = strcspn(p, "&");
                const char *eq = memchr(p, '=', n);
                char key[E2B_LIST_ARG_MAX + 1];

                if (!eq || memchr(eq + 1, '=', n - (size_t)(eq - p) - 1)) {
                        snprintf(err, errlen,
                                 "Error parsing metadata: \"%.*s\" is not one key=value pair",
                                 (int)(n > 64 ? 64 : n), p);
                        goto out;
                }
                if (++pairs > E2B_LIST_FILTERS_MAX) {
                        snprintf(err, errlen, "Error parsing metadata: more than %d pairs",
                                 E2B_LIST_FILTERS_MAX);
                        goto out;
                }
                if (unescape(p, (size_t)(eq - p), key, sizeof(key)) < 0 ||
                    unescape(eq + 1, n - (size_t)(eq - p) - 1, part, E2B_LIST_ARG_MAX + 1) < 0) {
                        snprintf(err, errlen, "Error parsing metadata: a bad %%-escape");
                        goto out;
                }
                if (json_object_set_new(filters, key, json_string(part)) < 0) {
                        snprintf(err, errlen, "Error parsing metadata: not UTF-8");
                        goto out;
                }
                if (!p[n])
                        break;
                p += n;
        }
        json_decref(q->metadata);
        q->metadata = filters;
        filters = NULL;
        rc = 0;
out:
        json_decref(filters);
        free(whole);
        free(part);
        return rc;
}

static int parse_states(struct e2b_list_query *q, const char *value, char *err, size_t errlen)
{
        if (!q->states_given) {
                q->running = q->paused = false;
                q->states_given = true;
        }
        for (const char *p = value;; p++) {
                size_t n = strcspn(p, ",");

                if (n == 7 && strncmp(p, "running", 7) == 0) {
                        q->running = true;
                } else if (n == 6 && strncmp(p, "paused", 6) == 0) {
                        q->paused = true;
                } else {
                        snprintf(err, errlen, "state \"%.*s\" is not one of running, paused",
                                 (int)(n > 32 ? 32 : n), p);
                        return -EINVAL;
                }
                if (!p[n])
                        return 0;
                p += n;
        }
}

static int parse_limit(struct e2b_list_query *q, const char *value, char *err, size_t errlen)
{
        long v = 0;
        size_t n = strlen(value);

        if (n == 0 || n > 6 || strspn(value, "0123456789") != n ||
            (v = strtol(value, NULL, 10)) < 1 || v > E2B_LIST_LIMIT_MAX) {
                snprintf(err, errlen, "limit must be a whole number from 1 to %d (\"%.16s\")",
                         E2B_LIST_LIMIT_MAX, value);
                return -EINVAL;
        }
        q->limit = (int)v;
        return 0;
}

/* A token: base64url of "<RFC 3339 time>__<id>[__asc]". */
static int parse_token(struct e2b_list_query *q, const char *value)
{
        struct buf raw;
        size_t n;
        char *sep, *id, *tail;
        int rc = -EINVAL;

        q->has_cursor = false;
        if (!*value)
                return 0; /* an empty token is none, as E2B's */
        /* base64url (or base64), padding only at its end */
        n = strspn(value, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/");
        if (strlen(value) > E2B_LIST_TOKEN_MAX || strspn(value + n, "=") != strlen(value + n) ||
            strlen(value + n) > 2)
                return -EINVAL;
        buf_init(&raw, E2B_LIST_TOKEN_MAX);
        if (buf_append_unbase64(&raw, value) < 0 || !raw.data || strlen(raw.data) != raw.len)
                goto out;
        sep = strstr(raw.data, TOKEN_SEPARATOR);
        if (!sep)
                goto out;
        *sep = '\0';
        id = sep + strlen(TOKEN_SEPARATOR);
        tail = strstr(id, TOKEN_SEPARATOR);
        q->cursor_oldest_first = false;
        if (tail) {
                *tail = '\0';
                tail += strlen(TOKEN_SEPARATOR);
                if (strcmp(tail, TOKEN_ASC) != 0)
                        goto out;
                q->cursor_oldest_first = true;
        }
        if (!*id || strlen(id) >= sizeof(q->cursor_id) ||
            strspn(id, "abcdefghijklmnopqrstuvwxyz"
                       "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                       "0123456789-") != strlen(id) ||
            e2b_time_parse(raw.data, &q->cursor_us) < 0)
                goto out;
        snprintf(q->cursor_id, sizeof(q->cursor_id), "%s", id);
        q->has_cursor = true;
        rc = 0;
out:
        buf_free(&raw);
        return rc;
}

int e2b_list_query_set(struct e2b_list_query *q, const char *name, const char *value, char *err,
                       size_t errlen)
{
        if (strcmp(name, "metadata") == 0)
                return parse_metadata(q, value, err, errlen);
        if (strcmp(name, "state") == 0)
                return parse_states(q, value, err, errlen);
        if (strcmp(name, "limit") == 0)
                return parse_limit(q, value, err, errlen);
        if (strcmp(name, "order") == 0) {
                if (strcmp(value, "asc") == 0 || strcmp(value, "desc") == 0) {
                        q->order = value[0] == 'a' ? E2B_LIST_OLDEST_FIRST : E2B_LIST_NEWEST_FIRST;
                        return 0;
                }
                snprintf(err, errlen, "Invalid order parameter: \"%.16s\" is not asc or desc",
                         value);
                return -EINVAL;
        }
        if (strcmp(name, "startedAfter") == 0) {
                if (e2b_time_parse(value, &q->started_after_us) == 0) {
                        q->has_started_after = true;
                        return 0;
                }
                snprintf(err, errlen, "startedAfter \"%.40s\" is not an RFC 3339 time", value);
                return -EINVAL;
        }
        if (strcmp(name, "template") == 0) {
                /* A sandbox records its template, not a tag of it (E2B's
                 * answer too); a namespace ("team/name") names the same
                 * template here: Glovebox has one namespace. */
                const char *slash = strrchr(value, '/');

                if (strchr(value, ':')) {
                        snprintf(err, errlen,
                                 "Invalid template: tags are not supported here because "
                                 "sandboxes are not tag-scoped");
                        return -EINVAL;
                }
                if (slash)
                        value = slash + 1;
                if (!*value || strlen(value) >= sizeof(q->template_name)) {
                        snprintf(err, errlen, "Invalid template: a name of 1 to %d characters",
                                 E2B_LIST_TEMPLATE_MAX - 1);
                        return -EINVAL;
                }
                snprintf(q->template_name, sizeof(q->template_name), "%s", value);
                return 0;
        }
        if (strcmp(name, "nextToken") == 0) {
                /* Its order is checked once every argument is in. */
                if (parse_token(q, value) < 0) {
                        snprintf(err, errlen, "Invalid next token");
                        return -EINVAL;
                }
                return 0;
        }
        return 0;
}

int e2b_list_query_check(const struct e2b_list_query *q, char *err, size_t errlen)
{
        if (q->has_cursor && q->cursor_oldest_first != (q->order == E2B_LIST_OLDEST_FIRST)) {
                snprintf(err, errlen,
                         "Invalid next token: it was made for the other order (order=%s)",
                         q->cursor_oldest_first ? "asc" : "desc");
                return -EINVAL;
        }
        return 0;
}

/* ---- matching and order ---------------------------------------------------------- */

int e2b_list_compare(const struct e2b_list_query *q, int64_t a_us, const char *a_id, int64_t b_us,
                     const char *b_id)
{
        int c = a_us == b_us ? strcmp(a_id, b_id) : a_us > b_us ? -1 : 1;

        return q->order == E2B_LIST_NEWEST_FIRST ? c : -c;
}

bool e2b_list_matches(const struct e2b_list_query *q, const struct e2b_list_entry *e)
{
        const char *key;
        json_t *want;

        if (!(e->paused ? q->paused : q->running))
                return false;
        if (q->template_name[0] && strcmp(q->template_name, e->template_name) != 0)
                return false;
        if (q->has_started_after && e->started_us < q->started_after_us)
                return false;
        json_object_foreach(q->metadata, key, want) {
                json_t *have = json_object_get(e->metadata, key);

                if (!json_is_string(have) ||
                    strcmp(json_string_value(have), json_string_value(want)) != 0)
                        return false;
        }
        return !q->has_cursor ||
               e2b_list_compare(q, q->cursor_us, q->cursor_id, e->started_us, e->id) < 0;
}

int e2b_list_token(const struct e2b_list_query *q, int64_t us, const char *id, char *out,
                   size_t size)
{
        char when[32], raw[E2B_LIST_ID_MAX + 64];
        struct buf b;
        int rc;

        e2b_time_format(us, when);
        snprintf(raw, sizeof(raw), "%s" TOKEN_SEPARATOR "%.*s%s", when, E2B_LIST_ID_MAX - 1, id,
                 q->order == E2B_LIST_OLDEST_FIRST ? TOKEN_SEPARATOR TOKEN_ASC : "");
        buf_init(&b, size - 1);
        rc = buf_append_base64(&b, (const uint8_t *)raw, strlen(raw));
        if (rc == 0) {
                /* base64url, as E2B's tokens: nothing to escape in a query. */
                for (size_t i = 0; i < b.len; i++)
                        b.data[i] = b.data[i] == '+' ? '-' : b.data[i] == '/' ? '_' : b.data[i];
                snprintf(out, size, "%s", b.data);
        }
        buf_free(&b);
        return rc;
}

struct keyed {
        int64_t us;
        const char *id;
        json_t *item;
};

static const struct e2b_list_query *sorting; /* qsort has no context argument */

static int compare_keyed(const void *a, const void *b)
{
        const struct keyed *x = a, *y = b;

        return e2b_list_compare(sorting, x->us, x->id, y->us, y->id);
}

int e2b_list_finish(const struct e2b_list_query *q, json_t *page, char *next, size_t size)
{
        size_t n = 0, count = json_array_size(page), keep;
        struct keyed *keys = calloc(count + 1, sizeof(*keys));
        json_t *item;
        size_t i;
        int rc = 0;

        next[0] = '\0';
        if (!keys)
                return -ENOMEM;
        json_array_foreach(page, i, item) {
                const char *id = json_string_value(json_object_get(item, "sandboxID"));
                const char *at = json_string_value(json_object_get(item, "startedAt"));

                if (id && at && e2b_time_parse(at, &keys[n].us) == 0) {
                        keys[n].id = id;
                        keys[n++].item = json_incref(item);
                }
        }
        sorting = q;
        qsort(keys, n, sizeof(*keys), compare_keyed);
        sorting = NULL;
        keep = q->limit > 0 && n > (size_t)q->limit ? (size_t)q->limit : n;
        if (keep < n)
                rc = e2b_list_token(q, keys[keep - 1].us, keys[keep - 1].id, next, size);
        json_array_clear(page);
        for (i = 0; i < n; i++) {
                if (i < keep)
                        json_array_append(page, keys[i].item);
                json_decref(keys[i].item);
        }
        free(keys);
        return rc;
}
