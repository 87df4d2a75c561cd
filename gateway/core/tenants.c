#include "autoconf.h"

#include "gateway/core/tenants.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct keyset *keys;
static char *keys_file; /* NULL: the token alone */
static char *token;     /* the admin key, or NULL */
static bool no_auth;
static struct tenant_watch *watches; /* connections, by the key that opened them */

static void revoke_removed(void);
static struct tenant_scope scope = {.kind = TENANT_SCOPE_INTERNAL};

/* The keys file's set, with the token added as the admin key. On failure
 * err says why. */
static int build(struct keyset **out, char *err, size_t errlen)
{
        struct keyset *ks = NULL;
        int rc;

        if (keys_file)
                rc = keyset_load(keys_file, &ks, err, errlen);
        else
                rc = (ks = keyset_new()) ? 0 : -ENOMEM;
        if (rc < 0)
                return rc;
        if (token) {
                rc = keyset_add_admin(ks, TENANTS_TOKEN_NAME, token);
                if (rc == -EEXIST)
                        snprintf(err, errlen,
                                 "the name \"%s\" or the key is the token's (--token, "
                                 "--token-file or GLOVEBOX_TOKEN): use another",
                                 TENANTS_TOKEN_NAME);
                else if (rc < 0)
                        snprintf(err, errlen, "%s", strerror(-rc));
                if (rc < 0) {
                        keyset_destroy(&ks);
                        return -EINVAL;
                }
        }
        *out = ks;
        return 0;
}

int tenants_init(const struct config *cfg)
{
        char err[512] = "";

        no_auth = cfg->no_auth;
        keys_file = cfg->keys_file && *cfg->keys_file ? strdup(cfg->keys_file) : NULL;
        token = cfg->token ? strdup(cfg->token) : NULL;
        if ((cfg->keys_file && *cfg->keys_file && !keys_file) || (cfg->token && !token)) {
                fprintf(stderr, "glovebox: out of memory\n");
                return -EINVAL;
        }
        if (build(&keys, err, sizeof(err)) < 0) {
                fprintf(stderr, "glovebox: --keys-file %s: %s\n", keys_file ? keys_file : "", err);
                return -EINVAL;
        }
        if (keys_file)
                log_info("keys: %zu from --keys-file %s%s", keys->count - (token ? 1 : 0),
                         keys_file, token ? ", and the token as admin" : "");
        return 0;
}

int tenants_reload(void)
{
        struct keyset *fresh = NULL;
        char err[512] = "";

        if (!keys_file) {
                log_info("SIGHUP: no --keys-file to read again");
                return 0;
        }
        if (build(&fresh, err, sizeof(err)) < 0) {
                log_error("SIGHUP: --keys-file %s refused, the %zu keys in force stay: %s",
                          keys_file, keys->count, err);
                return -EINVAL;
        }
        keyset_destroy(&keys);
        keys = fresh;
        log_info("SIGHUP: %zu keys in force from --keys-file %s", keys->count, keys_file);
        revoke_removed();
        return 0;
}

void tenants_free(void)
{
        keyset_destroy(&keys);
        free(keys_file);
        keys_file = NULL;
        if (token) {
                explicit_bzero(token, strlen(token));
                free(token);
                token = NULL;
        }
}

void tenants_watch(struct tenant_watch *w, const char *name,
                   void (*revoked)(struct tenant_watch *w))
{
        tenants_unwatch(w);
        if (!name || !*name)
                return;
        snprintf(w->name, sizeof(w->name), "%s", name);
        w->revoked = revoked;
        w->next = watches;
        if (watches)
                watches->link = &w->next;
        w->link = &watches;
        watches = w;
}

void tenants_unwatch(struct tenant_watch *w)
{
        if (!w->link)
                return;
        *w->link = w->next;
        if (w->next)
                w->next->link = w->link;
        w->next = NULL;
        w->link = NULL;
}

/* Tells every connection whose key the reload removed. A revoked callback
 * may unwatch others (a relay ending takes its connection with it), so
 * the walk starts over after each. */
static void revoke_removed(void)
{
        size_t told = 0;
        bool again = true;

        while (again) {
                again = false;
                for (struct tenant_watch *w = watches; w; w = w->next) {
                        if (tenants_exists(w->name))
                                continue;
                        tenants_unwatch(w);
                        w->revoked(w);
                        told++;
                        again = true;
                        break;
                }
        }
        if (told)
                log_info("SIGHUP: %zu connections of removed keys closed", told);
}

bool tenants_authenticate(const char *key, size_t len, struct tenant_caller *out)
{
        const struct key_entry *e;

        memset(out, 0, sizeof(*out));
        if (no_auth) {
                snprintf(out->name, sizeof(out->name), "%s", TENANTS_TOKEN_NAME);
                out->admin = true;
                return true;
        }
        e = keyset_match(keys, key, len);
        if (!e)
                return false;
        snprintf(out->name, sizeof(out->name), "%s", e->name);
        out->admin = e->admin;
        return true;
}

const struct key_entry *tenants_key(const char *name)
{
        return keyset_find(keys, name);
}

bool tenants_exists(const char *name)
{
        return no_auth || keyset_find(keys, name) != NULL;
}

const struct tenant_caller *tenants_caller(void)
{
        static const struct tenant_caller nobody = {.name = "", .admin = false};

        switch (scope.kind) {
        case TENANT_SCOPE_INTERNAL:
                return NULL;
        case TENANT_SCOPE_NOBODY:
                return &nobody;
        default:
                return &scope.caller;
        }
}

void tenants_set_caller(const struct tenant_caller *c)
{
        scope.kind = TENANT_SCOPE_CALLER;
        scope.caller = *c;
}

void tenants_scope_enter(struct tenant_scope *saved)
{
        *saved = scope;
        scope.kind = TENANT_SCOPE_NOBODY;
}

void tenants_scope_restore(const struct tenant_scope *saved)
{
        scope = *saved;
}

bool tenants_may_reach(const char *owner)
{
        switch (scope.kind) {
        case TENANT_SCOPE_INTERNAL:
                return true;
        case TENANT_SCOPE_NOBODY:
                return false;
        default:
                /* A key removed since the request was admitted reaches
                 * nothing more. */
                if (!tenants_exists(scope.caller.name))
                        return false;
                return scope.caller.admin ||
                       (owner && *owner && strcmp(owner, scope.caller.name) == 0);
        }
}

const char *tenants_owner_now(void)
{
        return scope.kind == TENANT_SCOPE_CALLER ? scope.caller.name : "";
}

const char *tenants_share_name(void)
{
        return keys && keys->count > 1 ? tenants_owner_now() : "";
}
