#include "autoconf.h"

#include "gateway/core/ports_domain.h"
#include "gateway/core/config.h"
#include "gateway/core/hostcheck.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The ports domain and its name alone, made once from the configuration:
 * --ports-domain (checked at load), else localhost:PORT when serving on
 * loopback, on every address or on an IPv6 one, else the --listen
 * address; a --listen host that is no name falls back to localhost. "" if
 * none can be made. */
static void make(char *domain, size_t dsize, char *name, size_t nsize)
{
        const struct config *cfg = config_get();
        bool wildcard = strcmp(cfg->host, "0.0.0.0") == 0 || strcmp(cfg->host, "::") == 0;

        if (*cfg->ports_domain)
                snprintf(domain, dsize, "%s", cfg->ports_domain);
        else if (hostcheck_is_loopback(cfg->host) || wildcard || strchr(cfg->host, ':'))
                /* (an IPv6 address makes no name with a label before it) */
                snprintf(domain, dsize, "localhost:%d", cfg->port);
        else
                snprintf(domain, dsize, "%s:%d", cfg->host, cfg->port);
        if (hostcheck_name(domain, name, nsize) < 0) {
                snprintf(domain, dsize, "localhost:%d", cfg->port);
                if (hostcheck_name(domain, name, nsize) < 0)
                        domain[0] = name[0] = '\0';
        }
}

static char domain[HOSTCHECK_MAX], domain_name[HOSTCHECK_MAX];

const char *ports_domain(void)
{
        if (!domain[0] && config_get())
                make(domain, sizeof(domain), domain_name, sizeof(domain_name));
        return domain;
}

const char *ports_domain_name(void)
{
        ports_domain();
        return domain_name;
}
