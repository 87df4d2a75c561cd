/* gateway/core/hostcheck.c: the Host names a gateway serves under (the DNS
 * rebinding defence). Each case is a Host as a browser, an SDK or an
 * attacker's page would send it, against a --listen host and an
 * --allow-host list, with the answer Jupyter Server's check gives where
 * it has one. */
#include "autoconf.h"

#include "gateway/core/hostcheck.h"
#include "tests/unit/tap.h"

#include <errno.h>
#include <stdbool.h>

struct host_case {
        const char *host, *listen, *allow;
        bool want;
};

static const struct host_case cases[] = {
    /* Loopback names and addresses, with and without a port. */
    {"127.0.0.1:8888", "127.0.0.1", "", true},
    {"127.0.0.1", "127.0.0.1", "", true},
    {"127.1.2.3:80", "127.0.0.1", "", true},
    {"localhost:8888", "127.0.0.1", "", true},
    {"LOCALHOST:8888", "127.0.0.1", "", true},
    {"localhost.:8888", "127.0.0.1", "", true},
    {"[::1]:8888", "127.0.0.1", "", true},
    {"[::1]", "::1", "", true},
    {"[::ffff:127.0.0.1]:8888", "127.0.0.1", "", true},
    /* DNS rebinding: a name the attacker's name server answers for. */
    {"evil.example", "127.0.0.1", "", false},
    {"evil.example:8888", "127.0.0.1", "", false},
    {"evil.example:8888", "0.0.0.0", "", false},
    {"evil.example:8888", "::", "", false},
    {"127.0.0.1.evil.example", "127.0.0.1", "", false},
    {"localhost.evil.example", "127.0.0.1", "", false},
    {"evillocalhost", "127.0.0.1", "", false},
    /* On loopback, another machine's address is no name of ours (as
     * Jupyter Server); listening beyond loopback, any address is. */
    {"10.0.0.5:8888", "127.0.0.1", "", false},
    {"10.0.0.5:8888", "0.0.0.0", "", true},
    {"203.0.113.7:8888", "10.0.0.5", "", true},
    {"[2001:db8::1]:8888", "::", "", true},
    {"[2001:db8::1]:8888", "::1", "", false},
    /* The --listen host itself, when it is a name. */
    {"gb.internal:8888", "gb.internal", "", true},
    {"GB.Internal.", "gb.internal", "", true},
    /* --allow-host: names, a port on an entry ignored, '*' for any. */
    {"notebook.example:443", "0.0.0.0", "notebook.example", true},
    {"notebook.example", "0.0.0.0", "other.example, notebook.example:443", true},
    {"NOTEBOOK.example", "0.0.0.0", "notebook.example", true},
    {"sub.notebook.example", "0.0.0.0", "notebook.example", false},
    {"evil.example", "127.0.0.1", "*", true},
    {"evil.example", "127.0.0.1", "a.example,*", true},
    /* Malformed: refused, never taken for a name. */
    {"", "127.0.0.1", "", false},
    {":8888", "127.0.0.1", "", false},
    {"localhost:88x", "127.0.0.1", "", false},
    {"localhost:123456", "127.0.0.1", "", false},
    {"local host", "127.0.0.1", "", false},
    {"localhost\r\nX: y", "127.0.0.1", "", false},
    {"[::1", "127.0.0.1", "", false},
    {"[::1]x", "127.0.0.1", "", false},
    {"[evil.example]", "127.0.0.1", "", false},
    {"user@localhost", "127.0.0.1", "", false},
    {"::1", "127.0.0.1", "", false},
};

int main(void)
{
        char name[HOSTCHECK_MAX], small[4];

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const struct host_case *c = &cases[i];

                is_int(hostcheck_allowed(c->host, c->listen, c->allow), c->want,
                       "Host '%s', --listen %s, --allow-host '%s'", c->host, c->listen, c->allow);
        }
        is_int(hostcheck_name("[::1]:8888", name, sizeof(name)), 0, "bracketed name");
        is_str(name, "::1", "brackets and port removed");
        is_int(hostcheck_name("Example.COM.:80", name, sizeof(name)), 0, "name with port");
        is_str(name, "example.com", "lower-cased, trailing dot and port removed");
        is_int(hostcheck_name("example.com", small, sizeof(small)), -E2BIG, "too long for out");
        is_int(hostcheck_name("a:", name, sizeof(name)), 0, "an empty port is allowed");
        ok(hostcheck_is_loopback("127.0.0.1") && hostcheck_is_loopback("::1") &&
               hostcheck_is_loopback("localhost") && hostcheck_is_loopback("127.9.9.9"),
           "loopback listen hosts");
        ok(!hostcheck_is_loopback("0.0.0.0") && !hostcheck_is_loopback("::") &&
               !hostcheck_is_loopback("10.0.0.5") && !hostcheck_is_loopback("gb.internal"),
           "listen hosts beyond loopback");
        return done_testing();
}
