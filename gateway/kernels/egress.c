#include "autoconf.h"

#include "gateway/kernels/egress.h"
#include "protocol/egress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rule_list {
        struct egress_rule rules[EGRESS_MAX_RULES];
        size_t count;
};

static struct rule_list operator_allow, operator_deny;
static char upstream_dns[64];
static uint32_t rate_kib, max_connections;

/* Appends the comma-separated rules of text. */
static int parse_list(const char *option, const char *text, struct rule_list *list)
{
        const char *p = text;

        while (*p) {
                char item[EGRESS_MAX_DOMAIN + 8];
                size_t len = strcspn(p, ",");
                int rc;

                while (len > 0 && *p == ' ') {
                        p++;
                        len--;
                }
                if (len >= sizeof(item)) {
                        fprintf(stderr, "glovebox: --%s: a rule is too long\n", option);
                        return -EINVAL;
                }
                memcpy(item, p, len);
                item[len] = '\0';
                while (len > 0 && item[len - 1] == ' ')
                        item[--len] = '\0';
                p += strcspn(p, ",");
                if (*p == ',')
                        p++;
                if (len == 0)
                        continue;
                if (list->count == EGRESS_MAX_RULES) {
                        fprintf(stderr, "glovebox: --%s: more than %d rules\n", option,
                                EGRESS_MAX_RULES);
                        return -EINVAL;
                }
                rc = egress_rule_parse(item, &list->rules[list->count]);
                if (rc < 0) {
                        fprintf(stderr, "glovebox: --%s: '%s' is %s\n", option, item,
                                rc == -EAFNOSUPPORT ? "IPv6, not supported yet"
                                                    : "not an IPv4 address, CIDR block or "
                                                      "domain name");
                        return -EINVAL;
                }
                list->count++;
        }
        return 0;
}

/* The first IPv4 nameserver of /etc/resolv.conf, for domain rules when
 * --egress-dns names none. */
static void host_resolver(char *out, size_t size)
{
        FILE *f = fopen("/etc/resolv.conf", "re");
        char line[256], addr[64];

        out[0] = '\0';
        while (f && fgets(line, sizeof(line), f)) {
                struct egress_rule r;

                if (sscanf(line, "nameserver %63s", addr) == 1 && !strchr(addr, ':') &&
                    egress_rule_parse(addr, &r) == 0 && !r.is_domain) {
                        snprintf(out, size, "%s", addr);
                        break;
                }
        }
        if (f)
                fclose(f);
}

int egress_configure(const struct config *cfg)
{
        bool domains = false;

        memset(&operator_allow, 0, sizeof(operator_allow));
        memset(&operator_deny, 0, sizeof(operator_deny));
        for (size_t i = 0; cfg->egress_allow && cfg->egress_allow[i]; i++) {
                if (parse_list("egress-allow", cfg->egress_allow[i], &operator_allow) < 0)
                        return -EINVAL;
        }
        for (size_t i = 0; cfg->egress_deny && cfg->egress_deny[i]; i++) {
                if (parse_list("egress-deny", cfg->egress_deny[i], &operator_deny) < 0)
                        return -EINVAL;
        }
        for (size_t i = 0; i < operator_allow.count; i++)
                domains = domains || operator_allow.rules[i].is_domain;
        if (*cfg->egress_dns) {
                struct egress_rule r;
                const char *hash = strchr(cfg->egress_dns, '#');
                char addr[64];

                snprintf(addr, sizeof(addr), "%.*s",
                         (int)(hash ? (size_t)(hash - cfg->egress_dns) : strlen(cfg->egress_dns)),
                         cfg->egress_dns);
                if (strlen(cfg->egress_dns) >= sizeof(upstream_dns) ||
                    egress_rule_parse(addr, &r) < 0 || r.is_domain || r.prefix != 32 ||
                    (hash && (strspn(hash + 1, "0123456789") != strlen(hash + 1) || !hash[1] ||
                              strlen(hash + 1) > 5 || strtol(hash + 1, NULL, 10) > 65535))) {
                        fprintf(stderr, "glovebox: --egress-dns must be an IPv4 address, "
                                        "optionally with #PORT\n");
                        return -EINVAL;
                }
                snprintf(upstream_dns, sizeof(upstream_dns), "%s", cfg->egress_dns);
        } else {
                host_resolver(upstream_dns, sizeof(upstream_dns));
        }
        if (domains && !upstream_dns[0]) {
                fprintf(stderr, "glovebox: --egress-allow names domains, but there is no "
                                "resolver to ask: give --egress-dns\n");
                return -EINVAL;
        }
        rate_kib = (uint32_t)cfg->egress_rate_kib;
        max_connections = (uint32_t)cfg->egress_max_connections;
        return 0;
}

bool egress_enabled(void)
{
        return operator_allow.count > 0;
}

static bool denied_by(const struct egress_rule *r, const struct rule_list *deny)
{
        for (size_t i = 0; i < deny->count; i++) {
                if (egress_rule_within(r, &deny->rules[i]))
                        return true;
        }
        return false;
}

static int add_text(char ***v, size_t *n, const struct egress_rule *r)
{
        char text[EGRESS_MAX_DOMAIN + 8];
        char **grown = realloc(*v, (*n + 2) * sizeof(char *));

        if (!grown)
                return -ENOMEM;
        *v = grown;
        egress_rule_format(r, text, sizeof(text));
        grown[*n] = strdup(text);
        grown[*n + 1] = NULL;
        if (!grown[*n])
                return -ENOMEM;
        (*n)++;
        return 0;
}

/* Parses a request's array of rules into list. */
static int request_list(json_t *a, const char *field, const char *name, struct rule_list *list,
                        char *err, size_t errlen)
{
        size_t i;
        json_t *v;

        list->count = 0;
        if (!a || json_is_null(a))
                return 0;
        if (!json_is_array(a) || json_array_size(a) > EGRESS_MAX_RULES) {
                snprintf(err, errlen, "%s.%s must be an array of at most %d rules", field, name,
                         EGRESS_MAX_RULES);
                return -EINVAL;
        }
        json_array_foreach(a, i, v) {
                const char *s = json_string_value(v);
                int rc = s && strlen(s) == json_string_length(v)
                             ? egress_rule_parse(s, &list->rules[list->count])
                             : -EINVAL;

                if (rc < 0) {
                        snprintf(err, errlen, "%s.%s[%zu]: %s%.64s%s", field, name, i,
                                 rc == -EAFNOSUPPORT ? "IPv6 is not supported yet: '" : "'",
                                 s ? s : "",
                                 rc == -EAFNOSUPPORT ? "'"
                                                     : "' is not an IPv4 address, CIDR block or "
                                                       "domain name");
                        return -EINVAL;
                }
                list->count++;
        }
        return 0;
}

int egress_request(json_t *allow_out, json_t *deny_out, const char *field,
                   struct hostmsg_network *net, char *err, size_t errlen)
{
        static struct rule_list asked, denied;
        const struct rule_list *allow = &operator_allow;
        size_t nallow = 0, ndeny = 0, nopened = 0;
        int rc = 0;

        memset(net, 0, sizeof(*net));
        if (!egress_enabled()) {
                snprintf(err, errlen,
                         "%s: this Glovebox allows no egress (its operator set no --egress-allow); "
                         "sandboxes have loopback only",
                         field);
                return -EINVAL;
        }
        if (request_list(allow_out, field, "allowOut", &asked, err, errlen) < 0 ||
            request_list(deny_out, field, "denyOut", &denied, err, errlen) < 0)
                return -EINVAL;
        if (allow_out && !json_is_null(allow_out)) {
                for (size_t i = 0; i < asked.count; i++) {
                        bool within = false;

                        for (size_t j = 0; j < operator_allow.count && !within; j++)
                                within =
                                    egress_rule_within(&asked.rules[i], &operator_allow.rules[j]);
                        if (!within) {
                                /* As the request wrote it. */
                                snprintf(err, errlen,
                                         "%s.allowOut: '%.64s' is outside the operator's egress "
                                         "policy (--egress-allow)",
                                         field, json_string_value(json_array_get(allow_out, i)));
                                return -EINVAL;
                        }
                }
                allow = &asked;
        }
        net->enabled = true;
        net->allow = calloc(1, sizeof(char *));
        net->deny = calloc(1, sizeof(char *));
        if (!net->allow || !net->deny)
                rc = -ENOMEM;
        /* A name under a denied name is no longer allowed (the resolver
         * would answer the more specific name); blocks stay, the firewall's
         * deny set wins over them. */
        for (size_t i = 0; rc == 0 && i < allow->count; i++) {
                if (allow->rules[i].is_domain && (denied_by(&allow->rules[i], &operator_deny) ||
                                                  denied_by(&allow->rules[i], &denied)))
                        continue;
                rc = add_text(&net->allow, &nallow, &allow->rules[i]);
        }
        /* The operator's blocks: what of the reserved ranges it opened. */
        net->opened = rc == 0 ? calloc(1, sizeof(char *)) : NULL;
        if (rc == 0 && !net->opened)
                rc = -ENOMEM;
        for (size_t i = 0; rc == 0 && i < operator_allow.count; i++) {
                if (!operator_allow.rules[i].is_domain)
                        rc = add_text(&net->opened, &nopened, &operator_allow.rules[i]);
        }
        for (size_t i = 0; rc == 0 && i < operator_deny.count; i++)
                rc = add_text(&net->deny, &ndeny, &operator_deny.rules[i]);
        for (size_t i = 0; rc == 0 && i < denied.count; i++)
                rc = add_text(&net->deny, &ndeny, &denied.rules[i]);
        snprintf(net->dns, sizeof(net->dns), "%s", upstream_dns);
        net->rate_kib = rate_kib;
        net->max_connections = max_connections;
        if (rc < 0) {
                egress_network_clear(net);
                snprintf(err, errlen, "out of memory");
        }
        return rc;
}

int egress_kernel_request(json_t *network, struct hostmsg_network *net, char *err, size_t errlen)
{
        const char *key;
        json_t *v;

        memset(net, 0, sizeof(*net));
        if (!network || json_is_null(network) || json_is_false(network))
                return 0;
        if (json_is_true(network))
                return egress_request(NULL, NULL, "network", net, err, errlen);
        if (!json_is_object(network)) {
                snprintf(err, errlen,
                         "\"network\" must be true, false or an object "
                         "{\"allowOut\", \"denyOut\"}");
                return -EINVAL;
        }
        json_object_foreach(network, key, v) {
                if (strcmp(key, "allowOut") != 0 && strcmp(key, "denyOut") != 0) {
                        snprintf(err, errlen, "network.%.64s is not supported (allowOut, denyOut)",
                                 key);
                        return -EINVAL;
                }
        }
        return egress_request(json_object_get(network, "allowOut"),
                              json_object_get(network, "denyOut"), "network", net, err, errlen);
}

static void strv_free(char ***v)
{
        for (size_t i = 0; *v && (*v)[i]; i++)
                free((*v)[i]);
        free(*v);
        *v = NULL;
}

void egress_network_clear(struct hostmsg_network *net)
{
        strv_free(&net->allow);
        strv_free(&net->deny);
        strv_free(&net->opened);
        net->enabled = false;
}

static json_t *strv_json(char *const *v)
{
        json_t *a = json_array();

        for (size_t i = 0; a && v && v[i]; i++)
                json_array_append_new(a, json_string(v[i]));
        return a;
}

json_t *egress_describe(const struct hostmsg_network *net)
{
        return json_pack("{s:o, s:o, s:I, s:I}", "allowOut", strv_json(net->allow), "denyOut",
                         strv_json(net->deny), "rateKiB", (json_int_t)net->rate_kib,
                         "maxConnections", (json_int_t)net->max_connections);
}

static int strv_copy(char *const *from, char ***to)
{
        size_t n = 0;

        while (from && from[n])
                n++;
        *to = calloc(n + 1, sizeof(char *));
        if (!*to)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                (*to)[i] = strdup(from[i]);
                if (!(*to)[i])
                        return -ENOMEM;
        }
        return 0;
}

int egress_network_copy(const struct hostmsg_network *from, struct hostmsg_network *to)
{
        *to = *from;
        to->allow = to->deny = to->opened = NULL;
        if (strv_copy(from->allow, &to->allow) < 0 || strv_copy(from->deny, &to->deny) < 0 ||
            strv_copy(from->opened, &to->opened) < 0) {
                egress_network_clear(to);
                return -ENOMEM;
        }
        return 0;
}
