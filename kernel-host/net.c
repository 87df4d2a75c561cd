#include "autoconf.h"

#include "kernel-host/net.h"
#include "protocol/egress.h"
#include "protocol/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IP_TOOL      "/usr/sbin/ip"
#define NFT_TOOL     "/usr/sbin/nft"
#define DNSMASQ_TOOL "/usr/sbin/dnsmasq"
#define SS_TOOL      "/usr/bin/ss"
#define TABLE_PREFIX "glovebox_gbe"
/* 100.127.0.0/16, carved into /30s: slot n is 100.127.0.0 + 4n, the host
 * end +1, the sandbox +2. Shared address space (RFC 6598) that a host's
 * own networks rarely use; sandboxes never reach each other through it. */
#define SUBNET_BASE            0x647f0000u
#define SUBNET_PREFIX          16
#define MAX_SLOTS              16383
#define SCRIPT_MAX             (64 * 1024)
#define RESOLVER_WAIT_MS       2000
#define DNS_PACKETS_PER_SECOND 200 /* from a sandbox to its resolver */

static struct net_egress *active;

static int start_resolver(struct net_egress *ne, const struct hostmsg_network *policy);

static double now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}
static unsigned next_slot;
static bool next_slot_set;

/* ---- running the tools ------------------------------------------------------ */

/* Runs argv (an absolute path first) with input on its stdin, in the
 * network namespace netns_fd (-1: ours), its stdout into out (NULL: none;
 * up to size - 1 bytes). Its stderr is ours: the tools' own error messages
 * land in the log. 0 when it exits 0, else -errno or -EIO. */
static int run_tool(char *const argv[], const char *input, int netns_fd, char *out, size_t size)
{
        static char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
        int in[2] = {-1, -1}, res[2] = {-1, -1};
        size_t len = input ? strlen(input) : 0, done = 0, got = 0;
        int status, rc = 0;
        pid_t pid;

        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(res, O_CLOEXEC) < 0) {
                rc = -errno;
                goto out;
        }
        pid = fork();
        if (pid < 0) {
                rc = -errno;
                goto out;
        }
        if (pid == 0) {
                sigset_t none;

                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) < 0)
                        _exit(126);
                if (dup2(in[0], 0) < 0 || dup2(res[1], 1) < 0)
                        _exit(126);
                /* Not even the gateway's link: a tool gets stdio only. */
                syscall(SYS_close_range, 3u, ~0u, 0u);
                execve(argv[0], argv, envp);
                _exit(127);
        }
        close(in[0]);
        close(res[1]);
        in[0] = res[1] = -1;
        while (done < len) {
                ssize_t n = write(in[1], input + done, len - done);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                done += (size_t)n;
        }
        close(in[1]);
        in[1] = -1;
        for (;;) {
                char scratch[512];
                char *dst = out && got + 1 < size ? out + got : scratch;
                size_t room = out && got + 1 < size ? size - 1 - got : sizeof(scratch);
                ssize_t n = read(res[0], dst, room);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                if (dst != scratch)
                        got += (size_t)n;
        }
        if (out && size)
                out[got] = '\0';
        while (waitpid(pid, &status, 0) < 0) {
                if (errno != EINTR) {
                        rc = -errno;
                        goto out;
                }
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                rc = -EIO;
out:
        for (int i = 0; i < 2; i++) {
                if (in[i] >= 0)
                        close(in[i]);
                if (res[i] >= 0)
                        close(res[i]);
        }
        return rc;
}

static int run_batch(const char *tool, const char *script, int netns_fd)
{
        char *const ip_argv[] = {IP_TOOL, "-batch", "-", NULL};
        char *const nft_argv[] = {NFT_TOOL, "-f", "-", NULL};

        return run_tool(strcmp(tool, IP_TOOL) == 0 ? ip_argv : nft_argv, script, netns_fd, NULL, 0);
}

/* ---- scripts ------------------------------------------------------------------ */

struct script {
        char text[SCRIPT_MAX];
        size_t len;
        bool overflow;
};

static void __attribute__((format(printf, 2, 3))) add(struct script *s, const char *fmt, ...)
{
        va_list ap;
        int n;

        if (s->overflow)
                return;
        va_start(ap, fmt);
        n = vsnprintf(s->text + s->len, sizeof(s->text) - s->len, fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= sizeof(s->text) - s->len)
                s->overflow = true;
        else
                s->len += (size_t)n;
}

static void addr_text(uint32_t addr, char *out, size_t size)
{
        snprintf(out, size, "%u.%u.%u.%u", addr >> 24, (addr >> 16) & 255, (addr >> 8) & 255,
                 addr & 255);
}

static void fail_set(struct hostmsg_failed *fail, const char *step, int error, const char *what)
{
        snprintf(fail->step, sizeof(fail->step), "%s", step);
        fail->error = error;
        snprintf(fail->message, sizeof(fail->message), "network step \"%s\" failed: %s", step,
                 what ? what : strerror(error));
}

/* ---- leftovers --------------------------------------------------------------- */

/* Whether pid is a running kernel-host (a table's owner, by its name). */
static bool kernel_host_alive(int pid)
{
        char path[64], comm[32] = "";
        ssize_t n;
        int fd;

        if (pid <= 0)
                return false;
        snprintf(path, sizeof(path), "/proc/%d/comm", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        n = read(fd, comm, sizeof(comm) - 1);
        close(fd);
        if (n > 0)
                comm[n] = '\0';
        return strncmp(comm, "glovebox-kernel", 15) == 0;
}

void net_init(void)
{
        char *const list_tables[] = {NFT_TOOL, "list", "tables", NULL};
        char *const list_links[] = {IP_TOOL, "-o", "link", "show", NULL};
        static char out[64 * 1024];
        unsigned removed = 0;

        if (access(NFT_TOOL, X_OK) == 0 && run_tool(list_tables, NULL, -1, out, sizeof(out)) == 0) {
                for (char *line = out; line && *line;) {
                        char *end = strchr(line, '\n');
                        char name[64];
                        unsigned slot;
                        int owner;

                        if (end)
                                *end = '\0';
                        owner = -1; /* unnamed: an older version's, dead */
                        if (sscanf(line, "table inet " TABLE_PREFIX "%u_%d", &slot, &owner) >= 1) {
                                char ifname[IF_NAMESIZE + 1];
                                char *const del[] = {NFT_TOOL, "delete", "table",
                                                     "inet",   name,     NULL};
                                char *const del_link[] = {IP_TOOL, "link", "del", ifname, NULL};
                                bool dead = !kernel_host_alive(owner);

                                snprintf(ifname, sizeof(ifname), "gbe%u", slot);
                                if (owner < 0)
                                        snprintf(name, sizeof(name), TABLE_PREFIX "%u", slot);
                                else
                                        snprintf(name, sizeof(name), TABLE_PREFIX "%u_%d", slot,
                                                 owner);
                                /* A dead kernel-host's sandbox may linger a
                                 * moment (its namespace goes asynchronously):
                                 * its pair goes now. */
                                if (dead && if_nametoindex(ifname))
                                        run_tool(del_link, NULL, -1, NULL, 0);
                                if ((dead || if_nametoindex(ifname) == 0) &&
                                    run_tool(del, NULL, -1, NULL, 0) == 0)
                                        removed++;
                        }
                        line = end ? end + 1 : NULL;
                }
        }
        /* A sandbox end still here never reached its sandbox, if its
         * kernel-host died in between. */
        if (access(IP_TOOL, X_OK) == 0 && run_tool(list_links, NULL, -1, out, sizeof(out)) == 0) {
                for (char *line = out; line && *line;) {
                        char *end = strchr(line, '\n');
                        unsigned index, slot;
                        char ifname[IF_NAMESIZE + 1];

                        if (end)
                                *end = '\0';
                        const char *alias = strstr(line, " alias kh");
                        int owner;

                        /* Only a dead kernel-host's: a live one's pair waits
                         * here while its sandbox is made. */
                        if (sscanf(line, "%u: gbi%u", &index, &slot) == 2 && alias &&
                            sscanf(alias, " alias kh%d", &owner) == 1 &&
                            !kernel_host_alive(owner)) {
                                char *const del[] = {IP_TOOL, "link", "del", ifname, NULL};

                                snprintf(ifname, sizeof(ifname), "gbi%u", slot);
                                if (run_tool(del, NULL, -1, NULL, 0) == 0)
                                        removed++;
                        }
                        line = end ? end + 1 : NULL;
                }
        }
        if (removed)
                log_info("removed %u network leftovers of earlier runs", removed);
}

/* ---- one sandbox -------------------------------------------------------------- */

int net_prepare(struct net_egress *ne, const struct hostmsg_network *policy, int prefer,
                char *resolv, size_t resolv_size, struct hostmsg_failed *fail)
{
        double start = now_ms();
        struct script s;
        char path[96];
        int rc = -EAGAIN;
        int fd;

        memset(ne, 0, sizeof(*ne));
        ne->slot = -1;
        if (access(IP_TOOL, X_OK) < 0 || access(NFT_TOOL, X_OK) < 0 ||
            access(DNSMASQ_TOOL, X_OK) < 0) {
                fail_set(fail, "network tools", ENOENT,
                         "egress needs ip (iproute2), nft (nftables) and dnsmasq (dnsmasq-base)");
                return -ENOENT;
        }
        if (!next_slot_set) {
                /* Kernel-hosts side by side start far apart. */
                next_slot = (unsigned)getpid() % MAX_SLOTS;
                next_slot_set = true;
        }
        /* The kernel refuses a link name that exists: the slot is ours
         * only if we made the pair. */
        for (int tries = 0; tries < 65 && rc < 0; tries++) {
                /* The one asked for first, if any (its addresses again). */
                bool preferred = tries == 0 && prefer >= 0 && prefer < MAX_SLOTS;
                unsigned slot = preferred ? (unsigned)prefer : next_slot;
                char *const add_argv[] = {IP_TOOL, "link", "add",  ne->ifname, "type",
                                          "veth",  "peer", "name", ne->peer,   NULL};

                if (tries == 0 && !preferred)
                        continue;
                if (!preferred)
                        next_slot = (next_slot + 1) % MAX_SLOTS;
                snprintf(ne->ifname, sizeof(ne->ifname), "gbe%u", slot);
                snprintf(ne->peer, sizeof(ne->peer), "gbi%u", slot);
                if (if_nametoindex(ne->ifname) || if_nametoindex(ne->peer))
                        continue;
                rc = run_tool(add_argv, NULL, -1, NULL, 0);
                if (rc == 0)
                        ne->slot = (int)slot;
        }
        if (rc < 0) {
                fail_set(fail, "veth pair", -rc, NULL);
                return rc;
        }
        /* Named with its owner, for a successor to tell ours from a live one's. */
        snprintf(ne->table, sizeof(ne->table), TABLE_PREFIX "%d_%d", ne->slot, (int)getpid());
        addr_text(SUBNET_BASE + 4u * (unsigned)ne->slot + 1, ne->host_addr, sizeof(ne->host_addr));
        addr_text(SUBNET_BASE + 4u * (unsigned)ne->slot + 2, ne->sandbox_addr,
                  sizeof(ne->sandbox_addr));
        ne->next = active;
        active = ne;
        /* The host end forwards (per interface: the host's other
         * interfaces are untouched) and speaks no IPv6. */
        snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/disable_ipv6", ne->ifname);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
                if (write(fd, "1", 1) != 1)
                        log_debug("%s: %s", path, strerror(errno));
                close(fd);
        }
        snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/forwarding", ne->ifname);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "1", 1) != 1) {
                rc = -errno;
                if (fd >= 0)
                        close(fd);
                fail_set(fail, "forwarding", -rc, NULL);
                return rc;
        }
        close(fd);
        s.len = 0;
        s.overflow = false;
        /* The owner's pid, for a successor to tell a dead one's pair. */
        add(&s, "link set %s alias kh%d\nlink set %s alias kh%d\n", ne->ifname, (int)getpid(),
            ne->peer, (int)getpid());
        add(&s, "addr add %s/30 dev %s\nlink set %s up\n", ne->host_addr, ne->ifname, ne->ifname);
        rc = run_batch(IP_TOOL, s.text, -1);
        if (rc < 0) {
                fail_set(fail, "host address", -rc, NULL);
                return rc;
        }
        /* Started now, to come up while the sandbox is made: nothing asks it
         * anything before net_attach, which waits for it. */
        rc = start_resolver(ne, policy);
        if (rc < 0) {
                fail_set(fail, "resolver", -rc, NULL);
                return rc;
        }
        snprintf(resolv, resolv_size, "nameserver %s\n", ne->host_addr);
        ne->setup_ms = now_ms() - start;
        return 0;
}

/* Appends "elements = { ... }" for the blocks of rules (domains skipped). */
static void add_elements(struct script *s, const struct egress_rule *rules, size_t n)
{
        bool first = true;

        for (size_t i = 0; i < n; i++) {
                char text[64];

                if (rules[i].is_domain)
                        continue;
                egress_rule_format(&rules[i], text, sizeof(text));
                add(s, "%s%s", first ? "elements = { " : ", ", text);
                first = false;
        }
        if (!first)
                add(s, " }");
}

static size_t parse_rules(char **texts, struct egress_rule *out, size_t max)
{
        size_t n = 0;

        for (size_t i = 0; texts && texts[i] && n < max; i++) {
                if (egress_rule_parse(texts[i], &out[n]) == 0)
                        n++;
        }
        return n;
}

#define MAX_BUILTIN 256

/* What no sandbox reaches unless the operator named it: this host's own
 * addresses and every IPv4 block that is not globally routable (IANA's
 * special-purpose registry): "this network", private networks, shared
 * address space (carrier-grade NAT, Tailscale), loopback, link-local (the
 * cloud metadata address 169.254.169.254 among them), IETF protocol
 * assignments, the documentation and benchmarking blocks, 6to4 relays,
 * multicast and reserved. An address a name resolves to is held to the
 * same: a pinned answer in one of them is refused too. */
static size_t builtin_denied(struct egress_rule *out, size_t max)
{
        static const char *const fixed[] = {"0.0.0.0/8",      "10.0.0.0/8",     "100.64.0.0/10",
                                            "127.0.0.0/8",    "169.254.0.0/16", "172.16.0.0/12",
                                            "192.0.0.0/24",   "192.0.2.0/24",   "192.88.99.0/24",
                                            "192.168.0.0/16", "198.18.0.0/15",  "198.51.100.0/24",
                                            "203.0.113.0/24", "224.0.0.0/3"};
        size_t n = 0;

        for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]) && n < max; i++)
                egress_rule_parse(fixed[i], &out[n++]);
        return n;
}

/* This host's own addresses: never, whatever the operator opened (a block
 * it opened may hold one). */
static size_t host_addresses(struct egress_rule *out, size_t max)
{
        struct ifaddrs *ifs = NULL;
        size_t n = 0;

        if (getifaddrs(&ifs) == 0) {
                for (struct ifaddrs *i = ifs; i && n < max; i = i->ifa_next) {
                        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
                                continue;
                        out[n].is_domain = false;
                        out[n].prefix = 32;
                        out[n].addr = ntohl(((const struct sockaddr_in *)(const void *)i->ifa_addr)
                                                ->sin_addr.s_addr);
                        n++;
                }
                freeifaddrs(ifs);
        }
        return n;
}

static int load_rules(const struct net_egress *ne, const struct hostmsg_network *policy)
{
        static struct egress_rule allow[EGRESS_MAX_RULES], deny[EGRESS_MAX_RULES * 2 + 1],
            builtin[MAX_BUILTIN], except[EGRESS_MAX_RULES], opened[EGRESS_MAX_RULES],
            self[MAX_BUILTIN];
        static struct script s;
        size_t nallow = parse_rules(policy->allow, allow, EGRESS_MAX_RULES);
        /* What the operator opened (its own blocks, not the request's). */
        size_t nopened =
            parse_rules(policy->opened ? policy->opened : policy->allow, opened, EGRESS_MAX_RULES);
        size_t ndeny = parse_rules(policy->deny, deny, EGRESS_MAX_RULES * 2);
        size_t nbuiltin = builtin_denied(builtin, MAX_BUILTIN), nexcept = 0;
        size_t nself = host_addresses(self, MAX_BUILTIN);
        const char *set = "type ipv4_addr; flags interval; auto-merge;";

        /* Other sandboxes: never, whatever the lists say. */
        egress_rule_parse("100.127.0.0/16", &deny[ndeny++]);
        /* An allowed block inside a built-in denial is the operator's
         * explicit word (the gateway lets requests only narrow it). */
        for (size_t i = 0; i < nopened; i++) {
                for (size_t j = 0; j < nbuiltin && !opened[i].is_domain; j++) {
                        if (egress_rule_within(&opened[i], &builtin[j])) {
                                except[nexcept++] = opened[i];
                                break;
                        }
                }
        }
        s.len = 0;
        s.overflow = false;
        add(&s, "table inet %s {\n", ne->table);
        add(&s, "set deny { %s ", set);
        add_elements(&s, deny, ndeny);
        add(&s, " }\nset hostself { %s ", set);
        add_elements(&s, self, nself);
        add(&s, " }\nset builtin { %s ", set);
        add_elements(&s, builtin, nbuiltin);
        add(&s, " }\nset except { %s ", set);
        add_elements(&s, except, nexcept);
        add(&s, " }\nset allow { %s ", set);
        add_elements(&s, allow, nallow);
        /* Filled by the resolver: the addresses its answers gave. */
        add(&s, " }\nset pinned { type ipv4_addr; }\n");
        /* The host itself: only the resolver, on the pair's address, at a
         * rate no lookup needs (a flood would reach the upstream resolver). */
        add(&s,
            "chain input { type filter hook input priority filter - 1; policy accept;\n"
            "iifname \"%s\" ip daddr %s meta l4proto { tcp, udp } th dport 53 "
            "limit rate %u/second burst %u packets accept\n"
            "iifname \"%s\" reject\n}\n",
            ne->ifname, ne->host_addr, DNS_PACKETS_PER_SECOND, DNS_PACKETS_PER_SECOND, ne->ifname);
        add(&s, "chain forward { type filter hook forward priority filter - 1; policy accept;\n");
        /* Inbound never: only answers to what the sandbox opened. */
        if (policy->rate_kib)
                add(&s, "oifname \"%s\" limit rate over %u kbytes/second burst %u kbytes drop\n",
                    ne->ifname, policy->rate_kib, policy->rate_kib < 64 ? 64 : policy->rate_kib);
        add(&s,
            "oifname \"%s\" ct state established,related accept\n"
            "oifname \"%s\" drop\n"
            "iifname != \"%s\" accept\n"
            "meta nfproto ipv6 reject\n"
            /* Its own address only: nothing else is masqueraded. */
            "ip saddr != %s drop\n"
            "ip daddr @deny reject\n"
            "ip daddr @hostself reject\n"
            "ip daddr @builtin ip daddr != @except reject\n",
            ne->ifname, ne->ifname, ne->ifname, ne->sandbox_addr);
        if (policy->rate_kib)
                add(&s, "limit rate over %u kbytes/second burst %u kbytes drop\n", policy->rate_kib,
                    policy->rate_kib < 64 ? 64 : policy->rate_kib);
        add(&s, "ct state established,related accept\n");
        if (policy->max_connections)
                add(&s, "ct state new ct count over %u reject\n", policy->max_connections);
        add(&s, "ip daddr @allow accept\nip daddr @pinned accept\nreject\n}\n");
        add(&s,
            "chain postrouting { type nat hook postrouting priority srcnat; policy accept;\n"
            "ip saddr %s masquerade\n}\n}\n",
            ne->sandbox_addr);
        if (s.overflow)
                return -E2BIG;
        return run_batch(NFT_TOOL, s.text, -1);
}

/* The sandbox's end: moved in, named eth0, addressed, the default route
 * through the host's end. */
static int configure_inside(const struct net_egress *ne, pid_t init_pid, int netns_fd)
{
        char pid_text[16];
        char *const move[] = {IP_TOOL, "link", "set", (char *)ne->peer, "netns", pid_text, NULL};
        struct script s;
        int rc;

        snprintf(pid_text, sizeof(pid_text), "%d", (int)init_pid);
        rc = run_tool(move, NULL, -1, NULL, 0);
        if (rc < 0)
                return rc;
        s.len = 0;
        s.overflow = false;
        /* What net_detach left on lo goes first: the sockets still bound
         * to it were closed. */
        add(&s,
            "addr flush dev lo scope global\nroute flush dev lo\n"
            "link set %s name eth0\naddr add %s/30 dev eth0\nlink set eth0 up\n"
            "route add default via %s\n",
            ne->peer, ne->sandbox_addr, ne->host_addr);
        return run_batch(IP_TOOL, s.text, netns_fd);
}

/* pid 1 of the resolver's own pid namespace, a child of the kernel-host:
 * dnsmasq drops to nobody, which clears a parent-death signal, but this
 * process keeps its own, and when it dies the kernel kills the rest of
 * its namespace. So the resolver dies with the kernel-host, even killed. */
static __attribute__((noreturn)) void keeper_main(char *const argv[])
{
        static char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
        int status;
        pid_t pid;

        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        /* It lives as long as its sandbox: holding the kernel-host's
         * descriptors (other sandboxes' namespaces, the gateway's link)
         * would keep them alive too. */
        syscall(SYS_close_range, 3u, ~0u, 0u);
        pid = fork();
        if (pid < 0)
                _exit(1);
        if (pid == 0) {
                sigset_t none;
                int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);

                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                if (null_fd >= 0) {
                        dup2(null_fd, 0);
                        dup2(null_fd, 1);
                        if (null_fd > 2)
                                close(null_fd);
                }
                execve(argv[0], argv, envp);
                _exit(127);
        }
        while (waitpid(pid, &status, 0) < 0) {
                if (errno != EINTR)
                        _exit(1);
        }
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

/* 12 fixed, a denied name each (up to 2 lists), 2 per allowed name, 2 last. */
#define MAX_RESOLVER_ARGS (16 + 4 * EGRESS_MAX_RULES)

static int start_resolver(struct net_egress *ne, const struct hostmsg_network *policy)
{
        static char args[MAX_RESOLVER_ARGS][EGRESS_MAX_DOMAIN + 96];
        char *argv[MAX_RESOLVER_ARGS + 1];
        struct egress_rule rule;
        bool any_block = false;
        size_t n = 0;
        pid_t pid;

#define ARG(...) snprintf(args[n], sizeof(args[n]), __VA_ARGS__), argv[n] = args[n], n++
        ARG(DNSMASQ_TOOL);
        ARG("--keep-in-foreground");
        ARG("--conf-file=/dev/null");
        ARG("--no-hosts");
        ARG("--no-resolv");
        ARG("--no-poll");
        ARG("--bind-interfaces");
        ARG("--listen-address=%s", ne->host_addr);
        ARG("--user=nobody");
        ARG("--group=nogroup");
        ARG("--pid-file=");
        ARG("--filter-AAAA");
        for (size_t i = 0; policy->deny && policy->deny[i] && n + 4 < MAX_RESOLVER_ARGS; i++) {
                if (egress_rule_parse(policy->deny[i], &rule) == 0 && rule.is_domain)
                        ARG("--address=/%s/", rule.domain);
        }
        for (size_t i = 0; policy->allow && policy->allow[i] && n + 5 < MAX_RESOLVER_ARGS; i++) {
                if (egress_rule_parse(policy->allow[i], &rule) < 0)
                        continue;
                if (!rule.is_domain) {
                        any_block = true;
                        continue;
                }
                if (!policy->dns[0])
                        continue;
                ARG("--server=/%s/%s", rule.domain, policy->dns);
                ARG("--nftset=/%s/4#inet#%s#pinned", rule.domain, ne->table);
        }
        /* Other names: answered only when an address block is allowed (what
         * they resolve to is then reachable or not by address); never
         * pinned. Without one, NXDOMAIN. */
        if (any_block && policy->dns[0])
                ARG("--server=%s", policy->dns);
        else
                ARG("--address=/#/");
        /* An allowed name must not bring a private address within reach
         * (DNS rebinding): such answers are dropped. A service on a private
         * network is allowed by its address block instead. */
        ARG("--stop-dns-rebind");
        /* Nothing about itself: no CHAOS version.bind, authors.bind... */
        ARG("--no-ident");
#undef ARG
        argv[n] = NULL;
        pid = (pid_t)syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, NULL, NULL, NULL, NULL);
        if (pid < 0)
                return -errno;
        if (pid == 0)
                keeper_main(argv);
        ne->keeper = pid;
        return 0;
}

/* Until the resolver accepts on its TCP port (it binds UDP first). */
static int wait_resolver(const struct net_egress *ne)
{
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(53)};
        struct timespec pause = {0, 2 * 1000 * 1000};

        inet_pton(AF_INET, ne->host_addr, &sin.sin_addr);
        for (int waited = 0; waited < RESOLVER_WAIT_MS; waited += 2) {
                int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                int rc;

                if (fd < 0)
                        return -errno;
                rc = connect(fd, (const struct sockaddr *)&sin, sizeof(sin));
                close(fd);
                if (rc == 0)
                        return 0;
                if (ne->keeper && waitpid(ne->keeper, NULL, WNOHANG) != 0)
                        return -ECHILD;
                nanosleep(&pause, NULL);
        }
        return -ETIMEDOUT;
}

int net_attach(struct net_egress *ne, const struct hostmsg_network *policy, pid_t init_pid,
               int netns_fd, struct hostmsg_failed *fail)
{
        double start = now_ms();
        int rc = configure_inside(ne, init_pid, netns_fd);

        if (rc < 0) {
                fail_set(fail, "sandbox interface", -rc, NULL);
                return rc;
        }
        rc = load_rules(ne, policy);
        if (rc < 0) {
                fail_set(fail, "nft rules", -rc, NULL);
                return rc;
        }
        ne->table_loaded = true;
        rc = wait_resolver(ne);
        if (rc < 0) {
                if (rc == -ECHILD)
                        ne->keeper = 0; /* reaped above */
                fail_set(fail, "resolver", -rc, NULL);
                return rc;
        }
        ne->setup_ms += now_ms() - start;
        log_info("sandbox network %s: %s, resolver %s, set up in %.1f ms", ne->ifname,
                 ne->sandbox_addr, ne->host_addr, ne->setup_ms);
        return 0;
}

int net_detach(struct net_egress *ne, int netns_fd)
{
        char mapped[40], left[512];
        char *const kill_argv[] = {SS_TOOL, "-K",  "-tuan", "src", ne->sandbox_addr,
                                   "or",    "src", mapped,  NULL};
        char *const list_argv[] = {SS_TOOL, "-H",  "-tuan", "src", ne->sandbox_addr,
                                   "or",    "src", mapped,  NULL};
        int rc;

        if (ne->slot < 0)
                return 0;
        snprintf(mapped, sizeof(mapped), "[::ffff:%s]", ne->sandbox_addr);
        rc = run_tool(kill_argv, NULL, netns_fd, NULL, 0);
        if (rc == 0)
                rc = run_tool(list_argv, NULL, netns_fd, left, sizeof(left));
        if (rc == 0 && left[strspn(left, " \n")])
                rc = -EADDRINUSE; /* a kernel without SOCK_DESTROY */
        /* Closed sockets keep their addresses, and CRIU binds and
         * connects them again (in repair mode: nothing is sent): the
         * sandbox's address and a route stay, on lo, until net_attach. */
        if (rc == 0) {
                char script[96];

                snprintf(script, sizeof(script),
                         "addr add %s/32 dev lo\nroute replace default dev lo\n",
                         ne->sandbox_addr);
                rc = run_batch(IP_TOOL, script, netns_fd);
        }
        if (rc < 0)
                return rc;
        net_release(ne);
        return 0;
}

void net_release(struct net_egress *ne)
{
        char *const del_table[] = {NFT_TOOL, "delete", "table", "inet", ne->table, NULL};
        char *const del_link[] = {IP_TOOL, "link", "del", ne->ifname, NULL};

        if (ne->slot < 0)
                return;
        if (ne->keeper > 0) {
                kill(ne->keeper, SIGKILL);
                while (waitpid(ne->keeper, NULL, 0) < 0 && errno == EINTR)
                        ;
                ne->keeper = 0;
        }
        if (ne->table_loaded)
                run_tool(del_table, NULL, -1, NULL, 0);
        ne->table_loaded = false;
        /* Gone with the sandbox's namespace, unless it never got there. */
        if (if_nametoindex(ne->ifname))
                run_tool(del_link, NULL, -1, NULL, 0);
        for (struct net_egress **link = &active; *link; link = &(*link)->next) {
                if (*link == ne) {
                        *link = ne->next;
                        break;
                }
        }
        ne->slot = -1;
}

bool net_reaped(pid_t pid)
{
        for (struct net_egress *ne = active; ne; ne = ne->next) {
                if (ne->keeper == pid) {
                        log_warn("sandbox network %s: its resolver exited", ne->ifname);
                        ne->keeper = 0;
                        return true;
                }
        }
        return false;
}
