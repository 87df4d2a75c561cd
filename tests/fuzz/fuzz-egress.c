/* libFuzzer target for egress rules (protocol/egress.c), which reach nft
 * scripts and dnsmasq's command line.
 *
 * Invariants: a rule that parses is written in its normal form with
 * nothing but lowercase letters, digits, '.', '-', '_' and '/'; that form
 * parses to the same rule; a rule lies within itself. */
#include "autoconf.h"

#include "protocol/egress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what, const char *text)
{
        fprintf(stderr, "fuzz-egress: invariant broken: %s: '%s'\n", what, text);
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char text[512], form[EGRESS_MAX_DOMAIN + 32];
        struct egress_rule rule, again;

        if (size >= sizeof(text))
                return 0;
        memcpy(text, data, size);
        text[size] = '\0';
        if (egress_rule_parse(text, &rule) < 0)
                return 0;
        egress_rule_format(&rule, form, sizeof(form));
        if (strspn(form, "abcdefghijklmnopqrstuvwxyz0123456789.-_/") != strlen(form) || !form[0])
                fail("a character outside the rule alphabet", form);
        if (egress_rule_parse(form, &again) < 0)
                fail("the normal form does not parse", form);
        if (again.is_domain != rule.is_domain || again.addr != rule.addr ||
            again.prefix != rule.prefix || strcmp(again.domain, rule.domain) != 0)
                fail("the normal form is another rule", form);
        if (!egress_rule_within(&rule, &rule))
                fail("a rule outside itself", form);
        return 0;
}
