/* protocol/egress.c: the rules of a network policy, and their trip through
 * the kernel-host's message (protocol/hostmsg_json.c), which refuses any rule
 * that could carry more than digits, dots and name characters into a
 * firewall script or a resolver's command line. */
#include "autoconf.h"

#include "protocol/egress.h"
#include "protocol/hostmsg.h"
#include "tests/unit/tap.h"

#include <errno.h>

static void check_parse(const char *text, int want_rc, const char *want_form)
{
        struct egress_rule r;
        char form[300] = "";
        int rc = egress_rule_parse(text, &r);

        if (rc == 0)
                egress_rule_format(&r, form, sizeof(form));
        is_int(rc, want_rc, "parse '%s' returns %d", text, want_rc);
        if (want_form)
                is_str(form, want_form, "'%s' reads as '%s'", text, want_form);
}

static void test_parse(void)
{
        check_parse("198.51.100.7", 0, "198.51.100.7/32");
        check_parse("203.0.113.0/24", 0, "203.0.113.0/24");
        check_parse("203.0.113.77/24", 0, "203.0.113.0/24"); /* host bits cleared */
        check_parse("0.0.0.0/0", 0, "0.0.0.0/0");
        check_parse("Example.COM", 0, "example.com");
        check_parse("*.example.com", 0, "example.com");
        check_parse("example.com.", 0, "example.com");
        check_parse("a-b_c.example", 0, "a-b_c.example");
        check_parse("2001:db8::/32", -EAFNOSUPPORT, NULL);
        check_parse("1.2.3.4/33", -EINVAL, NULL);
        check_parse("1.2.3.4/-1", -EINVAL, NULL);
        check_parse("1.2.3.4/ 8", -EINVAL, NULL);
        check_parse("1.2.3", -EINVAL, NULL);
        check_parse("256.1.1.1", -EINVAL, NULL);
        check_parse("", -EINVAL, NULL);
        check_parse("-a.example", -EINVAL, NULL);
        check_parse("a-.example", -EINVAL, NULL);
        check_parse("a..example", -EINVAL, NULL);
        check_parse("a example", -EINVAL, NULL);
        check_parse("a;reject", -EINVAL, NULL);
        check_parse("x\"}", -EINVAL, NULL);
        check_parse("a/b", -EINVAL, NULL);
        check_parse("203.", -EINVAL, NULL); /* found by fuzz-egress */
        check_parse("example.123", -EINVAL, NULL);
        check_parse("/4#inet#t#s", -EINVAL, NULL);
}

static bool within(const char *inner, const char *outer)
{
        struct egress_rule a, b;

        return egress_rule_parse(inner, &a) == 0 && egress_rule_parse(outer, &b) == 0 &&
               egress_rule_within(&a, &b);
}

static void test_within(void)
{
        ok(within("10.1.2.0/24", "10.0.0.0/8"), "a block inside a block");
        ok(within("10.0.0.0/8", "10.0.0.0/8"), "a block inside itself");
        ok(!within("10.0.0.0/7", "10.0.0.0/8"), "not a wider block");
        ok(!within("11.0.0.0/24", "10.0.0.0/8"), "not a block beside it");
        ok(within("1.2.3.4", "0.0.0.0/0"), "everything is inside 0.0.0.0/0");
        ok(within("api.example.com", "example.com"), "a subdomain inside its domain");
        ok(within("example.com", "example.com"), "a domain inside itself");
        ok(!within("badexample.com", "example.com"), "not a name that only ends alike");
        ok(!within("example.com", "api.example.com"), "not a parent");
        ok(!within("example.com", "0.0.0.0/0"), "a name is never inside a block");
        ok(!within("1.2.3.4", "example.com"), "a block is never inside a name");
}

static void test_hostmsg_roundtrip(void)
{
        char *allow[] = {"198.18.0.0/15", "public.gbtest", NULL};
        char *deny[] = {"198.18.2.0/24", NULL};
        char *opened[] = {"198.18.0.0/15", NULL};
        char *bad[] = {"x;flush ruleset", NULL};
        struct hostmsg_sandbox m = {.limits = {1024, 1000, 256, 1024}, .sandbox = true}, got;
        json_t *body;

        snprintf(m.sandbox_id, sizeof(m.sandbox_id), "%s", "0a5a5a5a-5a5a-4a5a-8a5a-5a5a5a5a5a5a");
        body = hostmsg_sandbox_encode(&m);
        ok(json_object_get(body, "network") == NULL, "no network: the message is as before");
        is_int(hostmsg_sandbox_decode(body, &got), 0, "and decodes");
        ok(!got.network.enabled, "without network");
        hostmsg_sandbox_clear(&got);
        json_decref(body);

        m.network = (struct hostmsg_network){true, allow, deny, "198.18.1.2#53", 256, 4, opened};
        body = hostmsg_sandbox_encode(&m);
        is_int(hostmsg_sandbox_decode(body, &got), 0, "a network decodes");
        ok(got.network.enabled, "enabled");
        ok(got.network.opened && got.network.opened[0] &&
               strcmp(got.network.opened[0], "198.18.0.0/15") == 0 && !got.network.opened[1],
           "the operator's opened blocks");
        is_str(got.network.allow[1], "public.gbtest", "its allow list");
        is_str(got.network.deny[0], "198.18.2.0/24", "its deny list");
        is_str(got.network.dns, "198.18.1.2#53", "its resolver");
        is_uint(got.network.rate_kib, 256, "its rate");
        is_uint(got.network.max_connections, 4, "its connection cap");
        hostmsg_sandbox_clear(&got);
        json_decref(body);

        m.network.allow = bad;
        body = hostmsg_sandbox_encode(&m);
        is_int(hostmsg_sandbox_decode(body, &got), -EBADMSG, "a rule that is no rule is refused");
        json_decref(body);
        m.network.allow = allow;
        snprintf(m.network.dns, sizeof(m.network.dns), "%s", "1.2.3.4 --conf-file=/x");
        body = hostmsg_sandbox_encode(&m);
        is_int(hostmsg_sandbox_decode(body, &got), -EBADMSG, "a resolver that is no address too");
        json_decref(body);
}

int main(void)
{
        test_parse();
        test_within();
        test_hostmsg_roundtrip();
        return done_testing();
}
