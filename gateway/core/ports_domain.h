/* Where sandboxes' ports are reached by name, {port}-{id}.DOMAIN
 * (ports/ serves them; E2B's create and connect answer the domain): from
 * the configuration, made once. */
#ifndef GLOVEBOX_PORTS_DOMAIN_H
#define GLOVEBOX_PORTS_DOMAIN_H

/* The domain, "name[:port]"; "" when none can be made. */
const char *ports_domain(void);
/* Its name alone, lower case, as Host names are matched. */
const char *ports_domain_name(void);

#endif
