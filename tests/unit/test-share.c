/* protocol/share.c: one tenant takes at most half of a shared stock. */
#include "autoconf.h"

#include "protocol/share.h"
#include "tests/unit/tap.h"

#include <stdio.h>

static void test_most(void)
{
        is_int(jp_share_most(0), 1, "a stock of none: one take (the stock is empty anyway)");
        is_int(jp_share_most(1), 1, "a stock of one: its one");
        is_int(jp_share_most(2), 1, "of two: one");
        is_int(jp_share_most(4), 2, "of four: two");
        is_int(jp_share_most(5), 3, "of five: three, rounded up");
}

static void test_half_for_one_tenant(void)
{
        struct jp_share s = {0};

        ok(jp_share_may_take(&s, "alice", 4), "alice may take the first");
        is_int(jp_share_took(&s, "alice"), 0, "counted");
        ok(jp_share_may_take(&s, "alice", 4), "and the second");
        is_int(jp_share_took(&s, "alice"), 0, "counted");
        ok(!jp_share_may_take(&s, "alice", 4), "not the third of four");
        ok(jp_share_may_take(&s, "bob", 4), "bob still may");
        is_int(jp_share_took(&s, "bob"), 0, "counted");
        ok(jp_share_may_take(&s, "bob", 4), "bob has his own count");
        ok(!jp_share_may_take(&s, "alice", 4), "alice's stays");
        ok(jp_share_may_take(&s, "alice", 6), "of a larger stock alice takes a third");
        jp_share_reset(&s);
        ok(jp_share_may_take(&s, "alice", 4), "full again: alice may take again");
        jp_share_free(&s);
}

static void test_nobody_in_particular(void)
{
        struct jp_share s = {0};

        for (int i = 0; i < 10; i++) {
                ok(jp_share_may_take(&s, "", 4), "\"\" is never held back (%d)", i);
                jp_share_took(&s, "");
        }
        ok(jp_share_may_take(&s, NULL, 4), "nor NULL");
        is_int(jp_share_took(&s, NULL), 0, "a take by NULL is not counted");
        is_int((int)s.n, 0, "nobody in particular holds no count");
        jp_share_free(&s);
}

static void test_many_tenants(void)
{
        struct jp_share s = {0};
        char name[32];
        size_t bad = 0;

        for (int i = 0; i < 100; i++) {
                snprintf(name, sizeof(name), "t%d", i);
                bad += jp_share_took(&s, name) != 0;
        }
        is_int((int)bad, 0, "a hundred tenants counted");
        is_int((int)s.n, 100, "each once");
        bad = 0;
        for (int i = 0; i < 100; i++) {
                snprintf(name, sizeof(name), "t%d", i);
                bad += jp_share_may_take(&s, name, 2);
        }
        is_int((int)bad, 0, "each has taken its one of two");
        ok(jp_share_may_take(&s, "t100", 2), "a tenant that took none may");
        jp_share_free(&s);
        ok(s.takers == NULL && s.n == 0, "freed and emptied");
}

static void test_names(void)
{
        ok(jp_share_name_valid("alice.ops-1_2"), "letters, digits, '.', '-', '_' name a tenant");
        ok(jp_share_name_valid("012345678901234567890123456789012345678901234567890123456789012"),
           "63 characters do");
        ok(!jp_share_name_valid("0123456789012345678901234567890123456789012345678901234567890123"),
           "64 are too many");
        ok(!jp_share_name_valid(""), "an empty name is refused");
        ok(!jp_share_name_valid("a/b"), "a slash is refused");
        ok(!jp_share_name_valid("a b"), "a space is refused");
        ok(!jp_share_name_valid("ünï"), "non-ASCII is refused");
}

int main(void)
{
        test_names();
        test_most();
        test_half_for_one_tenant();
        test_nobody_in_particular();
        test_many_tenants();
        return done_testing();
}
