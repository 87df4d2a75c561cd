/* protocol/fleetid.c: ids that name their host, and reading the host back. */
#include "autoconf.h"

#include "protocol/fleetid.h"
#include "tests/unit/tap.h"

#include <errno.h>

#define NIDS 200

static void test_host_valid(void)
{
        ok(fleetid_host_valid("h1"), "h1 is a host id");
        ok(fleetid_host_valid("abc123"), "six characters are a host id");
        ok(!fleetid_host_valid("abc1234"), "seven are too many");
        ok(!fleetid_host_valid(""), "an empty host id is refused");
        ok(!fleetid_host_valid(NULL), "no host id is refused");
        ok(!fleetid_host_valid("H1"), "capitals are refused");
        ok(!fleetid_host_valid("h-1"), "a hyphen is refused");
        ok(!fleetid_host_valid("h.1"), "a dot is refused");
}

static void test_tag(void)
{
        char tag[FLEETID_TAG_LEN + 1];

        is_int(fleetid_tag("h1", tag), 0, "tag of h1");
        is_str(tag, "683100000000", "h1's tag is its ASCII in hex, padded with zeros");
        is_int(fleetid_tag("zz9999", tag), 0, "tag of a six-character host");
        is_str(tag, "7a7a39393939", "a six-character host fills the tag");
        is_int(fleetid_tag("a", tag), 0, "tag of a");
        is_str(tag, "610000000000", "a one-character host");
        is_int(fleetid_tag("H1", tag), -EINVAL, "no tag for an invalid host id");
}

static void test_uuid(void)
{
        static char ids[NIDS][JP_UUID_SIZE];
        size_t bad = 0, dups = 0, wrong_host = 0, wrong_prefix = 0;
        char host[FLEETID_HOST_MAX + 1];

        for (size_t i = 0; i < NIDS; i++) {
                char *u = ids[i];

                bad += fleetid_uuid("h1", u) != 0 || !jp_uuid_valid(u, strlen(u)) || u[14] != '4' ||
                       !strchr("89ab", u[19]);
                wrong_prefix += strncmp(u, "68310000-0000-", 14) != 0;
                wrong_host +=
                    fleetid_host_of(u, host, sizeof(host)) != 0 || strcmp(host, "h1") != 0;
                for (size_t j = 0; j < i; j++)
                        dups += strcmp(ids[j], u) == 0;
        }
        is_uint(bad, 0, "every tagged id is a canonical UUID 4");
        is_uint(wrong_prefix, 0, "every tagged id starts with the host's tag");
        is_uint(wrong_host, 0, "the host of every tagged id reads back");
        is_uint(dups, 0, "no two tagged ids are the same");

        is_int(fleetid_uuid("", ids[0]), 0, "no host: a plain UUID");
        ok(jp_uuid_valid(ids[0], strlen(ids[0])), "the plain UUID is canonical");
        is_int(fleetid_uuid("-", ids[0]), -EINVAL, "an invalid host makes no id");
}

static void test_sandbox(void)
{
        char id[FLEETID_SANDBOX_SIZE], host[FLEETID_HOST_MAX + 1];

        is_int(fleetid_sandbox("h2", id), 0, "sandbox id with a host");
        is_uint(strlen(id), FLEETID_SANDBOX_SIZE - 1, "30 characters");
        ok(strncmp(id, "gb683200000000", 14) == 0, "starts with gb and h2's tag: %s", id);
        is_int(fleetid_host_of(id, host, sizeof(host)), 0, "its host reads back");
        is_str(host, "h2", "the host is h2");
        is_int(fleetid_sandbox(NULL, id), 0, "sandbox id without a host");
        is_uint(strlen(id), 18, "gb and 16 hex digits, as before");
        is_int(fleetid_host_of(id, host, sizeof(host)), -ENOENT, "a single host's id names none");
}

static void test_host_of_refuses(void)
{
        char host[FLEETID_HOST_MAX + 1];

        is_int(fleetid_host_of("00000000-0000-4000-8000-000000000000", host, sizeof(host)), -ENOENT,
               "an all-zero tag names no host");
        is_int(fleetid_host_of("68006800-0000-4000-8000-000000000000", host, sizeof(host)), -ENOENT,
               "bytes after the padding are refused");
        is_int(fleetid_host_of("48310000-0000-4000-8000-000000000000", host, sizeof(host)), -ENOENT,
               "a capital in the tag names no host");
        is_int(fleetid_host_of("../../etc", host, sizeof(host)), -ENOENT, "not an id");
        is_int(fleetid_host_of("gb6831000000zz0011223344556677", host, sizeof(host)), -ENOENT,
               "a sandbox id with non-hex is refused");
        is_int(fleetid_host_of("68310000-0000-4000-8000-000000000000", host, 2), -ENOENT,
               "a host that does not fit the caller's buffer is refused");
}

static void test_short(void)
{
        char a[JP_UUID_SIZE], b[JP_UUID_SIZE], sa[FLEETID_SANDBOX_SIZE];

        is_str(fleetid_short("0123abcd-0000-4000-8000-00000000cafe").s, "0123abcd",
               "a single host's id: its first 8 characters, as before");
        is_str(fleetid_short("gb0123456789abcdef").s, "gb012345",
               "a single host's sandbox id: its first 8 characters");
        is_str(fleetid_short("68310000-0000-4000-8000-00000000cafe").s, "0000cafe",
               "an id naming its host: its last 8, not the host's tag");
        is_str(fleetid_short("gb6831000000000123456789abcdef").s, "89abcdef",
               "a sandbox id naming its host: its last 8");
        is_str(fleetid_short("").s, "", "an empty id: empty");
        is_str(fleetid_short(NULL).s, "", "no id: empty");
        ok(fleetid_uuid("h1", a) == 0 && fleetid_uuid("h1", b) == 0, "two ids of one host");
        ok(strcmp(fleetid_short(a).s, fleetid_short(b).s) != 0,
           "two ids of one host have different short ids (%s, %s)", fleetid_short(a).s,
           fleetid_short(b).s);
        ok(fleetid_sandbox("h1", sa) == 0 && strcmp(fleetid_short(sa).s, sa + strlen(sa) - 8) == 0,
           "a host's sandbox id: its random end");
}

int main(void)
{
        test_host_valid();
        test_tag();
        test_uuid();
        test_sandbox();
        test_host_of_refuses();
        test_short();
        return done_testing();
}
