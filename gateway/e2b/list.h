/* E2B's list of sandboxes, GET /v2/sandboxes (and the older GET
 * /sandboxes): its query, read and checked whole before any sandbox is
 * looked at, and its pages.
 *
 * The query is E2B's: state (running, paused; comma-separated or repeated),
 * metadata (the SDKs' "k=v&k2=v2" with each key and value percent-encoded,
 * the whole encoded once more as a query value), template, startedAfter
 * (RFC 3339), order (desc, newest first, the default; or asc), limit (1 to
 * E2B_LIST_LIMIT_MAX) and nextToken. Anything malformed is refused with a
 * message naming it (the caller answers 400).
 *
 * Pages are keysets, as E2B's are: the sandboxes in order of start time
 * (then id), and a nextToken naming the last one given. The next page
 * starts after that one, wherever it now stands: a sandbox created or
 * removed between two pages neither repeats one nor hides another. A page
 * holds at most E2B_LIST_LIMIT_MAX sandboxes whatever is asked.
 *
 * No event loop and no HTTP here: the caller hands the query's arguments
 * over one by one (tests/unit/test-e2b-list.c drives it alone). */
#ifndef GLOVEBOX_E2B_LIST_H
#define GLOVEBOX_E2B_LIST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define E2B_LIST_LIMIT_MAX    100  /* E2B's largest page, and its default */
#define E2B_LIST_ARG_MAX      4096 /* one query argument, name and value, as it came */
#define E2B_LIST_ARGS_MAX     32   /* query arguments read */
#define E2B_LIST_FILTERS_MAX  64   /* metadata pairs (a sandbox has at most 64 keys) */
#define E2B_LIST_TEMPLATE_MAX 128  /* a template's name */
#define E2B_LIST_ID_MAX       64   /* a sandbox id in a token */
#define E2B_LIST_TOKEN_MAX    192  /* a nextToken, encoded */

enum e2b_list_order { E2B_LIST_NEWEST_FIRST, E2B_LIST_OLDEST_FIRST };

struct e2b_list_query {
        bool running, paused; /* the states listed */
        bool states_given;
        json_t *metadata;                          /* key -> value, each must match; NULL: any */
        char template_name[E2B_LIST_TEMPLATE_MAX]; /* "": any */
        bool has_started_after;
        int64_t started_after_us;
        enum e2b_list_order order;
        int limit;       /* 0: every sandbox, one page (the older GET /sandboxes) */
        bool has_cursor; /* a nextToken: the page starts after this one */
        int64_t cursor_us;
        char cursor_id[E2B_LIST_ID_MAX];
        bool cursor_oldest_first; /* the order the token was made for */
};

/* A sandbox as the list sees it. */
struct e2b_list_entry {
        const char *id;
        const char *template_name;
        int64_t started_us;
        bool paused;
        json_t *metadata;
};

/* A query of everything: both states, newest first, pages of
 * E2B_LIST_LIMIT_MAX. */
void e2b_list_query_init(struct e2b_list_query *q);
void e2b_list_query_clear(struct e2b_list_query *q);
/* Reads one argument of the query, name and value decoded once (as they
 * came over HTTP). Unknown names are ignored, as E2B ignores them. 0, or
 * -EINVAL with err naming what is wrong. */
int e2b_list_query_set(struct e2b_list_query *q, const char *name, const char *value, char *err,
                       size_t errlen);
/* Once every argument is read: a token must have been made for the order
 * asked (E2B refuses to replay one under the other). 0 or -EINVAL with
 * err. */
int e2b_list_query_check(const struct e2b_list_query *q, char *err, size_t errlen);

/* Whether e passes the query's filters and comes after its cursor. */
bool e2b_list_matches(const struct e2b_list_query *q, const struct e2b_list_entry *e);
/* Negative when (a_us, a_id) comes before (b_us, b_id) in the query's
 * order: newest first, ties by id ascending; oldest first is the exact
 * reverse. */
int e2b_list_compare(const struct e2b_list_query *q, int64_t a_us, const char *a_id, int64_t b_us,
                     const char *b_id);

/* Puts page, an array of E2B ListedSandbox objects ("sandboxID",
 * "startedAt"; a host's own and its peers' together), in the query's order
 * and keeps the first limit of them; when more were there, next gets the
 * token of the page after (else ""). An entry without a readable id or
 * start time is dropped. 0 or -ENOMEM. */
int e2b_list_finish(const struct e2b_list_query *q, json_t *page, char *next, size_t size);
/* The token of a page that starts after (us, id), into out. 0 or -E2BIG. */
int e2b_list_token(const struct e2b_list_query *q, int64_t us, const char *id, char *out,
                   size_t size);

/* An RFC 3339 time ("2026-01-02T03:04:05.123456Z", "...+01:00"; a
 * fraction's digits past the microsecond are dropped) as microseconds
 * since the epoch. 0 or -EINVAL. */
int e2b_time_parse(const char *text, int64_t *us);
/* Microseconds since the epoch as "2026-01-02T03:04:05.123456Z". */
void e2b_time_format(int64_t us, char out[32]);

#endif
