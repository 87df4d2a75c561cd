/* gateway/e2b/list.c: E2B's list query read and refused as E2B reads and
 * refuses it (the metadata filter as the SDKs encode it, limits, states,
 * orders, times, templates, tokens), and keyset pages that neither repeat
 * nor skip a sandbox when others come and go between pages. */
#include "gateway/e2b/list.h"

#include "tests/unit/tap.h"

#include <errno.h>

static int set(struct e2b_list_query *q, const char *name, const char *value)
{
        char err[256];

        return e2b_list_query_set(q, name, value, err, sizeof(err));
}

static void test_times(void)
{
        int64_t us = 0;

        is_int(e2b_time_parse("2026-01-02T03:04:05Z", &us), 0, "a time in UTC");
        is_int(us, 1767323045LL * 1000000, "... its microseconds");
        is_int(e2b_time_parse("2026-01-02T03:04:05.1234569Z", &us), 0, "nanoseconds");
        is_int(us, 1767323045LL * 1000000 + 123456, "... past the microsecond dropped");
        is_int(e2b_time_parse("2026-01-02T04:04:05+01:00", &us), 0, "an offset");
        is_int(us, 1767323045LL * 1000000, "... the same instant");
        is_int(e2b_time_parse("2026-01-02T04:04:05 01:00", &us), 0, "a '+' a query made a space");
        {
                const char *bad[] = {"2026-01-02",
                                     "2026-01-02T03:04:05",
                                     "2026-13-02T03:04:05Z",
                                     "2026-01-02T03:04:05.Z",
                                     "2026-01-02T03:04:05Zjunk",
                                     "yesterday",
                                     ""};

                for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                        is_int(e2b_time_parse(bad[i], &us), -EINVAL, "refused: \"%s\"", bad[i]);
        }
        {
                char text[32];

                e2b_time_format(1767323045LL * 1000000 + 7, text);
                is_str(text, "2026-01-02T03:04:05.000007Z", "formatted to the microsecond");
        }
}

static void test_arguments(void)
{
        struct e2b_list_query q;
        char err[256];

        e2b_list_query_init(&q);
        ok(q.running && q.paused && q.limit == E2B_LIST_LIMIT_MAX &&
               q.order == E2B_LIST_NEWEST_FIRST,
           "by default: both states, newest first, a page of %d", E2B_LIST_LIMIT_MAX);
        is_int(set(&q, "limit", "100"), 0, "limit 100");
        is_int(q.limit, 100, "... read");
        is_int(set(&q, "limit", "1"), 0, "limit 1");
        is_int(set(&q, "limit", "101"), -EINVAL, "limit 101 refused (E2B's maximum is 100)");
        is_int(set(&q, "limit", "1000000000000"), -EINVAL, "a huge limit refused");
        is_int(set(&q, "limit", "0"), -EINVAL, "limit 0 refused");
        is_int(set(&q, "limit", "-5"), -EINVAL, "a negative limit refused");
        is_int(set(&q, "limit", "ten"), -EINVAL, "a word refused");
        is_int(q.limit, 1, "a refused limit changes nothing");
        is_int(set(&q, "state", "paused"), 0, "state paused");
        ok(q.paused && !q.running, "... paused alone");
        is_int(set(&q, "state", "running"), 0, "another state argument");
        ok(q.paused && q.running, "... adds to the first");
        is_int(set(&q, "state", "running,dead"), -EINVAL, "an unknown state refused");
        is_int(set(&q, "order", "asc"), 0, "order asc");
        is_int(q.order, E2B_LIST_OLDEST_FIRST, "... oldest first");
        is_int(set(&q, "order", "up"), -EINVAL, "an unknown order refused");
        is_int(set(&q, "template", "team/my-template"), 0, "a namespaced template");
        is_str(q.template_name, "my-template", "... its name");
        is_int(e2b_list_query_set(&q, "template", "base:v2", err, sizeof(err)), -EINVAL,
               "a tagged template refused");
        ok(strstr(err, "tags are not supported") != NULL, "... saying why: %s", err);
        is_int(set(&q, "startedAfter", "2026-01-02T03:04:05Z"), 0, "startedAfter");
        is_int(set(&q, "startedAfter", "soon"), -EINVAL, "a startedAfter that is no time");
        is_int(set(&q, "whatever", "x"), 0, "an unknown argument ignored, as E2B ignores it");
        e2b_list_query_clear(&q);
}

static void test_metadata(void)
{
        struct e2b_list_query q;
        char err[256], many[E2B_LIST_ARG_MAX];
        size_t n = 0;

        e2b_list_query_init(&q);
        /* The Python SDK's {"who": "alice & co=1"}: each value quoted, the
         * pairs urlencoded, the whole a query value (which HTTP decoded). */
        is_int(set(&q, "metadata", "who=alice%2520%2526%2520co%253D1"), 0, "the SDKs' encoding");
        is_str(json_string_value(json_object_get(q.metadata, "who")), "alice & co=1",
               "... decoded as E2B decodes it");
        is_int(set(&q, "metadata", "sandbox_test_id=0f3c9a1e-3b4f-4c2d-9e8f-1a2b3c4d5e6f&b=2"), 0,
               "two pairs");
        is_int((int)json_object_size(q.metadata), 2, "... both, the first filter replaced");
        is_int(e2b_list_query_set(&q, "metadata", "a", err, sizeof(err)), -EINVAL,
               "no '=' refused");
        ok(strstr(err, "Error parsing metadata") != NULL, "... saying so: %s", err);
        is_int(set(&q, "metadata", "a=b=c"), -EINVAL, "two '=' refused");
        is_int(set(&q, "metadata", ""), -EINVAL, "an empty filter refused, as E2B's");
        is_int(set(&q, "metadata", "a=%zz"), -EINVAL, "a bad escape refused");
        is_int(set(&q, "metadata", "a=%2"), -EINVAL, "a cut escape refused");
        while (n + 8 < sizeof(many) && n / 6 <= E2B_LIST_FILTERS_MAX)
                n += (size_t)snprintf(many + n, sizeof(many) - n, "%s%03zu=v", n ? "&" : "", n / 6);
        is_int(set(&q, "metadata", many), -EINVAL, "more than %d pairs refused",
               E2B_LIST_FILTERS_MAX);
        is_int((int)json_object_size(q.metadata), 2, "a refused filter changes nothing");
        e2b_list_query_clear(&q);
}

static void test_tokens(void)
{
        struct e2b_list_query q, r;
        char token[E2B_LIST_TOKEN_MAX + 1], err[256], big[E2B_LIST_TOKEN_MAX + 8];

        e2b_list_query_init(&q);
        is_int(
            e2b_list_token(&q, 1767323045LL * 1000000 + 42, "gbabc0000def", token, sizeof(token)),
            0, "a token made");
        ok(strspn(token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=") ==
               strlen(token),
           "... of base64url: nothing to escape in a query");
        e2b_list_query_init(&r);
        is_int(set(&r, "nextToken", token), 0, "... read back");
        ok(r.has_cursor && r.cursor_us == 1767323045LL * 1000000 + 42 &&
               strcmp(r.cursor_id, "gbabc0000def") == 0,
           "... the same place");
        is_int(e2b_list_query_check(&r, err, sizeof(err)), 0, "... for the same order");
        is_int(set(&r, "order", "asc"), 0, "the other order asked");
        is_int(e2b_list_query_check(&r, err, sizeof(err)), -EINVAL, "... refused with the token");
        ok(strstr(err, "Invalid next token") != NULL, "... saying so: %s", err);
        e2b_list_query_clear(&r);
        e2b_list_query_init(&r);
        {
                /* not base64; "garbage"; a time and id with junk after */
                const char *bad[] = {"garbage!",
                                     "Z2FyYmFnZQ==", "MjAyNi0wMS0wMlQwMzowNDowNVpfX2dieA==xx"};

                for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                        is_int(set(&r, "nextToken", bad[i]), -EINVAL, "refused: %s", bad[i]);
        }
        memset(big, 'A', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        is_int(set(&r, "nextToken", big), -EINVAL, "a token over %d bytes refused",
               E2B_LIST_TOKEN_MAX);
        is_int(set(&r, "nextToken", ""), 0, "an empty token is none");
        ok(!r.has_cursor, "... no cursor");
        e2b_list_query_clear(&r);
        e2b_list_query_clear(&q);
}

/* The sandboxes of a test of pages: ids and start times (seconds). */
struct box {
        char id[16];
        int64_t t;
        bool gone;
};

/* One page of boxes for q (limit 2), as the gateway makes it: the
 * matches in order, cut to the limit, the token from the last. Appends
 * the ids to seen; returns whether a next page exists. */
static bool page(struct e2b_list_query *q, struct box *boxes, size_t n, char *seen, char *next)
{
        json_t *list = json_array();
        size_t i;
        json_t *item;

        for (i = 0; i < n; i++) {
                struct e2b_list_entry e = {.id = boxes[i].id,
                                           .template_name = "base",
                                           .started_us = boxes[i].t * 1000000,
                                           .paused = false,
                                           .metadata = NULL};
                char at[32];

                e2b_time_format(e.started_us, at);
                if (!boxes[i].gone && e2b_list_matches(q, &e))
                        json_array_append_new(list, json_pack("{s:s, s:s}", "sandboxID",
                                                              boxes[i].id, "startedAt", at));
        }
        e2b_list_finish(q, list, next, E2B_LIST_TOKEN_MAX + 1);
        json_array_foreach(list, i, item) {
                size_t used = strlen(seen);

                snprintf(seen + used, 256 - used, "%s ",
                         json_string_value(json_object_get(item, "sandboxID")));
        }
        json_decref(list);
        return next[0] != '\0';
}

static void test_pages(void)
{
        struct box boxes[8] = {{"b1", 10, false},
                               {"b2", 20, false},
                               {"b3", 20, false},
                               {"b4", 30, false},
                               {"b5", 40, false}};
        char seen[256] = "", next[E2B_LIST_TOKEN_MAX + 1];
        struct e2b_list_query q;
        size_t n = 5;

        e2b_list_query_init(&q);
        set(&q, "limit", "2");
        ok(page(&q, boxes, n, seen, next), "first page, more to come");
        is_str(seen, "b5 b4 ", "newest first");
        /* Between pages: b4 (seen) and b3 (not yet) end, b6 starts. */
        boxes[3].gone = boxes[2].gone = true;
        boxes[n++] = (struct box){"b6", 50, false};
        e2b_list_query_clear(&q);
        e2b_list_query_init(&q);
        set(&q, "limit", "2");
        set(&q, "nextToken", next);
        ok(!page(&q, boxes, n, seen, next), "the second page is the last");
        is_str(seen, "b5 b4 b2 b1 ", "nothing repeated, nothing skipped but what ended");
        e2b_list_query_clear(&q);

        /* Oldest first, ties by id in reverse (E2B's exact reverse). */
        for (size_t i = 0; i < n; i++)
                boxes[i].gone = false;
        seen[0] = '\0';
        e2b_list_query_init(&q);
        set(&q, "limit", "2");
        set(&q, "order", "asc");
        while (page(&q, boxes, n, seen, next)) {
                e2b_list_query_clear(&q);
                e2b_list_query_init(&q);
                set(&q, "limit", "2");
                set(&q, "order", "asc");
                set(&q, "nextToken", next);
        }
        is_str(seen, "b1 b3 b2 b4 b5 b6 ", "oldest first, in pages of 2");
        e2b_list_query_clear(&q);
        seen[0] = '\0';
        e2b_list_query_init(&q);
        set(&q, "limit", "2");
        while (page(&q, boxes, n, seen, next)) {
                e2b_list_query_clear(&q);
                e2b_list_query_init(&q);
                set(&q, "limit", "2");
                set(&q, "nextToken", next);
        }
        is_str(seen, "b6 b5 b4 b2 b3 b1 ", "newest first, ties by id, in pages of 2");
        e2b_list_query_clear(&q);
}

static void test_finish_drops_what_it_cannot_order(void)
{
        struct e2b_list_query q;
        json_t *list = json_pack("[{s:s, s:s}, {s:s}, {s:s, s:s}]", "sandboxID", "a", "startedAt",
                                 "2026-01-02T03:04:05Z", "sandboxID", "b", "sandboxID", "c",
                                 "startedAt", "2026-01-02T03:04:06Z");
        char next[E2B_LIST_TOKEN_MAX + 1];

        e2b_list_query_init(&q);
        is_int(e2b_list_finish(&q, list, next, sizeof(next)), 0, "a peer's list finished");
        is_int((int)json_array_size(list), 2, "... the entry without a start time dropped");
        is_str(json_string_value(json_object_get(json_array_get(list, 0), "sandboxID")), "c",
               "... newest first");
        is_str(next, "", "... no next page");
        json_decref(list);
        e2b_list_query_clear(&q);
}

int main(void)
{
        test_times();
        test_arguments();
        test_metadata();
        test_tokens();
        test_pages();
        test_finish_drops_what_it_cannot_order();
        return done_testing();
}
