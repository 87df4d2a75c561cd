/* protocol/ids.c: UUIDs, random hex and the timestamps gateway clients parse. */
#include "autoconf.h"

#include "protocol/ids.h"
#include "tests/unit/tap.h"

#include <ctype.h>
#include <time.h>

#define NUUIDS 200

static int all_lower_hex(const char *s, size_t len)
{
        for (size_t i = 0; i < len; i++) {
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return 0;
        }
        return 1;
}

static void test_uuid4(void)
{
        static char ids[NUUIDS][JP_UUID_SIZE];
        size_t bad_rc = 0, bad_format = 0, bad_version = 0, bad_variant = 0, dups = 0;

        for (size_t i = 0; i < NUUIDS; i++) {
                char *u = ids[i];

                memset(u, 'Z', JP_UUID_SIZE);
                bad_rc += jp_uuid4(u) != 0;
                bad_format += strlen(u) != 36 || !jp_uuid_valid(u, 36) || u[8] != '-' ||
                              u[13] != '-' || u[18] != '-' || u[23] != '-';
                bad_version += u[14] != '4';
                bad_variant += !strchr("89ab", u[19]);
                for (size_t j = 0; j < i; j++)
                        dups += strcmp(ids[j], u) == 0;
        }
        is_uint(bad_rc, 0, "jp_uuid4 succeeds %d times", NUUIDS);
        is_uint(bad_format, 0, "every UUID is 36 lowercase hex characters with 4 hyphens");
        is_uint(bad_version, 0, "every UUID is version 4");
        is_uint(bad_variant, 0, "every UUID has the RFC 4122 variant");
        is_uint(dups, 0, "no two of %d UUIDs are equal", NUUIDS);
        diag("sample: %s", ids[0]);
}

static void test_uuid_valid(void)
{
        const char *good = "1b4e28ba-2fa1-41d2-883f-0016d3cca427";

        ok(jp_uuid_valid(good, strlen(good)), "a canonical UUID is valid");
        ok(jp_uuid_valid("00000000-0000-0000-0000-000000000000", 36), "the nil UUID is valid");
        ok(!jp_uuid_valid("1B4E28BA-2FA1-41D2-883F-0016D3CCA427", 36),
           "uppercase is not canonical");
        ok(!jp_uuid_valid("1b4e28ba-2fa1-41d2-883f-0016d3cca42", 35), "35 characters");
        ok(!jp_uuid_valid("1b4e28ba-2fa1-41d2-883f-0016d3cca4270", 37), "37 characters");
        ok(!jp_uuid_valid(good, 35), "the length argument is honoured");
        ok(!jp_uuid_valid("1b4e28ba2fa1-41d2-883f-0016d3cca427-", 36), "hyphen misplaced");
        ok(!jp_uuid_valid("1b4e28ba-2fa1-41d2-883f-0016d3cca42g", 36), "non-hex character");
        ok(!jp_uuid_valid("1b4e28ba-2fa1-41d2-883f-0016d3cca42-", 36), "hyphen in a hex place");
        ok(!jp_uuid_valid("../../../../../../../../etc/passwd..", 36), "a path of 36 bytes");
        ok(!jp_uuid_valid("", 0), "empty");
}

/* The same derivation on both sides of the kernel-host's link names a
 * fork's processes: checked against Python's hmac (HMAC-SHA256 of old
 * under base, its first 16 bytes as a version 4 UUID). */
static void test_uuid_derive(void)
{
        const char *base = "5b60c965-0000-4000-8000-000000000001";
        const char *old = "1b4e28ba-2fa1-41d2-883f-0016d3cca427";
        char a[JP_UUID_SIZE], b[JP_UUID_SIZE], c[JP_UUID_SIZE];

        jp_uuid_derive(base, old, a);
        is_str(a, "74a11540-3850-4408-98e3-bc8646120346", "derived as Python's hmac derives it");
        ok(jp_uuid_valid(a, strlen(a)) && a[14] == '4' && strchr("89ab", a[19]),
           "a canonical version 4 UUID");
        jp_uuid_derive(base, old, b);
        is_str(b, a, "the same base and id give the same id");
        jp_uuid_derive("5b60c965-0000-4000-8000-000000000002", old, c);
        ok(strcmp(c, a) != 0, "another base (another copy) gives another id");
        jp_uuid_derive(base, "1b4e28ba-2fa1-41d2-883f-0016d3cca428", c);
        ok(strcmp(c, a) != 0, "another id gives another id");
}

static void test_random(void)
{
        char a[2 * 100 + 2], b[2 * 100 + 2];
        unsigned char raw[4096];
        size_t zeros = 0;

        memset(a, 'Z', sizeof(a));
        is_int(jp_random_hex(a, 16), 0, "random hex of 16 bytes");
        is_uint(strlen(a), 32, "32 hex characters");
        ok(all_lower_hex(a, 32), "lowercase hex");
        is_int(a[33], 'Z', "nothing written past the terminator");

        memset(a, 'Z', sizeof(a));
        memset(b, 'Z', sizeof(b));
        is_int(jp_random_hex(a, 100), 0, "random hex longer than one 64-byte chunk");
        is_uint(strlen(a), 200, "200 hex characters");
        ok(all_lower_hex(a, 200), "all of them hex");
        is_int(a[201], 'Z', "nothing written past the terminator (long)");
        is_int(jp_random_hex(b, 100), 0, "a second draw");
        ok(strcmp(a, b) != 0, "two draws differ");
        is_int(jp_random_hex(a, 0), 0, "zero bytes");
        is_str(a, "", "zero bytes give an empty string");

        memset(raw, 0, sizeof(raw));
        is_int(jp_random_bytes(raw, sizeof(raw)), 0, "4096 random bytes");
        for (size_t i = 0; i < sizeof(raw); i++)
                zeros += raw[i] == 0;
        ok(zeros < 100, "random bytes are not mostly zero (%zu zeros)", zeros);
        is_int(jp_random_bytes(raw, 0), 0, "zero random bytes");
}

static void check_timestamp(time_t sec, long nsec, const char *expect)
{
        struct timespec ts = {.tv_sec = sec, .tv_nsec = nsec};
        char out[JP_TIMESTAMP_SIZE];

        memset(out, 'Z', sizeof(out));
        jp_timestamp_format(&ts, out);
        is_str(out, expect, "timestamp %lld.%09ld", (long long)sec, nsec);
}

/* Checks s against %Y-%m-%dT%H:%M:%S.%06dZ character class by class and
 * returns the seconds it names. */
static int parse_timestamp(const char *s, time_t *when)
{
        static const char pattern[] = "dddd-dd-ddTdd:dd:dd.ddddddZ";
        struct tm tm;
        const char *end;

        if (strlen(s) != sizeof(pattern) - 1)
                return 0;
        for (size_t i = 0; pattern[i]; i++) {
                if (pattern[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != pattern[i])
                        return 0;
        }
        memset(&tm, 0, sizeof(tm));
        end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
        if (!end || *end != '.')
                return 0;
        *when = timegm(&tm);
        return 1;
}

static void test_timestamp(void)
{
        char now[JP_TIMESTAMP_SIZE];
        struct timespec before, after;
        time_t parsed = 0;

        check_timestamp(0, 0, "1970-01-01T00:00:00.000000Z");
        check_timestamp(1700000000, 123456789, "2023-11-14T22:13:20.123456Z");
        check_timestamp(1700000000, 999999999, "2023-11-14T22:13:20.999999Z");
        check_timestamp(1700000000, 1000, "2023-11-14T22:13:20.000001Z");
        check_timestamp(1700000000, 999, "2023-11-14T22:13:20.000000Z");
        check_timestamp(951782400, 500000000, "2000-02-29T00:00:00.500000Z");
        check_timestamp(253402300799, 999999000, "9999-12-31T23:59:59.999999Z");

        /* time() reads the coarse clock, which can trail the precise one
         * that jp_timestamp_now reads across a second's boundary. */
        clock_gettime(CLOCK_REALTIME, &before);
        jp_timestamp_now(now);
        clock_gettime(CLOCK_REALTIME, &after);
        ok(parse_timestamp(now, &parsed), "now has the form %%Y-%%m-%%dT%%H:%%M:%%S.%%06dZ (%s)",
           now);
        ok(parsed >= before.tv_sec && parsed <= after.tv_sec, "now is the current UTC time");
}

int main(void)
{
        test_uuid4();
        test_uuid_valid();
        test_uuid_derive();
        test_random();
        test_timestamp();
        return done_testing();
}
