/* Tenants: who a request comes from, and what it may reach. Every API key
 * (gateway/core/keys.h) is a tenant; the --token, when there is one, is an
 * admin key named "admin". Each kernel, session and E2B sandbox records
 * the name of the tenant that made it; a tenant reaches only its own, an
 * admin reaches everything.
 *
 * The gateway has one thread, so "the caller" is the tenant of the request
 * being handled now. The lws callbacks start as "nobody" (reaches nothing)
 * and become a tenant once the request's key is checked (http_authorized);
 * outside any request (timers, kernel traffic) there is no caller and the
 * gateway's own code reaches everything. The lookups every route uses
 * (kernel_find, the kernel list, E2B's sandboxes, sessions) ask
 * tenants_may_reach, so a route added later is confined without doing
 * anything itself. */
#ifndef GLOVEBOX_TENANTS_H
#define GLOVEBOX_TENANTS_H

#include "gateway/core/config.h"
#include "gateway/core/keys.h"

#include <stdbool.h>
#include <stddef.h>

#define TENANTS_TOKEN_NAME "admin" /* the tenant of --token */

struct tenant_caller {
        char name[KEYS_NAME_MAX];
        bool admin;
};

enum tenant_scope_kind {
        TENANT_SCOPE_INTERNAL, /* the gateway's own work: reaches everything */
        TENANT_SCOPE_NOBODY,   /* a request not (yet) authenticated: reaches nothing */
        TENANT_SCOPE_CALLER,   /* a tenant's request */
};

struct tenant_scope {
        enum tenant_scope_kind kind;
        struct tenant_caller caller;
};

/* Loads --keys-file (if any) and adds the token as the admin key. -EINVAL
 * after printing why to stderr. */
int tenants_init(const struct config *cfg);
/* Reads --keys-file again (SIGHUP). A file that fails keeps the keys in
 * force and logs why; -EINVAL then, 0 when the new keys are in force. */
int tenants_reload(void);
void tenants_free(void);

/* A connection admitted under a tenant's key (a kernel's channels, a
 * terminal, a relayed port): a reload that removes the key calls
 * revoked, once, so that the connection ends at once rather than at its
 * next message. The watch is off the list when revoked runs. */
struct tenant_watch {
        struct tenant_watch *next, **link;
        char name[KEYS_NAME_MAX];
        void (*revoked)(struct tenant_watch *w);
};
/* Watches the key of tenant name ("" or NULL: no key, nothing to watch). */
void tenants_watch(struct tenant_watch *w, const char *name,
                   void (*revoked)(struct tenant_watch *w));
/* Stops watching (w may be unwatched already, or zeroed). */
void tenants_unwatch(struct tenant_watch *w);

/* Who presents key (len bytes): true with *out filled, false when nobody.
 * Compared in constant time against every key. */
bool tenants_authenticate(const char *key, size_t len, struct tenant_caller *out);
/* The key in force named name (its quotas), or NULL (removed). */
const struct key_entry *tenants_key(const char *name);
/* Whether the tenant called name still has a key (the token's always). */
bool tenants_exists(const char *name);

/* The caller now; NULL outside any request (internal). */
const struct tenant_caller *tenants_caller(void);
/* Makes c (copied) the caller. */
void tenants_set_caller(const struct tenant_caller *c);
/* Saves the caller in *saved and makes it nobody: at the start of every lws
 * callback of a connection. tenants_scope_restore puts *saved back at its
 * end (callbacks can nest). */
void tenants_scope_enter(struct tenant_scope *saved);
void tenants_scope_restore(const struct tenant_scope *saved);
/* Whether the caller may reach what owner (a tenant's name; "" for
 * nobody's, such as a pooled kernel) owns: always outside requests;
 * never for nobody; for a tenant, its own or everything when admin. */
bool tenants_may_reach(const char *owner);
/* The name new things get as owner: the caller's, or "" (internal). */
const char *tenants_owner_now(void);
/* The name a take from a stock shared by tenants counts for
 * (protocol/share.h): the caller's while there is more than one key, ""
 * (never held back) otherwise: internal, or nobody else to keep a share
 * for. */
const char *tenants_share_name(void);

#endif
